"""A zoo of the kernels a transformer's inference compiles, written with Tegula's own
programs (tegula.kernels), for timing many cold compiles at once: the autotuner's and
par_compile's regime, not one large kernel.

Per replica, 42 kernels over four model sizes (hidden, intermediate) of Llama and Qwen
shapes and three grouped-query head layouts:
  gemm       24  the q/k/v/o projection (rows x hidden x hidden) and the up projection
                 (rows x intermediate x hidden), three tiles each
  attention   6  grouped-query attention forward, two query tiles per head layout
  rmsnorm     4  over the hidden size
  swiglu      4  over the intermediate size
  softmax     4  over the hidden size
Each (family, shape, tile, replica, salt) is its own translation unit, so a salted zoo
compiles anew rather than hitting the cache: with shift = replica + salt, the row count
(256 + 128 * shift) is a constant of the attention code, the GEMM's K grows by 64 * shift
(the GEMM's code does not depend on its rows), the norm's epsilon by a factor (1 + shift)
and the softmax and SwiGLU widths by 8 * shift (shift 0: the models' own sizes)."""
import tegula.kernels.flash_attention as fa
import tegula.kernels.gated_mlp as gm
import tegula.kernels.gemm as gemm
import tegula.kernels.rmsnorm as rms
import tegula.kernels.row_softmax as sm
from tegula.kernels._common import plan_rows, plan_tile

MODEL_SIZES = ((2048, 5632), (3584, 18944), (4096, 14336), (5120, 13824))
HEAD_LAYOUTS = ((32, 8, 128), (28, 4, 128), (40, 8, 128))
GEMM_TILES = ((64, 64, 32), (128, 128, 32), (128, 64, 64))
QUERY_TILES = (64, 128)


def build(scale: int = 1, salt: int = 0, dtype: str = "float16") -> list:
    """[(family, name, prim_func)] of `scale` replicas of the zoo."""
    zoo = []
    for replica in range(scale):
        rows = 256 + 128 * (replica + salt)
        shift = replica + salt
        for hidden, inter in MODEL_SIZES:
            for bm, bn, bk in GEMM_TILES:
                tile = dict(block_M=bm, block_N=bn, block_K=bk, num_stages=2, threads=128, dtype=dtype)
                k = hidden + 64 * shift
                zoo.append(("gemm", f"qkv_{hidden}_{bm}x{bn}x{bk}_{rows}", gemm.matmul_program(rows, hidden, k, **tile)))
                zoo.append(("gemm", f"up_{hidden}x{inter}_{bm}x{bn}x{bk}_{rows}", gemm.matmul_program(rows, inter, k, **tile)))
        for heads, kv_heads, dim in HEAD_LAYOUTS:
            for bm in QUERY_TILES:
                zoo.append(("attention", f"gqa_{heads}x{kv_heads}x{dim}_bm{bm}_{rows}",
                            fa.flash_attention_program(1, heads, kv_heads, rows, rows, dim, block_M=bm, block_N=64,
                                                       num_stages=1, threads=128, dtype=dtype)))
        for hidden, inter in MODEL_SIZES:
            p = plan_rows(hidden, 2)
            zoo.append(("rmsnorm", f"rmsnorm_{hidden}_{rows}",
                        rms.rms_norm_program(hidden, dtype, 1e-6 * (1 + shift), False, p.blk_m, p.threads, p.n_pad,
                                             p.chunks)))
            t = plan_tile(inter + 8 * shift, 2)
            zoo.append(("swiglu", f"swiglu_{inter}_{rows}",
                        gm.swiglu_program(inter + 8 * shift, dtype, False, t.block_m, t.block_n, t.threads)))
            q = plan_rows(hidden + 8 * shift, 2)
            zoo.append(("softmax", f"softmax_{hidden}_{rows}",
                        sm.softmax_program(hidden + 8 * shift, dtype, q.blk_m, q.threads, q.n_pad, q.chunks)))
    return zoo
