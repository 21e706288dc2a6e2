#!/usr/bin/env python3
"""Which CUDA architectures nvcc is given (ctest configure.cuda_architectures; needs no GPU).

Configures gpuguard (examples on; tests, benchmarks and install rules off) in scratch trees and
reads the flags of examples/demo.cu in compile_commands.json:

  - -DCMAKE_CUDA_ARCHITECTURES=80 wins over CUDAARCHS=86 in the environment (CMake's rule)
  - CUDAARCHS=86 alone gives 86, and configuring that tree again without it keeps 86
  - neither: the GPUs a stand-in nvidia-smi lists (9.0 and 8.9 give 89 and 90)
  - neither, and nvidia-smi fails as it does on a machine without a GPU: 80, 86, 89 and 90
  - with Torch's package found (where it is): Torch is given the same architectures, and none of
    its nvcc flags reaches the demo's object

Each case also checks the configure summary's reason. usage:
  cuda_architectures_test.py --cmake CMAKE --source DIR --work DIR --generator G
      --cuda-compiler NVCC --cxx-compiler CXX [--torch-dir DIR]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

FAKE_SMI_GPUS = """#!/bin/sh
# A stand-in for nvidia-smi on a machine with two GPUs: what --query-gpu=name,compute_cap prints.
[ "$1" = "--query-gpu=name,compute_cap" ] || { echo "unexpected arguments: $*" >&2; exit 2; }
echo "NVIDIA H100 80GB HBM3, 9.0"
echo "NVIDIA L4, 8.9"
"""
FAKE_SMI_NO_GPU = """#!/bin/sh
# What nvidia-smi says where the driver is installed but no GPU answers.
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
exit 9
"""
TORCH_FLAGS = ("-gencode", "--expt-relaxed-constexpr", "--expt-extended-lambda", "ONNX_NAMESPACE", "diag_suppress")


def write_script(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)
    return path


def demo_arch_flags(build):
    """The demo's nvcc command line and the architecture numbers in its code generation flags."""
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = [e for e in json.load(f) if e["file"].endswith(os.path.join("examples", "demo.cu"))]
    if len(entries) != 1:
        raise AssertionError(f"{build}: expected one compile command for examples/demo.cu, found {len(entries)}")
    command = entries[0]["command"]
    flags = re.findall(r"(?:--generate-code=|-gencode[= ]|--gpu-architecture[= ]|-arch[= ])(\S+)", command)
    return command, {int(n) for flag in flags for n in re.findall(r"(?:compute|sm)_(\d+)", flag)}


def main():
    parser = argparse.ArgumentParser()
    for name in ("--cmake", "--source", "--work", "--generator", "--cuda-compiler", "--cxx-compiler"):
        parser.add_argument(name, required=True)
    parser.add_argument("--torch-dir", default="")
    args = parser.parse_args()

    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    smi_gpus = write_script(os.path.join(args.work, "nvidia-smi-two-gpus"), FAKE_SMI_GPUS)
    smi_none = write_script(os.path.join(args.work, "nvidia-smi-no-gpu"), FAKE_SMI_NO_GPU)
    base_env = {k: v for k, v in os.environ.items() if k not in ("CUDAARCHS", "TORCH_CUDA_ARCH_LIST", "CMAKE_CUDA_ARCHITECTURES")}
    failures = []

    def configure(name, options, env_extra=None, torch=False, fresh=True):
        build = os.path.join(args.work, name)
        command = [args.cmake, "-S", args.source, "-B", build, "-G", args.generator,
                   f"-DCMAKE_CUDA_COMPILER={args.cuda_compiler}", f"-DCMAKE_CXX_COMPILER={args.cxx_compiler}",
                   "-DGPUGUARD_BUILD_TESTS=OFF", "-DGPUGUARD_BUILD_BENCHMARKS=OFF", "-DGPUGUARD_BUILD_EXAMPLES=ON",
                   "-DGPUGUARD_INSTALL=OFF"]
        if fresh:
            command += ["-DGPUGUARD_WITH_TORCH=" + ("ON" if torch else "OFF")]
            if torch:
                command += [f"-DTorch_DIR={args.torch_dir}"]
        done = subprocess.run(command + options, env=dict(base_env, **(env_extra or {})),
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise AssertionError(f"{name}: configure failed with status {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        return build, done.stdout + done.stderr

    def check(name, build, output, want, reason):
        command, archs = demo_arch_flags(build)
        if archs != set(want):
            failures.append(f"{name}: demo.cu built for {sorted(archs)}, want {sorted(want)}: {command}")
        wanted_line = "architectures " + ";".join(str(a) for a in want) + " (" + reason
        summary = [line for line in output.splitlines() if line.startswith("-- gpuguard ")]
        if len(summary) != 1 or wanted_line not in summary[0]:
            failures.append(f"{name}: the configure summary does not say '{wanted_line}...': {summary}")
        leaked = [flag for flag in TORCH_FLAGS if flag in command]
        if leaked:
            failures.append(f"{name}: Torch's nvcc flags {leaked} reached demo.cu: {command}")
        print(f"{name}: demo.cu for {sorted(archs)}; {summary[0] if summary else '(no summary)'}")

    def case(name, options, env_extra, want, reason, torch=False):
        try:
            build, output = configure(name, options, env_extra, torch)
            check(name, build, output, want, reason)
            if torch:
                # Torch's package says which flags it made from TORCH_CUDA_ARCH_LIST.
                said = re.findall(r"Added CUDA NVCC flags for: (\S+)", output)
                torch_archs = {int(n) for n in re.findall(r"code=sm_(\d+)", said[0])} if said else set()
                if torch_archs != set(want):
                    failures.append(f"{name}: Torch was given {sorted(torch_archs)}, want {sorted(want)}: {said}")
                if "not compatible with `CMAKE_CUDA_ARCHITECTURES`" in output:
                    failures.append(f"{name}: Torch still warns that it ignores CMAKE_CUDA_ARCHITECTURES")
            return build
        except AssertionError as e:
            failures.append(str(e))
            return None

    with_torch = bool(args.torch_dir)
    if not with_torch:
        print("note: Torch's package was not found by this build: the Torch case is left out")
    case("given", ["-DCMAKE_CUDA_ARCHITECTURES=80", f"-DGPUGUARD_NVIDIA_SMI={smi_gpus}"], {"CUDAARCHS": "86"},
         [80], "from CMAKE_CUDA_ARCHITECTURES", torch=with_torch)
    build = case("cudaarchs", [f"-DGPUGUARD_NVIDIA_SMI={smi_gpus}"], {"CUDAARCHS": "86"},
                 [86], "from the CUDAARCHS environment variable")
    if build:
        # Configured again without the variable: the cache keeps the choice and its reason.
        try:
            _, output = configure("cudaarchs", [], None, fresh=False)
            check("cudaarchs, configured again", build, output, [86], "from the CUDAARCHS environment variable")
        except AssertionError as e:
            failures.append(str(e))
    case("detected", [f"-DGPUGUARD_NVIDIA_SMI={smi_gpus}"], None,
         [89, 90], "the GPU found at configure time: NVIDIA H100 80GB HBM3 (9.0), NVIDIA L4 (8.9)")
    case("no-gpu", [f"-DGPUGUARD_NVIDIA_SMI={smi_none}"], None,
         [80, 86, 89, 90], "no GPU found at configure time (nvidia-smi: status 9", torch=with_torch)

    for f in failures:
        print("FAIL:", f)
    print("cuda architectures:", "FAIL" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
