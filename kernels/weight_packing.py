"""Packed 4-bit weights for `tegula.kernels.dequant_gemm.w4a16_gemm`: building them from a
float weight (round-to-nearest INT4 per group, symmetric or with zero points; FP4 e2m1 with
e8m0 (MXFP4) or e4m3 scales), packing and unpacking the two codes a byte (element 2i in the
low nibble), and `dequantize`, the float32 W the kernel's definition reads (the tests' and
benchmarks' reference). Plain torch: these run once per weight, not per call."""
import torch

from ._common import describe

HALF_DTYPES = (torch.float16, torch.bfloat16)
E8M0_DTYPE = getattr(torch, "float8_e8m0fnu", None)
E4M3_DTYPE = torch.float8_e4m3fn
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """(N, K) integer codes (-8..7 or 0..15; only the low 4 bits are kept) -> (N, K / 2)
    uint8, element 2i in the low nibble."""
    if q.dim() < 1 or q.shape[-1] % 2:
        raise ValueError(f"pack_int4: q's last dimension must be even, got {describe(q)}")
    nib = q.to(torch.int32) & 15
    return (nib[..., 0::2] | (nib[..., 1::2] << 4)).to(torch.uint8)


def unpack_4bit(qweight: torch.Tensor) -> torch.Tensor:
    """(N, K / 2) bytes -> (N, K) int64 nibbles 0..15, element 2i from the low nibble."""
    b = qweight.view(torch.uint8).to(torch.int64)
    return torch.stack([b & 15, b >> 4], dim=-1).flatten(-2)


def _groups(w, group_size):
    N, K = w.shape
    group = K if group_size == -1 else group_size
    G = -(-K // group)
    pad = G * group - K
    wp = torch.nn.functional.pad(w.float(), (0, pad))
    return wp.reshape(N, G, group), group, K


def quantize_int4(w: torch.Tensor, group_size: int = 128, symmetric: bool = True, scale_dtype=None):
    """Round-to-nearest int4 quantization of a float weight (N, K), per group of
    group_size columns (-1: per row). Returns (qweight (N, K/2) uint8, scales (N, G) in
    scale_dtype (default w's dtype when fp16/bf16, else float32), zeros (N, G) uint8 or
    None). symmetric: q = round(w / s) in -8..7 with s = absmax / 7 (max(|w|) maps to +-7);
    else q in 0..15 with s = (max - min) / 15, z = round(-min / s)."""
    if w.dim() != 2 or w.shape[1] % 2:
        raise ValueError(f"quantize_int4: w must be (N, K) with K even, got {describe(w)}")
    if scale_dtype is None:
        scale_dtype = w.dtype if w.dtype in HALF_DTYPES else torch.float32
    wg, group, K = _groups(w, group_size)
    if symmetric:
        s = (wg.abs().amax(-1) / 7).to(scale_dtype)
        sf = s.float().clamp_min(torch.finfo(torch.float32).tiny).unsqueeze(-1)
        q = torch.round(wg / sf).clamp(-8, 7)
        z = None
    else:
        lo, hi = wg.amin(-1).clamp_max(0), wg.amax(-1).clamp_min(0)
        s = ((hi - lo) / 15).to(scale_dtype)
        sf = s.float().clamp_min(torch.finfo(torch.float32).tiny).unsqueeze(-1)
        z = torch.round(-lo.unsqueeze(-1) / sf).clamp(0, 15)
        q = torch.round(wg / sf + z).clamp(0, 15)
        z = z.squeeze(-1).to(torch.uint8)
    q = q.reshape(w.shape[0], -1)[:, :K]
    return pack_int4(q), s, z


def quantize_fp4(w: torch.Tensor, group_size: int = 32, scale_format: str = "e8m0"):
    """e2m1 quantization of a float weight (N, K) per group of group_size columns.
    scale_format "e8m0" (MXFP4: group 32, scales torch.float8_e8m0fnu, the power of two
    2^(floor(log2(absmax)) - 2) as OCP's MX conversion picks, values past 6 saturating) or
    "e4m3" (NVFP4-like: group 16, scales float8_e4m3fn = absmax / 6). Returns
    (qweight (N, K/2) uint8, scales (N, G))."""
    if w.dim() != 2 or w.shape[1] % 2:
        raise ValueError(f"quantize_fp4: w must be (N, K) with K even, got {describe(w)}")
    if scale_format not in ("e8m0", "e4m3"):
        raise ValueError(f"quantize_fp4: scale_format must be 'e8m0' or 'e4m3', got {scale_format!r}")
    wg, group, K = _groups(w, group_size)
    amax = wg.abs().amax(-1)
    if scale_format == "e8m0":
        exp = torch.floor(torch.log2(amax.clamp_min(2.0 ** -125))) - 2
        bits = (exp + 127).clamp(0, 254).to(torch.uint8)
        s = bits.view(E8M0_DTYPE) if E8M0_DTYPE is not None else bits
        sf = torch.exp2(bits.float() - 127)
    else:
        s = (amax / 6).clamp(max=448.0).to(E4M3_DTYPE)
        sf = s.float()
    v = wg / sf.clamp_min(torch.finfo(torch.float32).tiny).unsqueeze(-1)
    table = torch.tensor(E2M1_VALUES, device=w.device)
    code = (v.abs().unsqueeze(-1) - table).abs().argmin(-1)      # nearest magnitude (ties to the lower)
    code = code | (torch.signbit(v).to(torch.int64) << 3)
    code = code.reshape(w.shape[0], -1)[:, :K]
    return pack_int4(code), s


def dequantize(qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None = None, group_size: int = 128,
               weight_format: str = "int4") -> torch.Tensor:
    """W (N, K) in float32, exactly as the kernel's definition reads it (for references)."""
    nib = unpack_4bit(qweight)
    N, K = nib.shape
    group = K if group_size == -1 else group_size
    if weight_format == "int4":
        q = (nib - zeros.to(torch.int64).repeat_interleave(group, 1)[:, :K]) if zeros is not None else (nib ^ 8) - 8
        vals = q.float()
    else:
        mag = torch.tensor(E2M1_VALUES, device=qweight.device)[nib & 7]
        vals = torch.where(nib >= 8, -mag, mag)
    if scales.dtype == torch.uint8:
        sf = torch.exp2(scales.float() - 127)
    else:
        sf = scales.float()
    return vals * sf.repeat_interleave(group, 1)[:, :K]
