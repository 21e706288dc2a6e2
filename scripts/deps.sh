#!/usr/bin/env bash
# Installs, with apt, the Debian packages gpuguard's build and tests need, if any is missing.
# The CUDA toolkit (nvcc) is not a Debian package here: it must already be on the machine.
set -euo pipefail
packages=(cmake ninja-build g++ python3 libgtest-dev libgmock-dev libbenchmark-dev
          libboost-stacktrace-dev clang-tidy
          chromium fonts-dejavu-core)  # headless chromium renders `gpuguard report`'s HTML in its test
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
# The ecosystem's own parsers for gpuguard's outputs: jsonschema for the JSON and JSONL files,
# prometheus-client's text parser for the Prometheus exposition (the tests fall back to structural
# checks without them, and say so); torch (the GPU machine's version) for the real PyTorch
# DataLoader job that `gpuguard run` must leave no process of (tests/cli/run_torch_test.py).
for module in jsonschema:jsonschema prometheus_client:prometheus-client torch:torch==2.11.0; do
  if ! python3 -c "import ${module%%:*}" 2>/dev/null; then
    echo "deps: installing ${module#*:} (pip)"
    python3 -m pip install -q "${module#*:}" || python3 -m pip install -q --break-system-packages "${module#*:}" ||
      echo "deps: could not install ${module#*:}; its outputs get structural checks only"
  fi
done
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "deps: nvcc is not on PATH; add /usr/local/cuda/bin to it (the scripts do so themselves)"
fi
