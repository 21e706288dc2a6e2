#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/gpuguard/prolog.sh): refuses a node whose GPU is not
# clean before a job starts on it. Not clean: a process of no running job holds a GPU device (a
# file under GPUGUARD_DEVICE_PREFIX open or mapped, or memory in NVML's process list), or more
# than GPUGUARD_RESIDUE_LIMIT_BYTES of device memory is used with no process here to account for
# it. It ends nothing: it drains the node with the reason ("gpuguard: ..." in scontrol show node)
# and exits 1, so that Slurm requeues the job (held, unless SchedulerParameters has
# nohold_on_prolog_fail). When gpuguard itself cannot look, the node is refused too. README.md
# beside it says more; gpuguard-slurm.sh (same folder) holds the settings.
gg_script=prolog
# shellcheck source=gpuguard-slurm.sh  # beside the script (a link to it is followed)
. "$(dirname "$(readlink -f "$0")")/gpuguard-slurm.sh"

gg_doctor check
case $gg_status in
  0|1) dirt=$(gg_dirt check) ;;
  *) dirt="cannot check the GPU before job $gg_job: $(gg_failure check)" ;;
esac
if [ -z "$dirt" ]; then
  gg_log "clean"
  exit 0
fi
case $gg_status in 0|1) dirt="before job $gg_job: $dirt" ;; esac
gg_drain "$dirt"
exit 1
