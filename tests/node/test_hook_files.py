"""What the hooks read and write beside the report: hook.env read as data (never run), opened without following a
link and checked on the open file and every folder above it, by hooks/lib.sh and node/hookenv.py alike; and
node_exporter textfiles (the hooks' last run, the spool's depth) that promtool accepts."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from attribution.node import hookenv
from tests.harness.hooknode import BUDGET, NODE_BIN, Node, drop_safe_dir, run_hook, safe_dir
from tests.harness.prometheus import PROMTOOL, PrometheusServer

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="hooks run as root: ownership checks need root")

KEYS = ("ATTRIBUTION_BUDGET", "ATTRIBUTION_CLUSTER", "ATTRIBUTION_KERNEL_FILE", "ATTRIBUTION_SERVICE_URL")


def source_lib(hook_env: Path, log: Path) -> tuple[dict[str, str], str]:
    """Source hooks/lib.sh with no environment but the hook.env path: (the values it ends with, its log)."""
    show = "; ".join(f'printf "%s=%s\\n" {k} "${k}"' for k in KEYS)
    r = subprocess.run(["/bin/bash", "-c", f". {ROOT / 'hooks' / 'lib.sh'}; "
                        f'[ -n "$ATTRIBUTION_ENV_REFUSED" ] && attribution_log "ignoring $ATTRIBUTION_HOOK_ENV: '
                        f'$ATTRIBUTION_ENV_REFUSED"; {show}'],
                       env={"ATTRIBUTION_HOOK_ENV": str(hook_env), "ATTRIBUTION_LOG": str(log)},
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    values = dict(line.split("=", 1) for line in r.stdout.splitlines())
    return values, log.read_text() if log.exists() else ""


def python_reads(hook_env: Path) -> tuple[dict[str, str], str | None]:
    env = hookenv.read(str(hook_env))
    return {k: env.values.get(k, "") for k in KEYS}, env.problem


@pytest.fixture
def etc():
    d = safe_dir()
    yield d
    drop_safe_dir(d)


@pytest.fixture
def env_file(etc):
    f = etc / "hook.env"
    f.write_text("ATTRIBUTION_BUDGET=7\nATTRIBUTION_LOG=/dev/null\n")
    f.chmod(0o644)
    return f


def test_a_hook_env_only_root_can_change_is_read_by_both_readers(env_file, tmp_path):
    values, log = source_lib(env_file, tmp_path / "hooks.log")
    assert values["ATTRIBUTION_BUDGET"] == "7" and log == ""
    assert python_reads(env_file) == ({**dict.fromkeys(KEYS, ""), "ATTRIBUTION_BUDGET": "7"}, None)


HOSTILE = """# values are data
ATTRIBUTION_BUDGET=7
ATTRIBUTION_CLUSTER=$(touch {marker})
ATTRIBUTION_KERNEL_FILE=`touch {marker}`
ATTRIBUTION_SERVICE_URL='https://svc:8443/a?b=1&c=$HOME'
ATTRIBUTION_LOG=/dev/null
touch {marker}
$(touch {marker})=1
NOT_A_KEY=$(touch {marker})
"""


def test_shell_in_hook_env_is_never_run_and_stays_literal(env_file, tmp_path):
    marker = tmp_path / "ran"
    env_file.write_text(HOSTILE.format(marker=marker))
    values, _ = source_lib(env_file, tmp_path / "hooks.log")
    want = {"ATTRIBUTION_BUDGET": "7", "ATTRIBUTION_CLUSTER": f"$(touch {marker})",
            "ATTRIBUTION_KERNEL_FILE": f"`touch {marker}`",
            "ATTRIBUTION_SERVICE_URL": "https://svc:8443/a?b=1&c=$HOME"}
    assert values == want
    assert python_reads(env_file) == (want, None)
    assert not marker.exists()


@pytest.mark.parametrize("change, why", [
    (lambda f: f.chmod(0o666), "hook.env is writable by group or others (mode 666)"),
    (lambda f: f.chmod(0o620), "hook.env is writable by group or others (mode 620)"),
    (lambda f: os.chown(f, 65534, -1), "hook.env is owned by uid 65534, not by root"),
    (lambda f: f.parent.chmod(0o775), "is writable by group or others (mode 775)"),
    (lambda f: f.parent.chmod(0o1777), "is writable by group or others (mode 1777)"),
    (lambda f: os.chown(f.parent, 65534, -1), "is owned by uid 65534, not by root"),
])
def test_a_hook_env_someone_else_could_change_is_ignored_whole_and_the_refusal_logged(env_file, tmp_path, change,
                                                                                       why):
    change(env_file)
    values, log = source_lib(env_file, tmp_path / "hooks.log")
    assert values["ATTRIBUTION_BUDGET"] == "20"  # the default: not one line of that file was used
    assert f"ignoring {env_file}: " in log and log.rstrip().endswith(why)
    got, problem = python_reads(env_file)
    assert got["ATTRIBUTION_BUDGET"] == "" and problem is not None and problem.endswith(why)


def test_a_hook_env_under_tmp_or_reached_through_a_link_is_refused(env_file, tmp_path):
    in_tmp = tmp_path / "hook.env"  # /tmp is writable by others
    in_tmp.write_text(env_file.read_text())
    in_tmp.chmod(0o644)
    for path, why in ((in_tmp, "is writable by group or others (mode 1777)"),):
        values, log = source_lib(path, tmp_path / "a.log")
        assert values["ATTRIBUTION_BUDGET"] == "20" and log.rstrip().endswith(why)
        assert python_reads(path)[1].endswith(why)
    link = env_file.parent / "link.env"
    link.symlink_to(env_file)  # a link to root's own good file: still a link
    values, log = source_lib(link, tmp_path / "b.log")
    assert values["ATTRIBUTION_BUDGET"] == "20" and "is a symbolic link" in log
    assert "symbolic link" in python_reads(link)[1]
    linked_dir = env_file.parent.parent / (env_file.parent.name + "-link")
    linked_dir.symlink_to(env_file.parent)
    try:
        values, log = source_lib(linked_dir / "hook.env", tmp_path / "c.log")
        assert values["ATTRIBUTION_BUDGET"] == "20" and "symbolic link" in log
        assert "symbolic link" in python_reads(linked_dir / "hook.env")[1]
    finally:
        linked_dir.unlink()


def test_a_link_flipped_during_the_hook_never_gets_a_users_file_read(etc, tmp_path):
    """The attack: an unprivileged user flips a path between root's valid hook.env and a link to a root-owned
    file whose text the user influenced. Whatever moment the flip hits, the reader takes root's file or nothing."""
    good = etc / "good.env"
    good.write_text("ATTRIBUTION_BUDGET=7\n")
    bad = etc / "bad.env"  # root-owned 0644, text the user made: read only through a link, so never
    bad.write_text(f"ATTRIBUTION_BUDGET=99\nATTRIBUTION_CLUSTER=$(touch {tmp_path / 'ran'})\n")
    for f in (good, bad):
        f.chmod(0o644)
    path = etc / "hook.env"
    stop = threading.Event()

    def flip():
        while not stop.is_set():
            for target in (good, bad):
                tmp = etc / "flip.tmp"
                if target is good:
                    os.link(good, tmp)
                else:
                    tmp.symlink_to(bad)
                os.replace(tmp, path)

    t = threading.Thread(target=flip, daemon=True)
    t.start()
    seen = set()
    try:
        for _ in range(60):
            values, _ = source_lib(path, tmp_path / "hooks.log")
            seen.add(values["ATTRIBUTION_BUDGET"])
            seen.add(python_reads(path)[0]["ATTRIBUTION_BUDGET"] or "20")
    finally:
        stop.set()
        t.join()
    assert "99" not in seen and seen <= {"7", "20"}
    assert not (tmp_path / "ran").exists()


@pytest.fixture(scope="module")
def promtool(tmp_path_factory):
    PrometheusServer(tmp_path_factory.mktemp("prom")).install()
    return PROMTOOL


def metrics(path: Path) -> dict[str, float]:
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def check(promtool: str, path: Path) -> None:
    r = subprocess.run([promtool, "check", "metrics"], input=path.read_bytes(), capture_output=True, timeout=60)
    assert r.returncode == 0, (r.stdout + r.stderr).decode()
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)  # node_exporter reads it as another user


def _away() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def away_node(tmp_path):
    n = Node(tmp_path / "n", _away(), "t" * 32, "5002")
    yield n
    n.close()


# promtool (the Prometheus server's binaries, installed by the harness) checks the file
@pytest.mark.prometheus
def test_a_clean_job_writes_the_hooks_textfile_without_starting_python(away_node, tmp_path, promtool):
    node = away_node
    node.kernel.write_text("usb 1-1: new high-speed USB device number 2\n")
    textfiles = tmp_path / "textfile_collector"
    textfiles.mkdir()
    env = {k: v for k, v in node.env().items() if k.startswith("SLURM")} | {"SLURM_JOB_EXIT_CODE": "0"}
    _, r = run_hook(node, BUDGET, env=env, extra=f"ATTRIBUTION_TEXTFILE_DIR={textfiles}\n")
    assert r.returncode == 0
    prom = textfiles / "attribution_hook_epilog.prom"
    check(promtool, prom)
    m = metrics(prom)
    assert m['attribution_hook_last_attributed{hook="epilog"}'] == 0
    assert m['attribution_hook_last_status{hook="epilog"}'] == 0
    assert 0 < m['attribution_hook_last_duration_seconds{hook="epilog"}'] < BUDGET
    assert not (textfiles / "attribution_spool.prom").exists()  # the collector never ran
    assert sorted(p.name for p in textfiles.iterdir()) == ["attribution_hook_epilog.prom"]  # no temporary left


# promtool (the Prometheus server's binaries, installed by the harness) checks the files
@pytest.mark.prometheus
def test_a_failed_job_with_the_service_away_shows_its_spooled_report(away_node, tmp_path, promtool):
    node = away_node
    textfiles = tmp_path / "textfile_collector"
    textfiles.mkdir()
    _, r = run_hook(node, BUDGET, extra=f"ATTRIBUTION_TEXTFILE_DIR={textfiles}\n")
    assert r.returncode == 0
    assert len(node.spooled()) == 1, (node.base / "hooks.log").read_text()
    hook = textfiles / "attribution_hook_epilog.prom"
    spool_prom = textfiles / "attribution_spool.prom"
    for p in (hook, spool_prom):
        check(promtool, p)
    assert metrics(hook)['attribution_hook_last_attributed{hook="epilog"}'] == 1
    assert metrics(hook)['attribution_hook_last_status{hook="epilog"}'] == 0  # spooled is a success
    m = metrics(spool_prom)
    assert m["attribution_spool_pending_files"] == 1
    assert m["attribution_spool_pending_bytes"] == node.spooled()[0].stat().st_size
    assert m["attribution_spool_bad_files"] == 0
    # the flush (the systemd timer) rewrites it: still away, so still one pending
    node.write_hook_env(extra=f"ATTRIBUTION_TEXTFILE_DIR={textfiles}\n")
    r = subprocess.run([str(NODE_BIN), "spool", "flush", "--timeout", "10"], env=node.env(), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert metrics(spool_prom)["attribution_spool_pending_files"] == 1


def test_textfile_off_writes_nothing(away_node, tmp_path):
    textfiles = tmp_path / "textfile_collector"
    textfiles.mkdir()
    _, r = run_hook(away_node, BUDGET, extra="ATTRIBUTION_TEXTFILE_DIR=off\n")
    assert r.returncode == 0
    assert list(textfiles.iterdir()) == []
