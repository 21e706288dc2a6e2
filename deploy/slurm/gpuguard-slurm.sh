# gpuguard-slurm.sh: what prolog.sh and epilog.sh share. Sourced from the folder they are in, not
# run. POSIX sh. README.md beside it says what the settings mean and where the files go.
#
# Settings: what the defaults file (GPUGUARD_SLURM_DEFAULTS, sourced as root: keep it root-owned)
# sets wins, then the environment, then the defaults below. slurmd gives a prolog or epilog no PATH
# and none of its own environment, so on a real node the defaults file is where settings go.

: "${gg_script:?is set by the script that sources gpuguard-slurm.sh (prolog or epilog)}"
GPUGUARD_SLURM_DEFAULTS=${GPUGUARD_SLURM_DEFAULTS:-/etc/default/gpuguard-slurm}
if [ -r "$GPUGUARD_SLURM_DEFAULTS" ]; then
  # shellcheck disable=SC1090  # the operator's file, named at run time
  . "$GPUGUARD_SLURM_DEFAULTS"
fi
PATH=${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}
GPUGUARD=${GPUGUARD:-gpuguard}
GPUGUARD_DEVICE_PREFIX=${GPUGUARD_DEVICE_PREFIX:-/dev/nvidia}
GPUGUARD_PYTHON=${GPUGUARD_PYTHON:-python3}
GPUGUARD_SCONTROL=${GPUGUARD_SCONTROL:-scontrol}
GPUGUARD_GRACE=${GPUGUARD_GRACE:-10}
GPUGUARD_SETTLE_SECONDS=${GPUGUARD_SETTLE_SECONDS:-30}
GPUGUARD_RESIDUE_LIMIT_BYTES=${GPUGUARD_RESIDUE_LIMIT_BYTES:-0}
GPUGUARD_SLURM_LOG_DIR=${GPUGUARD_SLURM_LOG_DIR:-/var/log/gpuguard}
export PATH GPUGUARD_DEVICE_PREFIX

gg_node=${SLURMD_NODENAME:-$(hostname -s)}
gg_job=${SLURM_JOB_ID:-unknown}
gg_tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpuguard-slurm.XXXXXX") || exit 1
trap 'rm -rf "$gg_tmp"' EXIT

# One line to the log (best effort: a full or missing log folder never changes the verdict).
gg_log() {
  mkdir -p "$GPUGUARD_SLURM_LOG_DIR" 2>/dev/null
  printf '%s %s job %s on %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$gg_script" "$gg_job" "$gg_node" "$1" \
    >> "$GPUGUARD_SLURM_LOG_DIR/gpuguard-slurm.log" 2>/dev/null
  return 0
}

# The PIDs of every job step on this node (scontrol listpids asks each slurmstepd here): a process
# among them belongs to a running job and is nobody's leftover. Asked after the doctor's scan, so
# that a step starting meanwhile is known: a holder the scan saw that is in no step then is in none. With no step here scontrol says
# "No job steps exist on this node." (status 1); any other answer without its header is a failure,
# kept in gg_steps_note for the reason: every holder then counts as one of no job.
gg_job_pids() {
  "$GPUGUARD_SCONTROL" listpids > "$gg_tmp/listpids" 2>&1
  awk '$1 ~ /^[0-9]+$/ { print $1 }' "$gg_tmp/listpids" > "$gg_tmp/job_pids"
  gg_steps_note=""
  if ! grep -q -e '^PID ' -e 'No job steps exist' "$gg_tmp/listpids"; then
    gg_steps_note=" ($GPUGUARD_SCONTROL listpids failed: $(head -n 1 "$gg_tmp/listpids" | cut -c1-60))"
  fi
}

# gg_doctor NAME [ARGS...]: `gpuguard doctor --json ARGS`, then the job steps (gg_job_pids), its
# report read into $gg_tmp/NAME.lines:
#   holder PID START_TIME CLASS COMM   a process of no running job step that holds a device
#   reap PID ACTION COMM               what --reap did to a named process
#   residue BYTES|unknown              device memory no process here accounts for (unknown: no NVML)
# Sets gg_status to the doctor's exit status (0 none holds, 1 some hold, 3 it could not do its
# job, with or without a report); 9 when its report could not be read. The names are cut to
# letters, digits and ._-: (a job chooses its process names; they go into the node's reason).
gg_doctor() {
  gg_name=$1
  shift
  rm -f "$gg_tmp/$gg_name.lines"
  "$GPUGUARD" doctor --json --device-prefix "$GPUGUARD_DEVICE_PREFIX" "$@" > "$gg_tmp/$gg_name.json" 2> "$gg_tmp/$gg_name.err"
  gg_status=$?
  gg_job_pids
  case $gg_status in 0|1|3) ;; *) return 0 ;; esac
  [ -s "$gg_tmp/$gg_name.json" ] || return 0  # 3 with no report: it could not look at all
  "$GPUGUARD_PYTHON" - "$gg_tmp/$gg_name.json" "$gg_tmp/job_pids" > "$gg_tmp/$gg_name.lines" 2>> "$gg_tmp/$gg_name.err" <<'EOF' || gg_status=9
import json, re, sys
with open(sys.argv[1]) as f:
    doc = json.loads(f.read().splitlines()[-1])
with open(sys.argv[2]) as f:
    steps = {int(word) for word in f.read().split()}
def name(text):
    return re.sub(r"[^A-Za-z0-9._:-]", "_", text or "?")[:32]
for h in doc["holders"]:
    if h.get("reap"):
        print("reap", h["pid"], h["reap"]["action"], name(h.get("comm")))
    if h["holds"] and h["pid"] not in steps:
        print("holder", h["pid"], h.get("start_time") or 0, h["class"], name(h.get("comm")))
residue = doc.get("residue_bytes")
print("residue", "unknown" if residue is None else residue)
EOF
}

# What makes the GPU not clean in $gg_tmp/NAME.lines, as a short phrase for the node's reason;
# empty when it is clean: no holder outside the running jobs, and a residue within the limit.
gg_dirt() {
  awk -v limit="$GPUGUARD_RESIDUE_LIMIT_BYTES" '
    $1 == "holder" { n++; if (n <= 3) list = list (n > 1 ? ", " : "") "PID " $2 " " $5 " (" $4 ")" }
    $1 == "residue" && $2 != "unknown" && $2 + 0 > limit + 0 { residue = $2 }
    END {
      if (n > 3) list = list " and " (n - 3) " more"
      if (n) out = list (n > 1 ? " hold" : " holds") " a GPU device"
      if (residue != "") out = out (out != "" ? "; " : "") residue " bytes of GPU memory held by no process here"
      print out
    }' "$gg_tmp/$1.lines"
}

# The full text report, for the operator who reads the reason; prints its path ("" when the log
# folder cannot be written).
gg_keep_report() {
  gg_report="$GPUGUARD_SLURM_LOG_DIR/$gg_script-job$gg_job.txt"
  mkdir -p "$GPUGUARD_SLURM_LOG_DIR" 2>/dev/null || return 0
  "$GPUGUARD" doctor --device-prefix "$GPUGUARD_DEVICE_PREFIX" > "$gg_report" 2>&1
  if [ -s "$gg_report" ]; then printf '%s' "$gg_report"; fi
}

# Drains this node with "gpuguard: WHAT", the full report named there. Its status is scontrol's.
gg_drain() {
  gg_where=$(gg_keep_report)
  gg_reason="gpuguard: $1$gg_steps_note${gg_where:+; see $gg_where}"
  gg_log "drain: $gg_reason"
  "$GPUGUARD_SCONTROL" update nodename="$gg_node" state=drain reason="$gg_reason"
}

# The doctor's failure as a phrase (it could not list /proc, a usage error, no such program, no
# JSON reader).
gg_failure() {
  if [ "$gg_status" = 9 ]; then
    printf 'its report could not be read with %s (%s)' "$GPUGUARD_PYTHON" "$(tail -n 1 "$gg_tmp/$1.err" | cut -c1-80)"
  else
    printf '%s doctor failed with status %s (%s)' "$GPUGUARD" "$gg_status" "$(head -n 1 "$gg_tmp/$1.err" | cut -c1-80)"
  fi
}
