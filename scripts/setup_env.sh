#!/usr/bin/env bash
# Installs what building and testing Tegula need, then installs Tegula itself in develop
# mode. Safe to run again: every step checks first and installs only what is missing, so
# on a machine that already has everything (the GPU machine, which has no network) it
# touches no network at all.
#   PYTHON=/path/to/python bash scripts/setup_env.sh   # pick the interpreter (default: python)
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-$(command -v python || command -v python3)}
export PIP_ROOT_USER_ACTION=ignore  # CI and the GPU machine run as root, without a venv
# `python -m pip`, never bare `pip`: on the GPU machine `pip` belongs to another Python.
pip_install() { "$PY" -m pip install --disable-pip-version-check -q "$@"; }
has_module() { "$PY" -c "import $1" 2>/dev/null; }
say() { echo "setup_env: $*"; }

# --- Python packages ---------------------------------------------------------------
if ! has_module torch; then
  # A few minutes: PyPI's torch is the CUDA build (it also runs on CPU-only machines).
  say "installing torch==2.11.*"
  pip_install "torch==2.11.*" || { say "cannot install torch (offline?)"; exit 1; }
fi
missing=()
for mod in numpy pybind11 pytest hypothesis; do has_module "$mod" || missing+=("$mod"); done
# setuptools before 70.1 needs the `wheel` package for any build, editable included.
has_module setuptools.command.bdist_wheel || has_module wheel || missing+=(wheel)
"$PY" -c "import setuptools, sys; sys.exit(int(setuptools.__version__.split('.')[0]) < 64)" \
  2>/dev/null || missing+=("setuptools>=64")  # 64 is the first with PEP 660 editable installs
if ((${#missing[@]})); then
  say "installing ${missing[*]}"
  pip_install "${missing[@]}" || { say "cannot install ${missing[*]} (offline?)"; exit 1; }
fi
# The optional extras the tests exercise (none is needed on the GPU machine, which has the
# first three and runs no docs build): transformers (tegula.integrations.transformers;
# its tests build models from a config, nothing is downloaded) and matplotlib (the layout
# and roofline pictures, the model command's plot). Pinned to what the GPU machine has.
extras=()
has_module transformers || extras+=("transformers==5.17.*")
has_module matplotlib || extras+=(matplotlib)
has_module tqdm || extras+=(tqdm)
# The package's import layers (pyproject.toml's [tool.importlinter]), which
# tests/python/cpu/test_import_layers.py checks; it brings grimp, the import graph.
has_module importlinter || extras+=("import-linter>=2,<3")
# The documentation site (mkdocs.yml, docs/): tests/python/cpu/test_docs.py builds it strictly.
has_module mkdocs || extras+=("mkdocs==1.6.*")
has_module mkdocstrings_handlers.python || extras+=("mkdocstrings[python]>=1.0")
has_module material || extras+=("mkdocs-material>=9.5")
if ((${#extras[@]})); then
  say "installing ${extras[*]}"
  pip_install "${extras[@]}" || { say "cannot install ${extras[*]} (offline?)"; exit 1; }
fi
# ninja only makes the build parallel; without it the build is serial, not broken.
if ! command -v ninja >/dev/null && ! has_module ninja; then
  pip_install ninja || say "ninja not installed (offline?): the build will be serial"
fi

# --- system packages: apt when root, PyPI otherwise --------------------------------
apt_updated=0
apt_install() {
  [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null || return 1
  if ((!apt_updated)); then apt-get update -qq >/dev/null && apt_updated=1 || return 1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

json_found() {
  local d
  for d in "${NLOHMANN_JSON_INCLUDE:-}" .deps /usr/include /usr/local/include; do
    [[ -n $d && -f $d/nlohmann/json.hpp ]] && return 0
  done
  "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('nlohmann_json') is None)" \
    2>/dev/null
}
if ! json_found; then
  say "installing nlohmann/json headers"
  apt_install nlohmann-json3-dev || pip_install nlohmann-json ||
    { say "cannot install nlohmann/json headers (offline? see scripts/prepare_device_deps.sh)"; exit 1; }
fi

if ! command -v cmake >/dev/null; then
  say "installing cmake"
  apt_install cmake || pip_install cmake || say "cmake missing: the C++ tests cannot build"
fi
if [[ ! -f /usr/include/gtest/gtest.h ]]; then
  say "installing GoogleTest"
  apt_install libgtest-dev || say "GoogleTest missing (needs root for apt): the C++ tests cannot build"
fi

# --- Tegula itself ----------------------------------------------------------------------
# --no-deps: torch and numpy were handled above, and pip then needs no index at all.
say "building tegula (pip install --no-build-isolation -e .; minutes on 2 cores the first time)"
"$PY" -m pip install --disable-pip-version-check -q --no-build-isolation --no-deps -e . ||
  { say "building tegula failed"; exit 1; }
say "ready"
