"""The node's settings: hook.env, read as data, never run, and the environment the hooks pass on.

hook.env (`/etc/attribution/hook.env`, or `$ATTRIBUTION_HOOK_ENV`) holds `KEY=VALUE` lines of a fixed list of keys
(`KEYS`); `#` starts a comment line; a value may be wrapped in one pair of single or double quotes, and is taken
literally otherwise: no `$VAR`, `$(...)` or backquote is expanded, nothing is run. The file is opened without
following a link (O_NOFOLLOW) and checked on the open file: it and every folder up to `/` must belong to root or to
the user reading it and must not be writable by group or others, or it is refused whole (the defaults apply, and the
refusal is the one line `problem` says). hooks/lib.sh reads it the same way (a test holds the two to the same cases);
the agent reads it again only when run outside a hook (the spool timer, a person). Values in the environment win:
they came from the same file through the hook.

Standard library only, as everything in attribution/node.
"""

from __future__ import annotations

import errno
import os
import stat

__all__ = ["KEYS", "HookEnv", "parse", "read", "settings"]

DEFAULT_PATH = "/etc/attribution/hook.env"
MAX_BYTES = 64 * 1024

#: Every key hook.env may set, with its default (None: unset). hooks/lib.sh knows the same list.
KEYS: dict[str, str | None] = {
    "ATTRIBUTION_BIN": "/usr/local/bin/attribution-node",  # the node agent the hooks start
    "ATTRIBUTION_CTLD_BIN": "/usr/local/bin/attribution",  # the full command the controller's hook starts
    "ATTRIBUTION_BUDGET": "20",  # seconds; keep well under PrologEpilogTimeout
    "ATTRIBUTION_KERNEL_SOURCE": "auto",  # auto | journald | dmesg | file
    "ATTRIBUTION_KERNEL_FILE": None,  # for kernel source 'file', e.g. /var/log/kern.log
    "ATTRIBUTION_FM_LOG": "/var/log/fabricmanager.log",
    "ATTRIBUTION_STATE_DIR": "/var/lib/attribution/state",  # the prolog's start stamps and snapshots
    "ATTRIBUTION_SPOOL_DIR": "/var/spool/attribution",  # reports waiting for the service
    "ATTRIBUTION_LOG": "/var/log/attribution/hooks.log",
    "ATTRIBUTION_LOOKBACK_BYTES": "16777216",  # how much of a log the shell checks when the prolog left no offset
    "ATTRIBUTION_FILTER": None,  # the generated fixed-string filter (default: suspicious.patterns beside the hooks)
    "ATTRIBUTION_TELEMETRY": "on",  # on | off: counter snapshots at prolog and epilog
    "ATTRIBUTION_GPU_TOOL": "nvidia-smi",  # nvidia-smi | none
    "ATTRIBUTION_NVIDIA_SMI": "/usr/bin/nvidia-smi",
    "ATTRIBUTION_SYSFS_ROOT": None,  # prefix of /sys (a test fakes a node's sysfs there)
    "ATTRIBUTION_SMI_TIMEOUT": "10",
    "ATTRIBUTION_IB_COUNTERS": None,  # the InfiniBand counter files the snapshots read (hooks/lib.sh's default)
    "ATTRIBUTION_TEXTFILE_DIR": "auto",  # node_exporter's textfile folder, or off
    "ATTRIBUTION_SCONTROL": "/usr/bin/scontrol",  # the controller's hook only
    "ATTRIBUTION_CONFIG": None,  # the controller's full configuration file (attribution, not this agent)
    "ATTRIBUTION_SERVICE_URL": None,  # where reports go: https://attribution.example:8080
    "ATTRIBUTION_SERVICE_TOKEN_FILE": None,  # the node's report token, mode 0600
    "ATTRIBUTION_SERVICE_CA_FILE": None,  # a CA bundle for the service's certificate (default: the system's)
    "ATTRIBUTION_SERVICE_TIMEOUT": "10",  # seconds per request
    "ATTRIBUTION_CLUSTER": None,  # the cluster's name when Slurm's environment has none (SLURM_CLUSTER_NAME)
    "ATTRIBUTION_LOOKBACK_SECONDS": "86400",  # the window when neither Slurm nor the prolog says when a job started
    "ATTRIBUTION_NODE_LOG_BYTES": "67108864",  # read of each log: from the job's start on, at most this much
    "ATTRIBUTION_KEPT_BYTES": "8388608",  # of the lines one report keeps of each log
    "SLURM_CONF": None,
}


class HookEnv:
    """The values read (`values`), where from, and why a file was refused (`problem`), for the hook's log."""

    __slots__ = ("values", "path", "problem")

    def __init__(self, values: dict[str, str], path: str | None, problem: str | None) -> None:
        self.values, self.path, self.problem = values, path, problem

    def get(self, key: str) -> str | None:
        return self.values.get(key, KEYS.get(key))


def parse(text: str, origin: str = "hook.env") -> tuple[dict[str, str], list[str]]:
    """`KEY=VALUE` lines to {key: value} and the problems (`origin:line: ...`) of the lines it skipped. Nothing
    is expanded: `$(...)`, `$VAR` and backquotes stay in the value as written."""
    values: dict[str, str] = {}
    problems: list[str] = []
    for no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, eq, value = line.partition("=")
        key = key.strip()
        if not eq or key not in KEYS:
            problems.append(f"{origin}:{no}: " + (f"unknown key {key!r}" if eq else "not KEY=VALUE"))
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if "\0" in value or "\n" in value:
            problems.append(f"{origin}:{no}: {key}: a value holds a NUL")
            continue
        values[key] = value
    return values, problems


def _owned_safely(st: os.stat_result, uid: int) -> str | None:
    if st.st_uid not in (0, uid):
        return f"owned by uid {st.st_uid}, not by root"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"  # as stat %a prints it
    return None


def read(path: str | None = None, uid: int | None = None) -> HookEnv:
    """hook.env's values, checked as the module doc says. A missing file gives no values and no problem."""
    path = path or os.environ.get("ATTRIBUTION_HOOK_ENV") or DEFAULT_PATH
    uid = os.geteuid() if uid is None else uid
    if not os.path.isabs(path):
        return HookEnv({}, path, f"{path}: not an absolute path")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return HookEnv({}, path, None)
    except OSError as exc:  # ELOOP: a link
        why = "a symbolic link" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        return HookEnv({}, path, f"{path}: {why}")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return HookEnv({}, path, f"{path}: not a regular file")
        why = _owned_safely(st, uid)
        if why:
            return HookEnv({}, path, f"{path} is {why}")
        folder = os.path.dirname(path)
        while True:
            try:
                fst = os.lstat(folder)
            except OSError as exc:
                return HookEnv({}, path, f"{folder}: {exc.strerror or exc}")
            if stat.S_ISLNK(fst.st_mode):
                return HookEnv({}, path, f"{folder} is a symbolic link")
            why = _owned_safely(fst, uid)
            if why:
                return HookEnv({}, path, f"{folder} is {why}")
            if folder == "/":
                break
            folder = os.path.dirname(folder)
        data = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        return HookEnv({}, path, f"{path}: larger than {MAX_BYTES} bytes")
    values, _skipped = parse(data.decode("utf-8", "replace"), path)  # unknown keys are ignored, as lib.sh does
    return HookEnv(values, path, None)


def settings(environ=None, path: str | None = None) -> HookEnv:
    """The node's settings: hook.env's values, under the environment's. Run by a hook, the environment holds what
    hooks/lib.sh read of hook.env (ATTRIBUTION_SETTINGS_FROM_HOOK): the file is read once, by the hook."""
    environ = os.environ if environ is None else environ
    if environ.get("ATTRIBUTION_SETTINGS_FROM_HOOK") == "1" and path is None:
        env = HookEnv({}, environ.get("ATTRIBUTION_HOOK_ENV"), None)
    else:
        env = read(path or environ.get("ATTRIBUTION_HOOK_ENV"))
    values = dict(env.values)
    for key in KEYS:
        if environ.get(key):
            values[key] = environ[key]
    return HookEnv(values, env.path, env.problem)
