"""tegula.tools.plot_layout, kernel.plot_layout and `python -m tegula layout`, checked on
what they draw: the (thread, register) of every element of the tensor-core accumulators
against the PTX ISA's fragment layouts, written out here; the colours sampled from the
PNG and the cells' labels; a swizzled operand tile's addresses against the hardware's
128-byte swizzle; bank conflicts counted by hand; a reduction's replicated output."""
import importlib

import numpy as np
import pytest

pytest.importorskip("matplotlib")

import tegula  # noqa: E402
import tegula.language as T  # noqa: E402
from tegula.kernels._common import plan_rows  # noqa: E402
from tegula.tools import plot_layout  # noqa: E402
from tegula.tools.layout_plot import bank_color, thread_color  # noqa: E402

# The modules, not the entry points `tegula.kernels` binds over some of their names.
gemm = importlib.import_module("tegula.kernels.gemm")
softmax = importlib.import_module("tegula.kernels.row_softmax")


def _gemm_kernel(target):
    """The 128 x 128 x 64 tile of matmul, 128 threads: on sm_80 four warps of 64 x 64
    (mma.sync), on sm_90a one warpgroup of two m64n128 wgmma instructions."""
    func = gemm.matmul_program(256, 256, 256, block_M=128, block_N=128, block_K=64, num_stages=3, threads=128)
    return tegula.compile(func, out_idx=[-1], target=target)


@pytest.fixture(scope="module")
def gemm_sm80():
    return _gemm_kernel("sm_80")


@pytest.fixture(scope="module")
def gemm_sm90():
    return _gemm_kernel("sm_90a")


def mma_sync_accumulator(m, n, warps_m, warps_n):
    """(row, col) -> (thread, register) of the mma.sync m16n8k16 accumulator (PTX ISA:
    lane l holds c0, c1 at row l / 4, columns 2 (l % 4) + {0, 1}, and c2, c3 at row l / 4 + 8),
    over warps tiling the block as gemm.h documents: warp w at tile (w % WM, w / WM), its
    registers [mi][ni][c]."""
    tm, tn = m // warps_m, n // warps_n
    out = {}
    for t in range(32 * warps_m * warps_n):
        w, lane = divmod(t, 32)
        for mi in range(tm // 16):
            for ni in range(tn // 8):
                for c in range(4):
                    row = (w % warps_m) * tm + 16 * mi + lane // 4 + 8 * (c // 2)
                    col = (w // warps_m) * tn + 8 * ni + 2 * (lane % 4) + c % 2
                    out[row, col] = (t, (mi * (tn // 8) + ni) * 4 + c)
    return out


def wgmma_accumulator(m, n):
    """(row, col) -> (thread, register) of one warpgroup's wgmma m64nNk16 f32 accumulators
    stacked along M (PTX ISA: thread 32 w + l holds d[i] at row 16 w + l / 4 + 8 ((i / 2) % 2),
    column 8 (i / 4) + 2 (l % 4) + i % 2, i < N / 2); instruction mi's registers follow mi - 1's."""
    out = {}
    for t in range(128):
        w, lane = divmod(t, 32)
        for mi in range(m // 64):
            for i in range(n // 2):
                row = 64 * mi + 16 * w + lane // 4 + 8 * ((i // 2) % 2)
                col = 8 * (i // 4) + 2 * (lane % 4) + i % 2
                out[row, col] = (t, mi * (n // 2) + i)
    return out


def _check_fragment_picture(pic, expected, tmp_path):
    rows, cols = pic.grid
    assert len(expected) == rows * cols
    for (r, c), holder in expected.items():
        assert pic.holders_of(r, c) == [holder], (r, c)
        assert (pic.thread[r, c], pic.register[r, c], pic.copies[r, c]) == (holder[0], holder[1], 1)
    # The PNG: the colour at each sampled cell's centre is its thread's, and no other's.
    import matplotlib.image

    image = matplotlib.image.imread(pic.path)[..., :3]
    palette = np.array([thread_color(t) for t in range(pic.threads)])
    rng = np.random.default_rng(0)
    cells = [(r, 0) for r in range(rows)] + [tuple(rng.integers(0, (rows, cols))) for _ in range(200)]
    for r, c in cells:
        x, y = pic.pixel_of(r, c)
        seen = image[int(round(y)), int(round(x))]
        nearest = int(np.argmin(np.abs(palette - seen).max(axis=1)))
        assert nearest == expected[r, c][0], f"cell ({r}, {c}) is drawn in thread {nearest}'s colour"


def _labels(pic):
    """(row, col) -> the text drawn in that cell."""
    out = {}
    for text in pic.axes.texts:
        x, y = text.get_position()
        out[int(y), int(x)] = text.get_text()
    return out


def test_mma_sync_accumulator(gemm_sm80, tmp_path):
    pic = gemm_sm80.plot_layout("C_local", str(tmp_path / "c80.png"))
    assert (pic.threads, pic.registers, pic.grid) == (128, 128, (128, 128))
    expected = mma_sync_accumulator(128, 128, 2, 2)
    _check_fragment_picture(pic, expected, tmp_path)
    # A labelled window: every cell says T<thread> R<register>; warp lines where warps meet.
    small = gemm_sm80.plot_layout("C_local", str(tmp_path / "c80w.png"), window=((56, 72), (56, 72)))
    labels = _labels(small)
    assert len(labels) == 16 * 16
    for (r, c), text in labels.items():
        t, s = expected[r, c]
        assert text == f"T{t}\nR{s}"


def test_wgmma_accumulator(gemm_sm90, tmp_path):
    pic = plot_layout(gemm_sm90, str(tmp_path / "c90.png"), buffer="C_local")
    assert "wgmma" in pic.description
    _check_fragment_picture(pic, wgmma_accumulator(128, 128), tmp_path)


def _swizzle128(byte):
    """The copy engine's and wgmma's 128-byte swizzle: byte address bits 4-6 xor bits 7-9."""
    return byte ^ (((byte >> 7) & 7) << 4)


def test_swizzled_operand_tiles(gemm_sm90, tmp_path):
    a = gemm_sm90.layout_of("A_shared")  # 128 x 64 float16: rows of 128 bytes
    b = gemm_sm90.layout_of("B_shared")  # 64 x 128 float16: two 128-byte panels of all rows
    assert (a.storage, b.storage) == ("swizzled", "panelled")
    assert a.base % 1024 == 0 and b.base % 1024 == 0
    for r in range(128):
        for c in range(64):
            assert a.offsets[r * 64 + c] * 2 == _swizzle128(r * 128 + c * 2)
    stored_rows = b.stored_shape[0]  # the pipeline's stages stacked along rows
    assert stored_rows == 3 * 64
    for r in range(64):
        for c in range(128):
            panel, cc = divmod(c, 64)
            assert b.offsets[r * 128 + c] * 2 == panel * stored_rows * 128 + _swizzle128(r * 128 + cc * 2)
    # Thread t reading 16 bytes of row t (ldmatrix's pattern): no conflict swizzled; the
    # same tile stored plain puts a phase's 8 rows in the same 4 banks: 8-way, 7 extra
    # wavefronts in each of the 4 phases.
    pic = plot_layout(a, str(tmp_path / "a.png"))
    assert (pic.conflict_ways, pic.conflicts, pic.conflict.any()) == (1, 0, False)
    plain = plot_layout("plain", str(tmp_path / "plain.png"), shape=(128, 64), dtype="float16")
    assert (plain.conflict_ways, plain.conflicts) == (8, 28)
    assert plain.conflict.sum() == 32 * 8 and plain.conflict[:32, :8].all()
    assert "8-way bank conflict" in plain.title
    # A vectorised copy's walk (thread t: the t-th 16 bytes) is conflict-free either way.
    assert plot_layout("plain", shape=(128, 64), dtype="float16", access="contiguous", draw=False).conflicts == 0
    # Rows of 64 bytes, plain: rows r and r + 2 share banks, so 4-way (3 extra a phase);
    # swizzled by r / 2 % 4, conflict-free.
    assert plot_layout("plain", shape=(32, 32), dtype="float16", draw=False).conflict_ways == 4
    assert plot_layout("plain", shape=(32, 32), dtype="float16", draw=False).conflicts == 12
    assert plot_layout("swizzled", shape=(32, 32), dtype="float16", draw=False).conflicts == 0
    # Cells are coloured by bank, labelled with their offset.
    import matplotlib.image

    image = matplotlib.image.imread(pic.path)[..., :3]
    for r, c in [(0, 0), (3, 10), (7, 63), (100, 17)]:
        x, y = pic.pixel_of(r, c)
        assert np.abs(image[int(round(y)), int(round(x))] - bank_color(int(pic.bank[r, c]))).max() < 2 / 255
        assert pic.bank[r, c] == (a.base + a.offsets[r * 64 + c] * 2) // 4 % 32
    small = plot_layout(a, window=((0, 8), (0, 16)))
    labels = {rc: text for rc, text in _labels(small).items() if not text.startswith("t")}
    assert labels[3, 10] == str(3 * 64 + (1 ^ 3) * 8 + 2)


def test_swizzled_kind_alone():
    pic = plot_layout("swizzled", shape=(64, 64), dtype="float16", draw=False)
    for r in range(64):
        for c in range(64):
            assert pic.offset[r, c] * 2 == _swizzle128(r * 128 + c * 2)


def test_reduce_output_replicated(tmp_path):
    # 512-wide rows: 8 rows a block of 256 threads; each row's max is held by every
    # thread that held part of the row.
    plan = plan_rows(512, 2)
    kernel = tegula.compile(softmax.softmax_program(512, "float16", plan.blk_m, plan.threads, plan.n_pad),
                            out_idx=[-1], target="sm_90a")
    source = kernel.layout_of("s")
    row_threads = {}
    for flat, holders in enumerate(source.holders):
        row_threads.setdefault(flat // 512, set()).update(t for t, _ in holders)
    pic = kernel.plot_layout("row_max", str(tmp_path / "row_max.png"))
    assert pic.grid == (1, plan.blk_m)
    labels = _labels(pic)
    for i in range(plan.blk_m):
        threads = [t for t, _ in pic.holders_of(i)]
        assert set(threads) == row_threads[i] and len(threads) == len(row_threads[i]) > 1
        assert len({s for _, s in pic.holders_of(i)}) == 1  # one register, the same in every copy
        assert pic.copies[0, i] == len(threads)
        assert labels[0, i] == f"T{min(threads)}x{len(threads)}\nR{pic.register[0, i]}"


def test_t_fragment(tmp_path):
    frag = T.Fragment((4, 8), forward_thread_fn=lambda i, j, rep: (i * 8 + j) // 2 + 16 * rep, replicate=2)
    pic = plot_layout(frag, str(tmp_path / "frag.png"))
    assert pic.threads == 32 and pic.grid == (4, 8)
    labels = _labels(pic)
    for i in range(4):
        for j in range(8):
            first = (i * 8 + j) // 2
            assert [t for t, _ in pic.holders_of(i, j)] == [first, first + 16]
            assert labels[i, j].startswith(f"T{first}x2\n")


def test_unknown_buffer_lists_names(gemm_sm80):
    with pytest.raises(ValueError, match="A_shared .shared.*C_local .fragment"):
        gemm_sm80.plot_layout("acc_s")


def test_cli(tmp_path, capsys):
    from tegula.__main__ import main

    out = tmp_path / "c.png"
    assert main(["layout", "--kernel", "gemm", "--buffer", "C_local", "--out", str(out), "--target", "sm_90a"]) == 0
    import matplotlib.image

    image = matplotlib.image.imread(str(out))
    assert image.ndim == 3 and image.shape[0] > 500 and image.shape[1] > 500
    assert "wgmma_accumulator" in capsys.readouterr().out
    assert main(["layout", "--kernel", "gemm", "--list", "--target", "sm_80"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in ("A_shared", "B_shared", "C_local"))
    assert main(["layout", "--kernel", "gemm", "--buffer", "nope", "--out", str(out)]) == 2
    assert "C_local" in capsys.readouterr().err
