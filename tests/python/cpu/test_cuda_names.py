"""User names in the generated CUDA: a buffer, loop variable, let, scalar or tensor parameter
named like a C++ keyword (`do`, `int`, `auto`), a CUDA built-in (`threadIdx`), a device-library
function (`cast`, `max`), a name the printer itself emits (`tegula_smem`, the wgmma instruction
structs) or a reserved identifier (`__x`, `_Tile`) is renamed, readably and the same way on
every print, so that NVRTC compiles the kernel and it computes what it says.
tests/python/gpu/test_cuda_names_gpu.py runs the same programs on a GPU.
"""
import ctypes
import ctypes.util
import glob
import importlib.util
import keyword
import os
import re

import pytest
import torch

tegula = pytest.importorskip("tegula")
import tegula.language as T  # noqa: E402
import tegula.testing as tt  # noqa: E402
from name_programs import gemm_program, keyword_expected, keyword_program  # noqa: E402
from tegula.env import device_include_dir  # noqa: E402

TARGETS = ["sm_80", "sm_90a"]


def declarations(src: str) -> set:
    """Every name the kernel declares (parameters, locals, loop variables, lets)."""
    return set(re.findall(r"(?:\*|\b(?:int|float|unsigned|half_t|bool)\*?)\s+(?:__restrict__\s+)?([A-Za-z_]\w*)\s*[\[=,;)]", src))


@pytest.mark.parametrize("target", TARGETS)
def test_keyword_names_compile_and_compute(target):
    kernel = tegula.compile(keyword_program(40), out_idx=[1], target=target)
    src = kernel.get_kernel_source()
    names = declarations(src)
    for renamed in ("do_kernel", "int_", "threadIdx_", "v__x", "tegula_smem", "v_tegula_smem", "auto_", "half_",
                    "v_Tile", "cast_", "float_", "blockIdx_"):
        assert renamed in src, (renamed, src)
    for raw in ("int", "threadIdx", "__x", "auto", "half", "_Tile", "cast", "max", "min", "float", "blockIdx"):
        assert raw not in names, (raw, sorted(names))
    assert "extern \"C\" __global__ void __launch_bounds__(128) do_kernel(" in src, src[:400]
    assert kernel.cubin()[:4] == b"\x7fELF"
    x = torch.randn(40, 64)
    ref = tt.reference(kernel, x, 0.5, 3)
    sim = tt.simulate(kernel, x, 0.5, 3)
    expected = keyword_expected(x, 0.5, 3)
    torch.testing.assert_close(ref.double(), expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(sim.double(), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_gemm_operands_named_like_the_printers_structs(target):
    kernel = tegula.compile(gemm_program(96, 64, 64), out_idx=[2], target=target)
    src = kernel.get_kernel_source()
    names = declarations(src)
    for raw in ("tegula_tmap_0", "Vec", "struct", "tegula_by", "wgmma_ss_n64_f16", "this", "new", "switch"):
        assert raw not in names, (raw, sorted(names))
    if target == "sm_90a":
        assert "struct wgmma_ss_n64_f16 {" in src and ", wgmma_ss_n64_f16>(" in src, src
    assert kernel.cubin()[:4] == b"\x7fELF"
    a, b = torch.randn(96, 64).half(), torch.randn(64, 64).half()
    expected = a.double() @ b.double()
    for run in (tt.reference, tt.simulate):
        torch.testing.assert_close(run(kernel, a, b).double(), expected, rtol=2e-3, atol=2e-2)


def test_renaming_is_stable_and_keeps_names_distinct():
    @T.prim_func
    def clash(do: T.Tensor((32,), "float32"), do_: T.Tensor((32,), "float32"), v__x: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            __x = T.alloc_local((1,), "float32")
            do_1 = T.alloc_local((1,), "float32")
            for i in T.Parallel(32):
                __x[0] = do[i]
                do_1[0] = do_[i]
                v__x[i] = __x[0] + do_1[0]

    sources = [tegula.compile(clash, target="sm_90a").get_kernel_source() for _ in range(2)]
    assert sources[0] == sources[1]
    head = sources[0].split("{")[0]
    # The parameters, in order: do, do_, v__x; the locals come after and take what is left.
    params = re.findall(r"__restrict__ (\w+)", head)
    assert params == ["do_", "do_1", "v__x"], head
    # The locals __x and do_1 meet those taken: v__x_1 and do_1_1.
    body = sources[0][len(head):]
    assert "float v__x_1[1]" in body and "float do_1_1[1]" in body, body
    assert tegula.compile(clash, target="sm_90a").cubin()[:4] == b"\x7fELF"


def test_ordinary_names_are_printed_as_written():
    @T.prim_func
    def plain(A: T.Tensor((32,), "float32"), B_out: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            acc_local = T.alloc_local((1,), "float32")
            for i in T.Parallel(32):
                acc_local[0] = A[i] * 2.0
                B_out[i] = acc_local[0]

    src = tegula.compile(plain, target="sm_90a").get_kernel_source()
    assert {"A", "B_out", "acc_local", "bx"} <= declarations(src), src
    assert "plain_kernel(" in src


def test_non_ascii_names_become_ascii():
    @T.prim_func
    def ünïcode(α: T.Tensor((32,), "float32"), β: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(32):
                β[i] = α[i] + 1.0

    kernel = tegula.compile(ünïcode, out_idx=[1], target="sm_90a")
    src = kernel.get_kernel_source()
    assert src.isascii()
    assert {"u3b1", "u3b2"} <= declarations(src), src
    assert "ufcnuefcode_kernel(" in src, src[:300]
    assert kernel.cubin()[:4] == b"\x7fELF"
    x = torch.randn(32)
    torch.testing.assert_close(tt.simulate(kernel, x), x + 1.0)


# ---------------------------------------------------------------- the device library's names


def _nvrtc():
    names = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", ctypes.util.find_library("nvrtc")]
    site = os.path.dirname(os.path.dirname(torch.__file__))
    names += sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib", "libnvrtc.so*")))
    names += sorted(glob.glob("/usr/local/cuda*/lib64/libnvrtc.so*"))
    for name in filter(None, names):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    pytest.skip("libnvrtc cannot be loaded with ctypes here")


def nvrtc_errors(source: str) -> str:
    """NVRTC's log for `source` (sm_90a, the device library and CUDA headers on the path)."""
    lib = _nvrtc()
    includes = [device_include_dir()]
    for root in ("/usr/local/cuda/include", os.environ.get("CUDA_HOME", "") + "/include"):
        includes += [root, root + "/cccl"]
    includes += glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "nvidia", "*", "include"))
    flags = ["-std=c++17", "--gpu-architecture=sm_90a", "-w"] + [f"-I{d}" for d in includes if d and os.path.isdir(d)]
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"probe.cu", 0, None, None) == 0
    argv = (ctypes.c_char_p * len(flags))(*[f.encode() for f in flags])
    lib.nvrtcCompileProgram(prog, len(flags), argv)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    text = log.value.decode()
    if "cannot open source file" in text:
        pytest.skip(f"NVRTC finds no CUDA headers here: {text[:200]}")
    return text


CPP_KEYWORDS = set("""alignas alignof and and_eq asm auto bitand bitor bool break case catch char char16_t char32_t
class compl const constexpr const_cast continue decltype default delete do double dynamic_cast else enum explicit
export extern false float for friend goto if inline int long mutable namespace new noexcept not not_eq nullptr
operator or or_eq private protected public register reinterpret_cast return short signed sizeof static
static_assert static_cast struct switch template this thread_local throw true try typedef typeid typename union
unsigned using virtual void volatile wchar_t while xor xor_eq""".split())


def device_library_names() -> list:
    """The names NVRTC says the device library declares in namespace tegula (a namespace of
    that name there is an error) or defines as macros, among every identifier of its text."""
    text = ""
    for path in sorted(glob.glob(os.path.join(device_include_dir(), "tegula", "*.h"))):
        with open(path) as f:
            text += re.sub(r"//.*", "", f.read())
    tokens = sorted(set(re.findall(r"\b[A-Za-z_]\w*\b", text)) - CPP_KEYWORDS)
    tokens = [t for t in tokens if not t.startswith("__") and not re.match(r"_[A-Z]", t)]
    found = set()
    head = '#include "tegula/tegula.h"\n'
    # Below NVRTC's limit of 100 errors a compile.
    for start in range(0, len(tokens), 90):
        batch = tokens[start:start + 90]
        src = head + "".join(f"namespace tegula {{ namespace {t} {{}} }}\n" for t in batch)
        for m in re.finditer(r"probe\.cu\((\d+)\): error", nvrtc_errors(src)):
            found.add(batch[int(m.group(1)) - 2])
    src = head + "".join(f"#ifdef {t}\nint macro_probe_{i}[-1];\n#endif\n" for i, t in enumerate(tokens))
    found |= {tokens[int(m.group(1))] for m in re.finditer(r"macro_probe_(\d+)", nvrtc_errors(src))}
    return sorted(found)


def names_program(names, tmp_path):
    """A prim_func with one local buffer per name, chained so that each is used."""
    lines = ["import tegula.language as T", "", "", "def build():", "    @T.prim_func",
             "    def names(src_: T.Tensor((1,), 'float32'), dst_: T.Tensor((1,), 'float32')):",
             "        with T.Kernel(1, threads=32) as bx_:"]
    lines += [f"            {n} = T.alloc_local((1,), 'float32')" for n in names]
    previous = "src_"
    for n in names:
        lines.append(f"            {n}[0] = {previous}[0] + 1.0")
        previous = n
    lines += [f"            dst_[0] = {previous}[0]", "", "    return names", ""]
    path = tmp_path / "names_program.py"
    path.write_text("\n".join(lines))
    spec = importlib.util.spec_from_file_location("names_program", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build()


def test_every_device_library_name_is_renamed(tmp_path):
    names = device_library_names()
    # The probe finds what the printed code calls (and the macros the headers define).
    for expected in ("cast", "Vec", "max", "min", "floordiv", "infinity", "atomic_add", "barrier_sync",
                     "half_t", "tma_load_2d", "TEGULA_DEVICE", "TEGULA_ARCH"):
        assert expected in names, expected
    names = [n for n in names if not keyword.iskeyword(n) and n not in ("T", "names", "build")]
    kernel = tegula.compile(names_program(names, tmp_path), out_idx=[1], target="sm_90a")
    src = kernel.get_kernel_source()
    declared = declarations(src)
    kept = sorted(n for n in names if n in declared)
    assert not kept, f"device-library names printed as declarations: {kept}"
    assert kernel.cubin()[:4] == b"\x7fELF"
    out = tt.reference(kernel, torch.zeros(1))
    assert out.item() == len(names)


# ---------------------------------------------------------------- the fuzzer's family


@pytest.mark.parametrize("seed", range(8))
def test_fuzz_programs_in_reserved_names_compile_and_agree(seed):
    from tegula.testing import fuzz
    from tegula.testing.fuzz_families_names import NAMES, gen_names
    from tegula.testing.fuzz_gen import Kernel, RandomChooser

    chooser = RandomChooser(seed)
    k = Kernel(chooser, ["sm_80", "sm_90a"][seed % 2])
    gen_names(k)
    program = k.finish("fuzz_names")
    assert {a.name for a in program.args} <= set(NAMES)
    outcome = fuzz.check(program, seed=seed)
    assert outcome == ("agreed" if fuzz.interpreters_available() else "compiled"), outcome
