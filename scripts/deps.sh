#!/usr/bin/env bash
# Installs, with apt, the Debian packages gpuguard's build and tests need, if any is missing.
# The CUDA toolkit (nvcc) is not a Debian package here: it must already be on the machine.
set -euo pipefail
packages=(cmake ninja-build g++ python3 libgtest-dev libgmock-dev libbenchmark-dev
          libboost-stacktrace-dev clang-tidy)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  if [ "$(id -u)" -eq 0 ]; then sudo=(); else sudo=(sudo); fi
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The ecosystem's own validator for gpuguard's JSON outputs (the tests fall back to structural
# checks without it, and say so).
if ! python3 -c 'import jsonschema' 2>/dev/null; then
  echo "deps: installing jsonschema (pip)"
  python3 -m pip install -q jsonschema || python3 -m pip install -q --break-system-packages jsonschema ||
    echo "deps: could not install jsonschema; JSON outputs get structural checks only"
fi
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "deps: nvcc is not on PATH; add /usr/local/cuda/bin to it (the scripts do so themselves)"
fi
