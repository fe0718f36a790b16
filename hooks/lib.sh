# Shared by the attribution hooks (sourced, never run). Slurm gives hooks no PATH and keeps none of their
# output, so everything here uses absolute tools from coreutils/grep/util-linux and logs to a file.
PATH=/usr/bin:/bin:/usr/sbin:/sbin
export PATH
umask 077

ATTRIBUTION_HOOK_ENV=${ATTRIBUTION_HOOK_ENV:-/etc/attribution/hook.env}
# shellcheck disable=SC1090
[ -r "$ATTRIBUTION_HOOK_ENV" ] && . "$ATTRIBUTION_HOOK_ENV"

: "${ATTRIBUTION_BIN:=/usr/local/bin/attribution}"        # the attribution command (e.g. in a venv)
: "${ATTRIBUTION_BUDGET:=20}"                            # seconds; keep well under PrologEpilogTimeout
: "${ATTRIBUTION_KERNEL_SOURCE:=auto}"                   # auto | journald | dmesg | file
: "${ATTRIBUTION_KERNEL_FILE:=}"                         # for kernel source 'file', e.g. /var/log/kern.log
: "${ATTRIBUTION_FM_LOG:=/var/log/fabricmanager.log}"
: "${ATTRIBUTION_STATE_DIR:=/var/lib/attribution/state}" # prolog start stamps
: "${ATTRIBUTION_LOG:=/var/log/attribution/hooks.log}"
: "${ATTRIBUTION_LOOKBACK_BYTES:=16777216}"              # how much of a log to check when the prolog left no offset
ATTRIBUTION_HOOKS_DIR=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
: "${ATTRIBUTION_FILTER:=$ATTRIBUTION_HOOKS_DIR/suspicious.patterns}"  # generated: attribution rules filter
: "${ATTRIBUTION_TELEMETRY:=on}"                         # on | off: counter snapshots at prolog and epilog
: "${ATTRIBUTION_NVIDIA_SMI:=/usr/bin/nvidia-smi}"       # a missing tool is a coverage gap, not an error
: "${ATTRIBUTION_SYSFS_ROOT:=}"                          # prefix of /sys (a test fakes a node's sysfs there)
: "${ATTRIBUTION_SMI_TIMEOUT:=10}"                       # seconds nvidia-smi may take
# The counter files read under /sys/class/infiniband/<dev>/ports/<port>/ (rules/counters.yaml reads no others)
: "${ATTRIBUTION_IB_COUNTERS:=counters/link_downed counters/symbol_error counters/port_rcv_errors counters/link_error_recovery counters/local_link_integrity_errors counters/excessive_buffer_overrun_errors counters/port_rcv_remote_physical_errors}"
# The nvidia-smi XML elements whose lines are compared between the prolog and the epilog (the counters the rules
# read; timestamps, clocks, temperatures and memory use differ in every snapshot and are left out)
ATTRIBUTION_SMI_TAGS='gpu|total|device_memory|dram_uncorrectable|sram_uncorrectable|sram_uncorrectable_parity|sram_uncorrectable_secded|sram_threshold_exceeded|retired_count|pending_retirement|pending_blacklist|remapped_row_unc|remapped_row_pending|remapped_row_failure|replay_counter|replay_rollover_counter|reset_required|drain_and_reset_recommended|gpu_recovery_action'
export ATTRIBUTION_CONFIG ATTRIBUTION_HOME ATTRIBUTION_DATABASE_URL SLURM_CONF

if [ "$ATTRIBUTION_KERNEL_SOURCE" = auto ]; then
  if [ -n "$ATTRIBUTION_KERNEL_FILE" ]; then
    ATTRIBUTION_KERNEL_SOURCE=file
  elif [ -d /run/systemd/journal ] && [ -x /usr/bin/journalctl ]; then
    ATTRIBUTION_KERNEL_SOURCE=journald
  else
    ATTRIBUTION_KERNEL_SOURCE=dmesg
  fi
fi

attribution_log() {
  local dir=${ATTRIBUTION_LOG%/*}
  [ -d "$dir" ] || mkdir -p "$dir" 2>/dev/null
  printf '%s %s[%s] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${0##*/}" "$$" "$*" >>"$ATTRIBUTION_LOG" 2>/dev/null
}

# True for a plain decimal number of at most 18 digits. Values from the environment or a state file are checked
# with it before any arithmetic: bash evaluates a variable's text inside $((...)) as an expression, array
# subscripts and command substitutions included (SLURM_JOB_START_TIME='a[$(cmd)]' would run cmd as root).
attribution_number() {
  case $1 in
    '' | *[!0-9]*) return 1 ;;
  esac
  [ "${#1}" -le 18 ]
}

# The bytes of a log written since the job started (from the prolog's offset), or its last bytes.
attribution_tail() {
  local file=$1 offset=$2 size
  attribution_number "$offset" || offset=
  [ -f "$file" ] && [ -r "$file" ] || return 0
  size=$(stat -c %s "$file" 2>/dev/null) || return 0
  if [ -n "$offset" ] && [ "$offset" -le "$size" ] 2>/dev/null; then
    timeout -k 1 10 tail -c +$((offset + 1)) -- "$file"
  else
    timeout -k 1 10 tail -c "$ATTRIBUTION_LOOKBACK_BYTES" -- "$file"
  fi
}

# Exit 0 when this node's kernel or Fabric Manager log since the job started holds a line worth a look.
attribution_suspicious() {
  local start=$1 koff=$2 foff=$3 since btime
  attribution_number "$start" || start=
  attribution_number "$koff" || koff=
  attribution_number "$foff" || foff=
  case "$ATTRIBUTION_KERNEL_SOURCE" in
    file)
      attribution_tail "$ATTRIBUTION_KERNEL_FILE" "$koff" | grep -F -q -f "$ATTRIBUTION_FILTER" && return 0 ;;
    journald)
      journalctl -k -q -o cat --no-pager ${start:+--since=@$((start - 300))} 2>/dev/null \
        | grep -F -q -f "$ATTRIBUTION_FILTER" && return 0 ;;
    *)
      btime=$(awk '/^btime/ {print $2}' /proc/stat 2>/dev/null)
      since=0
      attribution_number "$btime" || btime=
      [ -n "$start" ] && [ -n "$btime" ] && since=$((start - btime - 300))
      dmesg 2>/dev/null | awk -v t="$since" '{ s = substr($0, 2, index($0, "]") - 2) + 0; if (s >= t) print }' \
        | grep -F -q -f "$ATTRIBUTION_FILTER" && return 0 ;;
  esac
  attribution_tail "$ATTRIBUTION_FM_LOG" "$foff" | grep -F -q -f "$ATTRIBUTION_FILTER" && return 0
  return 1
}

# Run the attribution command, killed if it outlives the budget (it also bounds itself).
attribution_run() {
  # --started: the budget counts from here (as timeout's does), not from when Python has finished importing
  timeout -k 2 "$ATTRIBUTION_BUDGET" "$ATTRIBUTION_BIN" epilog --budget "$ATTRIBUTION_BUDGET" \
    --started "$(date +%s.%N)" "$@" </dev/null >>"$ATTRIBUTION_LOG" 2>&1
  local rc=$?
  [ "$rc" = 0 ] || attribution_log "attribution epilog ended with status $rc"
}

# Snapshot this node's counters into $1 (spec/bundle.md "Telemetry snapshots", in the compact listing form):
# nvidia-smi.xml; sysfs.txt, one `path:value` line per watched InfiniBand port counter and per AER TOTAL_ERR_*
# line of every PCI device; at the epilog pci-topology.txt (each PCI device's sysfs path: its bridges); and
# counters.key, the lines the epilog compares. A handful of processes, no Python; whatever is missing is left out.
attribution_snapshot() {
  local dir=$1 phase=$2 sys="${ATTRIBUTION_SYSFS_ROOT}/sys" c files=()
  mkdir -p "$dir" || return 1
  if [ -x "$ATTRIBUTION_NVIDIA_SMI" ]; then
    timeout -k 1 "$ATTRIBUTION_SMI_TIMEOUT" "$ATTRIBUTION_NVIDIA_SMI" -q -x >"$dir/nvidia-smi.xml" 2>/dev/null \
      || rm -f "$dir/nvidia-smi.xml"
  fi
  if [ -d "$sys/class/infiniband" ]; then
    for c in $ATTRIBUTION_IB_COUNTERS; do files+=("$sys"/class/infiniband/*/ports/*/"$c"); done
  fi
  files+=("$sys"/bus/pci/devices/*/aer_dev_fatal "$sys"/bus/pci/devices/*/aer_dev_nonfatal)
  grep -s -H -E '^([0-9]+|TOTAL_ERR_[A-Z]+ [0-9]+)$' "${files[@]}" >"$dir/sysfs.txt"
  [ "$phase" = epilog ] && [ -s "$dir/sysfs.txt" ] \
    && readlink -f "$sys"/bus/pci/devices/* >"$dir/pci-topology.txt" 2>/dev/null
  grep -s -h -E -e "<($ATTRIBUTION_SMI_TAGS)[> ]" -e '^/' "$dir/nvidia-smi.xml" "$dir/sysfs.txt" >"$dir/counters.key"
  return 0
}
