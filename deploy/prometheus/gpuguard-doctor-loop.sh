#!/bin/sh
# Keeps node_exporter's textfile of `gpuguard doctor` fresh where there is no systemd (a
# container's entrypoint, a sidecar, an init script): runs the doctor every GPUGUARD_INTERVAL
# seconds until SIGTERM, SIGINT or SIGHUP.
#
# usage: gpuguard-doctor-loop.sh [DOCTOR OPTIONS...]     e.g.  gpuguard-doctor-loop.sh --reap
#
#   GPUGUARD           the command (default: gpuguard, found on PATH)
#   GPUGUARD_TEXTFILE  the file (default: /var/lib/prometheus/node-exporter/gpuguard.prom, the
#                      textfile directory of Debian's prometheus-node-exporter); it must end in
#                      .prom and sit in node_exporter's --collector.textfile.directory
#   GPUGUARD_INTERVAL  whole seconds between runs (default: 60; keep it well below the 300 s
#                      after which alerts.yml calls the file stale)
#
# Each run replaces the file whole (the doctor writes a temporary file and renames it). A run that
# fails (status 3) is reported on stderr and the loop goes on; a bad option (status 2) ends it.
set -u
gpuguard=${GPUGUARD:-gpuguard}
textfile=${GPUGUARD_TEXTFILE:-/var/lib/prometheus/node-exporter/gpuguard.prom}
interval=${GPUGUARD_INTERVAL:-60}
case $interval in
  '' | *[!0-9]* | 0 | 0*)
    echo "gpuguard-doctor-loop: GPUGUARD_INTERVAL must be a whole number of seconds from 1, got '$interval'" >&2
    exit 2 ;;
esac

# A signal sets `stop` and ends the sleep in progress; the loop then ends with status 0. The sleep
# runs in the background so that `wait` returns at the signal; it is killed whichever moment the
# signal comes, also between its start and the line that records its PID.
stop=
sleeper=
trap 'stop=1; [ -n "$sleeper" ] && kill "$sleeper" 2>/dev/null' TERM INT HUP
while [ -z "$stop" ]; do
  "$gpuguard" doctor --prometheus "$textfile" "$@" > /dev/null
  status=$?
  case $status in
    0 | 1) ;;   # 1: processes hold a GPU, a finding
    2) echo "gpuguard-doctor-loop: gpuguard doctor refused its options (status 2); stopping" >&2
       exit 2 ;;
    *) echo "gpuguard-doctor-loop: gpuguard doctor exited with status $status; trying again in ${interval} s" >&2 ;;
  esac
  [ -n "$stop" ] && break
  sleep "$interval" &
  sleeper=$!
  [ -n "$stop" ] && kill "$sleeper" 2>/dev/null
  wait "$sleeper"
  sleeper=
done
exit 0
