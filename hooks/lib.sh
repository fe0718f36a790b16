# Shared by the attribution hooks (sourced, never run). Slurm gives hooks no PATH and keeps none of their
# output, so everything here uses absolute tools from coreutils/grep/util-linux and logs to a file.
PATH=/usr/bin:/bin:/usr/sbin:/sbin
export PATH
umask 077

ATTRIBUTION_STARTED_US=${EPOCHREALTIME//[.,]/}             # bash 5: microseconds, no process started

# hook.env is read as data, never run: `KEY=VALUE` lines of the keys below (ATTRIBUTION_KEYS), each value taken
# literally (no $VAR, $(...) or backquote is expanded; one pair of surrounding quotes is removed), `#` comment lines.
# The file is opened once, without following a link: it must not be a link, and the file opened must be the one
# the path names (device and inode of the open file against the path's, after the open), owned by root or by the
# user this hook runs as and not writable by group or others, and so must every folder up to / (none a link).
# Otherwise none of it is used, the defaults apply and the refusal is logged. attribution/node/hookenv.py reads it
# the same way (tests hold the two to the same cases).
ATTRIBUTION_KEYS=" ATTRIBUTION_BIN ATTRIBUTION_CTLD_BIN ATTRIBUTION_BUDGET ATTRIBUTION_KERNEL_SOURCE ATTRIBUTION_KERNEL_FILE
 ATTRIBUTION_FM_LOG ATTRIBUTION_STATE_DIR ATTRIBUTION_SPOOL_DIR ATTRIBUTION_LOG ATTRIBUTION_LOOKBACK_BYTES
 ATTRIBUTION_FILTER ATTRIBUTION_TELEMETRY ATTRIBUTION_GPU_TOOL ATTRIBUTION_NVIDIA_SMI ATTRIBUTION_SYSFS_ROOT
 ATTRIBUTION_SMI_TIMEOUT ATTRIBUTION_IB_COUNTERS ATTRIBUTION_TEXTFILE_DIR ATTRIBUTION_SCONTROL ATTRIBUTION_CONFIG
 ATTRIBUTION_SERVICE_URL ATTRIBUTION_SERVICE_TOKEN_FILE ATTRIBUTION_SERVICE_CA_FILE ATTRIBUTION_SERVICE_TIMEOUT
 ATTRIBUTION_CLUSTER ATTRIBUTION_LOOKBACK_SECONDS ATTRIBUTION_NODE_LOG_BYTES ATTRIBUTION_KEPT_BYTES SLURM_CONF "
ATTRIBUTION_KEYS=${ATTRIBUTION_KEYS//$'\n'/ }  # one space between names, so that " KEY " finds each
ATTRIBUTION_ENV_REFUSED=

# Why the open file on descriptor $2 (path $1) may not be read, in ATTRIBUTION_ENV_REFUSED; returns 1 when it may.
attribution_env_refusal() {
  local f=$1 fd=$2 d what uid mode rest line i=0
  local paths=("$f")
  d=${f%/*}
  while :; do
    d=${d:-/}
    paths+=("$d")
    [ "$d" = / ] && break
    d=${d%/*}
  done
  # one process: the open file (`-`, the descriptor given as its input: GNU stat since 2009), then the path's
  # own entry and every folder up to / (none followed); exec: no second fork in the substitution
  what=$(exec stat -c '%u %a %d:%i %F' -- - "${paths[@]}" <&"$fd" 2>/dev/null) \
    || { ATTRIBUTION_ENV_REFUSED="cannot stat $f or a folder above it"; return 0; }
  while IFS= read -r line; do
    # shellcheck disable=SC2086
    set -- $line  # uid mode device:inode type...
    if [ "$i" = 0 ]; then
      uid=$1 mode=$2 rest=$3
      case "$line" in *'regular file'|*'regular empty file') ;; *) ATTRIBUTION_ENV_REFUSED="$f is not a regular file"; return 0 ;; esac
    elif [ "$i" = 1 ]; then
      case "$line" in
        *'symbolic link') ATTRIBUTION_ENV_REFUSED="$f is a symbolic link"; return 0 ;;
      esac
      [ "$rest" = "$3" ] || { ATTRIBUTION_ENV_REFUSED="$f changed while it was opened"; return 0; }
      attribution_owned "$f" "$uid" "$mode" || return 0
    else
      d=${paths[$((i - 1))]}
      [ "${line#* * * }" = directory ] || { ATTRIBUTION_ENV_REFUSED="$d is a symbolic link, not a folder"; return 0; }
      attribution_owned "$d" "$1" "$2" || return 0
    fi
    i=$((i + 1))
  done <<<"$what"
  [ "$i" = $((${#paths[@]} + 1)) ] || { ATTRIBUTION_ENV_REFUSED="cannot stat $f or a folder above it"; return 0; }
  return 1
}

attribution_owned() {  # $1 path, $2 owner uid, $3 octal mode: 0 when only root (or this user) can change it
  case "$2$3" in ''|*[!0-9]*) ATTRIBUTION_ENV_REFUSED="unreadable mode of $1"; return 1 ;; esac
  if [ "$2" != 0 ] && [ "$2" != "$EUID" ]; then ATTRIBUTION_ENV_REFUSED="$1 is owned by uid $2, not by root"; return 1; fi
  if [ $((8#$3 & 8#022)) != 0 ]; then ATTRIBUTION_ENV_REFUSED="$1 is writable by group or others (mode $3)"; return 1; fi
  return 0
}

# Read hook.env ($1) as data into the variables it names (see above).
attribution_read_env() {
  local f=$1 fd line key value
  case "$f" in /*) ;; *) ATTRIBUTION_ENV_REFUSED="$f is not an absolute path"; return ;; esac
  [ -e "$f" ] || [ -L "$f" ] || return 0
  [ -L "$f" ] && { ATTRIBUTION_ENV_REFUSED="$f is a symbolic link"; return; }
  exec {fd}<"$f" 2>/dev/null || { ATTRIBUTION_ENV_REFUSED="cannot open $f"; return; }
  if attribution_env_refusal "$f" "$fd"; then
    exec {fd}<&-
    return
  fi
  while IFS= read -r line || [ -n "$line" ]; do
    line=${line#"${line%%[![:space:]]*}"}
    case "$line" in ''|'#'*) continue ;; esac
    line=${line#export }
    key=${line%%=*}
    [ "$key" = "$line" ] && continue
    value=${line#*=}
    case "$ATTRIBUTION_KEYS" in *" $key "*) ;; *) continue ;; esac
    case "$value" in \'*\') value=${value:1:${#value}-2} ;; \"*\") value=${value:1:${#value}-2} ;; esac
    printf -v "$key" '%s' "$value"
  done <&"$fd"
  exec {fd}<&-
}

ATTRIBUTION_HOOK_ENV=${ATTRIBUTION_HOOK_ENV:-/etc/attribution/hook.env}
attribution_read_env "$ATTRIBUTION_HOOK_ENV"  # refused: logged once the log's path is known

: "${ATTRIBUTION_BIN:=/usr/local/bin/attribution-node}"   # the node collector (standard library only)
: "${ATTRIBUTION_CTLD_BIN:=/usr/local/bin/attribution}"   # the full command, on the controller
: "${ATTRIBUTION_BUDGET:=20}"                            # seconds; keep well under PrologEpilogTimeout
: "${ATTRIBUTION_KERNEL_SOURCE:=auto}"                   # auto | journald | dmesg | file
: "${ATTRIBUTION_KERNEL_FILE:=}"                         # for kernel source 'file', e.g. /var/log/kern.log
: "${ATTRIBUTION_FM_LOG:=/var/log/fabricmanager.log}"
: "${ATTRIBUTION_STATE_DIR:=/var/lib/attribution/state}" # prolog start stamps
: "${ATTRIBUTION_LOG:=/var/log/attribution/hooks.log}"
: "${ATTRIBUTION_LOOKBACK_BYTES:=16777216}"              # how much of a log to check when the prolog left no offset
# this file's folder (the filter lives beside it): resolved by a process only when this file is a link
ATTRIBUTION_HOOKS_DIR=${BASH_SOURCE[0]%/*}
[ -L "${BASH_SOURCE[0]}" ] && ATTRIBUTION_HOOKS_DIR=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
case "$ATTRIBUTION_HOOKS_DIR" in /*) ;; *) ATTRIBUTION_HOOKS_DIR=$PWD/$ATTRIBUTION_HOOKS_DIR ;; esac
: "${ATTRIBUTION_FILTER:=$ATTRIBUTION_HOOKS_DIR/suspicious.patterns}"  # generated: attribution rules filter
: "${ATTRIBUTION_TELEMETRY:=on}"                         # on | off: counter snapshots at prolog and epilog
: "${ATTRIBUTION_GPU_TOOL:=nvidia-smi}"                   # nvidia-smi | none
: "${ATTRIBUTION_NVIDIA_SMI:=/usr/bin/nvidia-smi}"       # a missing tool is a coverage gap, not an error
: "${ATTRIBUTION_SYSFS_ROOT:=}"                          # prefix of /sys (a test fakes a node's sysfs there)
: "${ATTRIBUTION_SMI_TIMEOUT:=10}"                       # seconds nvidia-smi may take
: "${ATTRIBUTION_TEXTFILE_DIR:=auto}"                    # node_exporter textfile collector folder, or off
# The counter files read under /sys/class/infiniband/<dev>/ports/<port>/ (rules/counters.yaml reads no others)
: "${ATTRIBUTION_IB_COUNTERS:=counters/link_downed counters/symbol_error counters/port_rcv_errors counters/link_error_recovery counters/local_link_integrity_errors counters/excessive_buffer_overrun_errors counters/port_rcv_remote_physical_errors}"
# The nvidia-smi XML elements whose lines are compared between the prolog and the epilog (the counters the rules
# read; timestamps, clocks, temperatures and memory use differ in every snapshot and are left out)
ATTRIBUTION_SMI_TAGS='gpu|total|device_memory|dram_uncorrectable|dram_correctable|sram_correctable|sram_uncorrectable|sram_uncorrectable_parity|sram_uncorrectable_secded|sram_threshold_exceeded|retired_count|pending_retirement|pending_blacklist|remapped_row_unc|remapped_row_pending|remapped_row_failure|replay_counter|replay_rollover_counter|reset_required|drain_and_reset_recommended|gpu_recovery_action|channel_repair_pending|tpc_repair_pending|unrepairable_memory'
if [ "$ATTRIBUTION_TEXTFILE_DIR" = auto ]; then
  ATTRIBUTION_TEXTFILE_DIR=off
  [ -d /var/lib/node_exporter/textfile_collector ] && ATTRIBUTION_TEXTFILE_DIR=/var/lib/node_exporter/textfile_collector
fi
# what the commands read of it, passed on: they read hook.env no more
for key in $ATTRIBUTION_KEYS; do [ -n "${!key:-}" ] && export "${key?}"; done
ATTRIBUTION_SETTINGS_FROM_HOOK=1
export ATTRIBUTION_SETTINGS_FROM_HOOK

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

[ -n "$ATTRIBUTION_ENV_REFUSED" ] && attribution_log "ignoring $ATTRIBUTION_HOOK_ENV: $ATTRIBUTION_ENV_REFUSED"

# node_exporter textfile (attribution_hook_<hook>.prom): when this hook last ended, how long it took, whether it
# started the attribution command and that command's status (0 when not started). Written to a dot-file and
# renamed, as node_exporter's textfile collector expects; nothing when the folder is off or missing.
ATTRIBUTION_RAN=0
ATTRIBUTION_RC=0
attribution_textfile() {
  local hook=$1 dir=$ATTRIBUTION_TEXTFILE_DIR now us tmp
  [ "$dir" != off ] && [ -d "$dir" ] && [ -w "$dir" ] || return 0
  now=${EPOCHREALTIME//[.,]/}
  attribution_number "$now" && attribution_number "$ATTRIBUTION_STARTED_US" || return 0
  us=$((now - ATTRIBUTION_STARTED_US))
  tmp="$dir/.attribution_hook_$hook.prom.$$"
  umask 022  # node_exporter runs as another user
  {
    printf '# HELP attribution_hook_last_run_timestamp_seconds When the attribution %s hook last ended.\n' "$hook"
    printf '# TYPE attribution_hook_last_run_timestamp_seconds gauge\n'
    printf 'attribution_hook_last_run_timestamp_seconds{hook="%s"} %d.%06d\n' "$hook" $((now / 1000000)) $((now % 1000000))
    printf '# HELP attribution_hook_last_duration_seconds How long its last run took.\n'
    printf '# TYPE attribution_hook_last_duration_seconds gauge\n'
    printf 'attribution_hook_last_duration_seconds{hook="%s"} %d.%06d\n' "$hook" $((us / 1000000)) $((us % 1000000))
    printf '# HELP attribution_hook_last_attributed 1 when its last run started the attribution command.\n'
    printf '# TYPE attribution_hook_last_attributed gauge\n'
    printf 'attribution_hook_last_attributed{hook="%s"} %d\n' "$hook" "$ATTRIBUTION_RAN"
    printf '# HELP attribution_hook_last_status Exit status of that command (124: killed at the budget; 0 when not started).\n'
    printf '# TYPE attribution_hook_last_status gauge\n'
    printf 'attribution_hook_last_status{hook="%s"} %d\n' "$hook" "$ATTRIBUTION_RC"
  } >"$tmp" 2>/dev/null && mv -f "$tmp" "$dir/attribution_hook_$hook.prom" 2>/dev/null || rm -f "$tmp" 2>/dev/null
  umask 077
  return 0
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
  size=$(exec stat -c %s -- "$file" 2>/dev/null) || return 0
  if [ -n "$offset" ] && [ "$offset" -le "$size" ] 2>/dev/null; then
    set -- -c +$((offset + 1))
  else
    set -- -c "$ATTRIBUTION_LOOKBACK_BYTES"
  fi
  # in a pipeline (where the hooks call it) this subshell becomes the timeout: one fork fewer
  [ "$BASH_SUBSHELL" -gt 0 ] && exec timeout -k 1 10 tail "$@" -- "$file"
  timeout -k 1 10 tail "$@" -- "$file"
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
      btime=$(exec awk '/^btime/ {print $2}' /proc/stat 2>/dev/null)
      since=0
      attribution_number "$btime" || btime=
      [ -n "$start" ] && [ -n "$btime" ] && since=$((start - btime - 300))
      dmesg 2>/dev/null | awk -v t="$since" '{ s = substr($0, 2, index($0, "]") - 2) + 0; if (s >= t) print }' \
        | grep -F -q -f "$ATTRIBUTION_FILTER" && return 0 ;;
  esac
  # no Fabric Manager log (a node without NVSwitches): no pipeline, two processes fewer
  [ -f "$ATTRIBUTION_FM_LOG" ] || return 1
  attribution_tail "$ATTRIBUTION_FM_LOG" "$foff" | grep -F -q -f "$ATTRIBUTION_FILTER" && return 0
  return 1
}

# Run a command ($1: the node collector or, on the controller, the full command) as `$1 epilog ...`, killed if it
# outlives the budget (it also bounds itself).
attribution_run() {
  local bin=$1
  shift
  # --started: the budget counts from here (as timeout's does), not from when Python has finished importing;
  # bash 5's clock when it has one (no `date` process), in the locale's decimal point
  local now=${EPOCHREALTIME:-}
  now=${now/,/.}
  [ -n "$now" ] || now=$(date +%s.%N)
  timeout -k 2 "$ATTRIBUTION_BUDGET" "$bin" epilog --budget "$ATTRIBUTION_BUDGET" \
    --started "$now" "$@" </dev/null >>"$ATTRIBUTION_LOG" 2>&1
  local rc=$?
  ATTRIBUTION_RAN=1 ATTRIBUTION_RC=$rc
  [ "$rc" = 0 ] || attribution_log "attribution epilog ended with status $rc"
}

# Snapshot this node's counters into $1 (docs/bundle.md "Telemetry snapshots", in the compact listing form):
# nvidia-smi.xml (with nvidia-smi.status and .err when it failed); sysfs.txt, one `path:value` line per watched
# InfiniBand port counter and per AER TOTAL_ERR_* line of every PCI device (the node collector adds the PCI
# topology when the job is worth a look: no process here for it); and counters.key, the lines the epilog compares
# (the watched XML elements, the sysfs lines, and what nvidia-smi printed beside its XML or on failing: a warning
# naming a GPU, "No devices were found"). A handful of processes, no Python; whatever is missing is left out. The
# files travel as they are: the centre parses them (the node collector sends their text).
attribution_snapshot() {
  local dir=$1 sys="${ATTRIBUTION_SYSFS_ROOT}/sys" c files=()
  # the prolog makes the epilog's folder too: the clean job's epilog then starts no mkdir
  if [ -d "$dir" ]; then :
  elif [ "${dir##*/}" = prolog ]; then mkdir -p "$dir" "${dir%/*}/epilog" || return 1
  else mkdir -p "$dir" || return 1
  fi
  if [ "$ATTRIBUTION_GPU_TOOL" = nvidia-smi ] && [ -x "$ATTRIBUTION_NVIDIA_SMI" ]; then
    # a failed run is kept with its status and stderr: a GPU that fell off the bus makes nvidia-smi fail naming it
    timeout -k 1 "$ATTRIBUTION_SMI_TIMEOUT" "$ATTRIBUTION_NVIDIA_SMI" -q -x >"$dir/nvidia-smi.xml" \
      2>"$dir/nvidia-smi.err" || printf '%s\n' "$?" >"$dir/nvidia-smi.status"
  fi
  if [ -d "$sys/class/infiniband" ]; then
    for c in $ATTRIBUTION_IB_COUNTERS; do files+=("$sys"/class/infiniband/*/ports/*/"$c"); done
  fi
  files+=("$sys"/bus/pci/devices/*/aer_dev_fatal "$sys"/bus/pci/devices/*/aer_dev_nonfatal)
  grep -s -H -E '^([0-9]+|TOTAL_ERR_[A-Z]+ [0-9]+)$' "${files[@]}" >"$dir/sysfs.txt"
  # one grep: the watched XML elements, and every line that is not XML (the sysfs lines, nvidia-smi's messages)
  grep -s -h -E -e "<($ATTRIBUTION_SMI_TAGS)[> ]" -e '^[[:space:]]*[^<[:space:]]' "$dir/nvidia-smi.xml" \
    "$dir/sysfs.txt" "$dir/nvidia-smi.err" "$dir/nvidia-smi.status" >"$dir/counters.key"
  return 0
}
