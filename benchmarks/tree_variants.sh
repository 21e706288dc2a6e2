# shellcheck shell=bash
# shellcheck disable=SC2154  # $root is the sourcing script's
# Copies of this tree built as variants of the tracking benchmark, and their runs: what
# ledger_cost_parts.sh, track_variants.sh and ab_tracking.sh share. Sourced, not run; needs $root,
# the tree's root.

variant_tool=$(basename "$0" .sh)  # the sourcing script, for messages

# variants_prepare_all WORK PREPARE VARIANT...: runs `PREPARE VARIANT INDEX` for every variant at
# once, in the background, and waits for them all; exits 1 naming each that failed (its folder
# under WORK holds its configure.log and build.log).
variants_prepare_all() {
  local work=$1 prepare=$2
  shift 2
  local names=("$@") pids=() failed=0 i
  for i in "${!names[@]}"; do
    "$prepare" "${names[$i]}" "$i" &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
      echo "$variant_tool: variant ${names[$i]} did not build: see its configure.log and build.log under $work" >&2
      failed=1
    fi
  done
  if [ "$failed" -ne 0 ]; then exit 1; fi
}

# variant_copy DIR: the tree, without build folders, .git and the GPU runner's output, copied to
# DIR/src (DIR emptied first).
variant_copy() {
  local dir=$1
  rm -rf "$dir"
  mkdir -p "$dir/src"
  tar -C "$root" --exclude='./build*' --exclude='./.git' --exclude='./gpu-runner-out' -cf - . | tar -C "$dir/src" -xf -
}

# variant_build DIR JOBS [CXX_FLAGS [MEASURED [TARGET...]]]: configures DIR/src as the GPU runner
# does (carried packages included), as a measurement build of the variants MEASURED (a CMake list,
# GPUGUARD_MEASUREMENT_VARIANTS in src/CMakeLists.txt) where given, and builds TARGETs (default
# gpuguard_tracking_bench) in DIR/build; logs in DIR.
variant_build() {
  local dir=$1 jobs=$2 flags=${3:-} measured=${4:-}
  local targets=("${@:5}")
  if [ ${#targets[@]} -eq 0 ]; then targets=(gpuguard_tracking_bench); fi
  local prefix=()
  if [ -d "$root/.gpu-deps/usr" ]; then prefix=("-DCMAKE_PREFIX_PATH=$root/.gpu-deps/usr"); fi
  cmake -S "$dir/src" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DGPUGUARD_TSAN_TESTS=OFF -DCMAKE_CXX_FLAGS="$flags" -DGPUGUARD_MEASUREMENT_VARIANTS="$measured" "${prefix[@]}" >"$dir/configure.log" 2>&1
  cmake --build "$dir/build" -j "$jobs" --target "${targets[@]}" >"$dir/build.log" 2>&1
}

# variant_run DIR FILTER REPETITIONS OUT: the variant's benchmarks matching FILTER, their
# repetitions interleaved, as JSON in OUT.
variant_run() {
  "$1/build/benchmarks/gpuguard_tracking_bench" --benchmark_filter="$2" --benchmark_repetitions="$3" \
    --benchmark_enable_random_interleaving=true --benchmark_format=json >"$4" 2>/dev/null
}
