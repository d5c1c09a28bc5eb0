#!/usr/bin/env bash
# TileLang 0.1.15 and what it needs that the GPU machine lacks, as wheels small enough to
# travel there (64 MiB with the working tree): the side-by-side run of
# scripts/port_examples.py (--engine tilelang) installs them there with
#
#   python3 -m pip install -q --no-index --no-deps --target /tmp/tl .whl/*.whl
#
# The wheels are for CPython 3.12 on x86-64 Linux (the GPU machine's Python). Each is
# repacked without what TileLang's import and kernel builds never read: C++ sources of
# TileLang, TVM and tvm-ffi, CUTLASS's tools, z3's command-line program and second copy of
# libz3, torch-c-dlpack-ext's add-ons (torch >= 2.10 has the exchange API itself), and
# z3's symbol table (strip). Entries are LZMA-compressed (pip reads any compression
# Python's zipfile does); RECORD is rewritten. Same downloads, same bytes out.
#
#   bash scripts/prepare_tilelang_wheels.sh [OUT_DIR]     # default: .whl/ (git-ignored)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/.whl}"
download="$(mktemp -d)"
trap 'rm -rf "$download"' EXIT

wheels=(tilelang==0.1.15 apache-tvm-ffi==0.1.12 z3-solver==4.15.4.0 torch-c-dlpack-ext==0.1.5
        cloudpickle==3.1.3 psutil==7.2.2)
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux_2_12_x86_64 manylinux2010_x86_64; do
  platforms+=(--platform "$p")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d "$download" "${wheels[@]}"

mkdir -p "$out"
python3 - "$download" "$out" <<'EOF'
"""Repack each wheel without the entries DROP names; strip the libraries STRIP names."""
import base64, hashlib, os, re, subprocess, sys, tempfile, zipfile

DROP = [
    r"^tilelang/3rdparty/tvm/src/", r"^tilelang/3rdparty/cutlass/tools/", r"^tilelang/src/.*\.(cc|cpp|mm|txt)$",
    r"/__pycache__/",
    r"^z3_solver-[^/]*\.data/data/bin/", r"^z3/lib/libz3\.so\.[0-9.]+$", r"^z3/include/",
    r"^tvm_ffi/3rdparty/", r"^tvm_ffi/src/",
    r"^torch_c_dlpack_ext/libtorch_c_dlpack_addon_.*\.so$",
]
STRIP = [r"^z3/lib/libz3\.so$"]


def digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def repack(src: str, dst: str) -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        record_name = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
        lines = []
        for info in zin.infolist():
            name = info.filename
            if name == record_name or any(re.search(p, name) for p in DROP):
                continue
            data = zin.read(info)
            if any(re.search(p, name) for p in STRIP):
                with tempfile.NamedTemporaryFile(delete=False) as f:
                    f.write(data)
                subprocess.run(["strip", "--strip-unneeded", f.name], check=True)
                with open(f.name, "rb") as f2:
                    data = f2.read()
                os.unlink(f.name)
            entry = zipfile.ZipInfo(name, date_time=info.date_time)
            entry.external_attr = info.external_attr
            entry.compress_type = zipfile.ZIP_LZMA
            zout.writestr(entry, data)
            if not name.endswith("/"):
                lines.append(f"{name},{digest(data)},{len(data)}")
        lines.append(f"{record_name},,")
        entry = zipfile.ZipInfo(record_name, date_time=zin.getinfo(record_name).date_time)
        entry.external_attr = zin.getinfo(record_name).external_attr
        entry.compress_type = zipfile.ZIP_LZMA
        zout.writestr(entry, "\n".join(lines) + "\n")


download, out = sys.argv[1:]
for name in sorted(os.listdir(download)):
    repack(os.path.join(download, name), os.path.join(out, name))
    print(f"{os.path.getsize(os.path.join(out, name)) / 2**20:7.2f} MiB  {name}")
EOF
du -ch "$out"/*.whl | tail -1
