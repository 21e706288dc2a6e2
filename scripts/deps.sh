#!/usr/bin/env bash
# Installs what one use of gpuguard needs, and only that, when it is missing. Says what it installs.
# usage: scripts/deps.sh demo|test|sanitize|lint [VENV]
#   demo  the build tools and Boost.Stacktrace's headers: what scripts/demo.sh needs (Debian)
#   test  the demo's, plus GoogleTest, Google Benchmark, headless chromium for the report's browser
#         test, Prometheus with node_exporter and Slurm with munge for the cluster tests, which
#         start them on loopback, Python's headers for the wheel (Debian), and from PyPI
#         jsonschema, prometheus-client, PyYAML, scikit-build-core, nanobind and torch 2.11.0
#         (3.9 GB installed, with the CUDA libraries it pulls in) for the LibTorch adapter, the
#         wheel and the Python process tests
#   sanitize  what scripts/sanitize.sh builds and runs: the demo's, GoogleTest, and jsonschema and
#         prometheus-client (g++ brings the sanitizers' runtimes)
#   lint  clang-tidy (Debian)
# The Python modules go into the virtual environment VENV (default: build/venv), made with
# `python3 -m venv` when it is not there yet (python3-venv comes from apt when python3 cannot make
# one); never into the system's Python. scripts/test.sh and sanitize.sh pass BUILD_DIR/venv, or
# GPUGUARD_VENV when it is set, and configure the build with its python.
# The CUDA toolkit (nvcc) is not a Debian package here: it must already be on the machine.
set -euo pipefail
profile=${1:-}
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${2:-"$root/build/venv"}
base=(cmake ninja-build g++ python3 libboost-stacktrace-dev nlohmann-json3-dev libcli11-dev)
case "$profile" in
  demo) packages=("${base[@]}"); modules=() ;;
  test) packages=("${base[@]}" libgtest-dev libgmock-dev libbenchmark-dev chromium fonts-dejavu-core
                  prometheus prometheus-node-exporter slurm-wlm munge python3-dev)
        # prometheus-client's text parser and jsonschema check gpuguard's outputs (the tests fall
        # back to structural checks without them, and say so); torch (the GPU machine's version)
        # builds the LibTorch adapter and runs the real PyTorch DataLoader job of cli.run.torch.
        # PyYAML reads the Kubernetes manifests of deploy/ (cluster.kubernetes); scikit-build-core
        # and nanobind build the wheel (python.wheel), against Python's headers (python3-dev);
        # pytest runs the wheel's pytest plugin in child test runs (python.pytest).
        modules=(jsonschema:jsonschema prometheus_client:prometheus-client yaml:pyyaml
                 scikit_build_core:scikit-build-core nanobind:nanobind pytest:pytest torch:torch==2.11.0) ;;
  sanitize) packages=("${base[@]}" libgtest-dev libgmock-dev)
            modules=(jsonschema:jsonschema prometheus_client:prometheus-client) ;;
  lint) packages=(clang-tidy); modules=() ;;
  *) echo "usage: scripts/deps.sh demo|test|sanitize|lint [VENV]" >&2; exit 2 ;;
esac

apt_install() {
  echo "deps ($profile): installing $* (apt)"
  if [ "$(id -u)" -eq 0 ]; then sudo=(); else sudo=(sudo); fi
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@"
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  apt_install "${missing[@]}"
fi
if [ "${#modules[@]}" -gt 0 ]; then
  if [ ! -x "$venv/bin/python" ]; then
    # Debian's python3 makes virtual environments only with python3-venv (ensurepip).
    python3 -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
    echo "deps ($profile): making the virtual environment $venv (python3 -m venv)"
    python3 -m venv "$venv"
  fi
  for module in "${modules[@]}"; do
    if ! "$venv/bin/python" -c "import ${module%%:*}" 2>/dev/null; then
      echo "deps ($profile): installing ${module#*:} into $venv (pip)"
      "$venv/bin/python" -m pip install -q "${module#*:}" ||
        echo "deps ($profile): could not install ${module#*:}; the tests that need it say so"
    fi
  done
fi
if [ "$profile" != lint ] && ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "deps ($profile): no CUDA toolkit found (nvcc): gpuguard needs its headers and runtime, and it is not a Debian package here" >&2
fi
