"""Builds the Python package `tegula` and its C++ extension `tegula._C`.

    pip install --no-build-isolation -e .     # develop install (what the scripts use)
    pip install --no-build-isolation .        # regular install

`--no-build-isolation` because the build imports the torch that is already installed: an
isolated build would download a second torch of a few GiB only to read its headers.

Where things come from and go:
- `tegula._C`: every `src/**/*.cc` (globbed, so a new file needs no edit here). Besides
  torch's own libraries it links only libdl: NVRTC and libcuda are opened with dlopen at
  run time, so the module imports on a machine without a GPU driver.
- `TEGULA_BUILD_ID`: a hash of every file under `src/` and `kernels/include/`, written as a
  `#define` to build/generated/tegula_build_id.h, so the kernel cache key changes whenever
  the core or the device library changes. CMakeLists.txt computes the same hash the same
  way and writes the same header into its own build directory.
- nlohmann/json headers: `$NLOHMANN_JSON_INCLUDE`, then `.deps/` (copied there by
  scripts/prepare_device_deps.sh for the offline GPU machine), then the system include
  dirs, then the PyPI package `nlohmann-json` (its headers live in `nlohmann_json/include`).
- Device headers: `kernels/include/tegula/*.h` are copied into `python/tegula/include/tegula/`
  each time this file runs (the copy is git-ignored) and shipped as package data of
  `tegula`, so an installed package finds them at `<tegula package dir>/include`. In a
  develop install the copy is only as fresh as the last build: the runtime should prefer
  the repository's `kernels/include` when it exists next to the package.
- `kernels/*.py` (the kernels written in the DSL) ship as the subpackage `tegula.kernels`.
"""

import hashlib
import importlib.util
import os
import shutil
import sys
from pathlib import Path

from setuptools import find_namespace_packages, find_packages, setup
from torch.utils import cpp_extension

ROOT = Path(__file__).resolve().parent
HASHED_DIRS = ("src", "kernels/include")


def rel(path):
    return path.relative_to(ROOT).as_posix()


def build_id():
    """sha256 over "relpath:sha256(content)" lines of the hashed files sorted by path,
    first 16 hex digits. Hidden files (editor swap files) are skipped so they cannot
    change it. CMakeLists.txt computes the same value."""
    files = sorted(  # by the path as a string, the order CMake's list(SORT) gives
        (rel(p), p) for top in HASHED_DIRS for p in (ROOT / top).rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(ROOT).parts))
    lines = "".join(f"{name}:{hashlib.sha256(p.read_bytes()).hexdigest()}\n" for name, p in files)
    return hashlib.sha256(lines.encode()).hexdigest()[:16]


def write_build_id_header():
    """The build id goes in a generated header that only the file using it includes, so a
    change to one source rebuilds that source alone instead of every one."""
    out = ROOT / "build" / "generated"
    out.mkdir(parents=True, exist_ok=True)
    header = out / "tegula_build_id.h"
    text = f'#define TEGULA_BUILD_ID "{build_id()}"\n'
    if not header.is_file() or header.read_text() != text:
        header.write_text(text)
    return str(out)


def nlohmann_include():
    """The directory D such that D/nlohmann/json.hpp exists, or None when the compiler's
    default search path already has it (adding /usr/include with -I reorders system
    headers, so it is left out)."""
    env = os.environ.get("NLOHMANN_JSON_INCLUDE")
    candidates = [Path(env)] if env else []
    candidates.append(ROOT / ".deps")
    for cand in candidates:
        if (cand / "nlohmann" / "json.hpp").is_file():
            return str(cand)
    for system in ("/usr/include", "/usr/local/include"):
        if Path(system, "nlohmann", "json.hpp").is_file():
            return None
    # The PyPI package's __init__ needs importlib_resources; find_spec does not import it.
    spec = importlib.util.find_spec("nlohmann_json")
    if spec is not None and spec.origin:
        cand = Path(spec.origin).parent / "include"
        if (cand / "nlohmann" / "json.hpp").is_file():
            return str(cand)
    sys.exit("setup.py: nlohmann/json.hpp not found. Run `bash scripts/setup_env.sh`, "
             "`pip install nlohmann-json`, or set NLOHMANN_JSON_INCLUDE to the directory "
             "holding nlohmann/.")


def copy_device_headers():
    dst = ROOT / "python" / "tegula" / "include"
    shutil.rmtree(dst, ignore_errors=True)
    src = ROOT / "kernels" / "include"
    if src.is_dir():
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".*", "*~"))


def configure_parallel_build():
    """Ninja compiles the sources in parallel; torch reads the worker count from MAX_JOBS.
    One job per core by default (2 on the CPU machines, 16 on the GPU machine)."""
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 2))
    if not cpp_extension.is_ninja_available():
        try:  # the PyPI `ninja` package may be importable with its binary off PATH
            import ninja
            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ["PATH"]
        except ImportError:
            pass
    return cpp_extension.is_ninja_available()


def extension():
    sources = sorted(rel(p) for p in (ROOT / "src").rglob("*.cc"))
    include_dirs = [str(ROOT / "src")]
    json_dir = nlohmann_include()
    if json_dir:
        include_dirs.append(json_dir)
    # The bindings use torch's CUDA stream and device guard (c10_cuda), whose headers
    # include the CUDA runtime's.
    cuda_home = cpp_extension.CUDA_HOME
    if cuda_home and Path(cuda_home, "include").is_dir():
        include_dirs.append(str(Path(cuda_home, "include")))
    include_dirs.append(write_build_id_header())
    torch_lib = Path(cpp_extension.__file__).resolve().parents[1] / "lib"
    return cpp_extension.CppExtension(
        name="tegula._C",
        sources=sources,
        include_dirs=include_dirs,
        # -g0 overrides the -g of Python's own CFLAGS: debug info for torch's headers
        # doubles the compile time and makes a .so of hundreds of MB.
        extra_compile_args=["-O2", "-g0", "-std=c++17"],
        libraries=["dl", "c10_cuda"],
        # So `import tegula._C` finds libc10/libtorch even before `import torch`.
        extra_link_args=[f"-Wl,-rpath,{torch_lib}"],
    )


class BuildExtension(cpp_extension.BuildExtension):
    """Keeps the object files in build/setuptools/ across builds. setuptools' editable
    install otherwise compiles in a fresh temporary directory each time, so every
    `pip install -e .` would rebuild every source; ninja now rebuilds only what changed."""

    def finalize_options(self):
        super().finalize_options()
        self.build_temp = str(ROOT / "build" / "setuptools")


copy_device_headers()
use_ninja = configure_parallel_build()
kernel_packages = []
if (ROOT / "kernels" / "__init__.py").is_file():
    kernel_packages = ["tegula.kernels"] + ["tegula.kernels." + p for p in find_packages(where="kernels")]

setup(
    # The header folders are listed as (namespace) packages so setuptools ships their
    # files as package data instead of warning that it may stop doing so.
    packages=find_packages(where="python") + kernel_packages
    + find_namespace_packages(where="python", include=["tegula.include", "tegula.include.*"]),
    package_dir={"": "python", "tegula.kernels": "kernels"},
    package_data={"tegula.include": ["**/*.h", "**/*.cuh"]},
    ext_modules=[extension()],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=use_ninja)},
    zip_safe=False,
)
