#!/usr/bin/env bash
# Run on this (networked) machine before a run on the GPU machine, which has no network:
# copies the nlohmann/json headers into .deps/nlohmann/, where setup.py and CMakeLists.txt
# look first. .deps/ is git-ignored, so name it in the device run's carried paths.
set -euo pipefail
cd "$(dirname "$0")/.."
src=""
for d in "${NLOHMANN_JSON_INCLUDE:-}" /usr/include /usr/local/include; do
  [[ -n $d && -f $d/nlohmann/json.hpp ]] && { src=$d; break; }
done
if [[ -z $src ]]; then  # the PyPI package, when that is how this machine has the headers
  PY=${PYTHON:-$(command -v python || command -v python3)}
  src=$("$PY" -c "import importlib.util as u, os; s = u.find_spec('nlohmann_json'); print(os.path.join(os.path.dirname(s.origin), 'include') if s else '')")
fi
if [[ -z $src || ! -f $src/nlohmann/json.hpp ]]; then
  echo "prepare_device_deps: nlohmann/json.hpp not found; run scripts/setup_env.sh first" >&2
  exit 1
fi
rm -rf .deps/nlohmann
mkdir -p .deps
cp -r "$src/nlohmann" .deps/
echo "prepare_device_deps: copied $src/nlohmann -> .deps/nlohmann ($(du -sh .deps | cut -f1))"
