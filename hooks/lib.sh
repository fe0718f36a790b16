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
: "${ATTRIBUTION_FILTER:=$ATTRIBUTION_HOOKS_DIR/suspicious.patterns}"
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

# The bytes of a log written since the job started (from the prolog's offset), or its last bytes.
attribution_tail() {
  local file=$1 offset=$2 size
  [ -r "$file" ] || return 0
  size=$(stat -c %s "$file" 2>/dev/null) || return 0
  if [ -n "$offset" ] && [ "$offset" -le "$size" ] 2>/dev/null; then
    tail -c +$((offset + 1)) "$file"
  else
    tail -c "$ATTRIBUTION_LOOKBACK_BYTES" "$file"
  fi
}

# Exit 0 when this node's kernel or Fabric Manager log since the job started holds a line worth a look.
attribution_suspicious() {
  local start=$1 koff=$2 foff=$3 since btime
  case "$ATTRIBUTION_KERNEL_SOURCE" in
    file)
      attribution_tail "$ATTRIBUTION_KERNEL_FILE" "$koff" | grep -F -q -f "$ATTRIBUTION_FILTER" && return 0 ;;
    journald)
      journalctl -k -q -o cat --no-pager ${start:+--since=@$((start - 300))} 2>/dev/null \
        | grep -F -q -f "$ATTRIBUTION_FILTER" && return 0 ;;
    *)
      btime=$(awk '/^btime/ {print $2}' /proc/stat 2>/dev/null)
      since=0
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
