// The subcommands of the `gpuguard` executable. Each takes the subcommand's own argv (argv[0] is
// its name) and returns the process exit status: 0 success, 1 failure, 2 usage error.
#pragma once

namespace gpuguard::cli {

int run_main(int argc, char** argv);
int doctor_main(int argc, char** argv);
int report_main(int argc, char** argv);
int symbolize_main(int argc, char** argv);

}  // namespace gpuguard::cli
