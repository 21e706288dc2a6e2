#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=/etc/slurm/gpuguard/epilog.sh): after a job, ends what it left
# holding a GPU, then drains the node if the GPU does not come clean. `gpuguard doctor` classifies
# every process that holds a GPU device; those classified orphaned (the rule in gpuguard's
# docs/doctor.md: a job's leftover, reparented, its job gone) that belong to no job step still
# running here are ended with `gpuguard doctor --reap` (SIGTERM, GPUGUARD_GRACE seconds, SIGKILL).
# Then, for up to GPUGUARD_SETTLE_SECONDS, it waits until no process outside the running jobs holds
# a device and the memory no process accounts for is within GPUGUARD_RESIDUE_LIMIT_BYTES. If that does
# not happen (a leftover the rule spares, one that could not be ended, memory the driver keeps), it
# drains the node with the reason ("gpuguard: ..." in scontrol show node) and exits 0; 1 only when
# even the drain failed, so that Slurm drains it ("Epilog error"). README.md beside it says more;
# gpuguard-slurm.sh (same folder) holds the settings.
gg_script=epilog
# shellcheck source=gpuguard-slurm.sh  # beside the script (a link to it is followed)
. "$(dirname "$(readlink -f "$0")")/gpuguard-slurm.sh"

gg_doctor scan
case $gg_status in
  0|1) ;;
  *) gg_drain "cannot check the GPU after job $gg_job: $(gg_failure scan)" || exit 1; exit 0 ;;
esac

# Reap exactly the orphans the scan saw, each named with its start time: a PID reused since is not
# signalled, and a process of a running step is never named.
set --
# shellcheck disable=SC2013  # one word a target: PID:START_TIME, digits only
for target in $(awk '$1 == "holder" && $4 == "orphaned" { print $2 ":" $3 }' "$gg_tmp/scan.lines"); do
  set -- "$@" --pid "$target"
done
unended=""
if [ $# -gt 0 ]; then
  gg_doctor reap --reap --grace "$GPUGUARD_GRACE" "$@"
  if [ -f "$gg_tmp/reap.lines" ]; then
    gg_log "reaped: $(awk '$1 == "reap" { printf "%sPID %s %s %s", sep, $2, $4, $3; sep = ", " }' "$gg_tmp/reap.lines")"
  fi
  case $gg_status in
    0|1) ;;
    3) if [ -f "$gg_tmp/reap.lines" ]; then
         unended=$(awk '$1 == "reap" && $3 != "terminated" && $3 != "killed" && $3 != "gone" {
                          printf "%sPID %s %s (%s)", sep, $2, $4, $3; sep = ", " }' "$gg_tmp/reap.lines")
       fi
       unended=${unended:-$(gg_failure reap)} ;;
    *) unended=$(gg_failure reap) ;;
  esac
fi

# Wait for the GPU to come clean: a killed process's memory comes back a moment after it ends.
deadline=$(( $(date +%s) + GPUGUARD_SETTLE_SECONDS ))
while :; do
  gg_doctor check
  case $gg_status in
    0|1) dirt=$(gg_dirt check) ;;
    *) dirt="cannot check the GPU: $(gg_failure check)" ;;
  esac
  if [ -z "$dirt" ] && [ -z "$unended" ]; then
    gg_log "clean"
    exit 0
  fi
  if [ -n "$unended" ] || [ "$(date +%s)" -ge "$deadline" ]; then break; fi
  sleep 1
done
gg_drain "after job $gg_job: ${unended:+could not end $unended; }${dirt:-the GPU is not clean}" || exit 1
exit 0
