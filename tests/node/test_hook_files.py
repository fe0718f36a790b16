"""What the hooks read and write beside the report: hook.env only when only root can change it (hooks/lib.sh
sources it as root), and node_exporter textfiles (the hooks' last run, the spool's depth) that promtool accepts."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.harness.hooknode import BIN, BUDGET, Node, Proxy, run_hook
from tests.harness.prometheus import PROMTOOL, PrometheusServer

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="hooks run as root: ownership checks need root")


def source_lib(hook_env: Path, log: Path) -> tuple[str, str]:
    """Source hooks/lib.sh with no environment but the hook.env path; (the budget it ends with, the log)."""
    r = subprocess.run(["/bin/bash", "-c", f". {ROOT / 'hooks' / 'lib.sh'}; printf %s \"$ATTRIBUTION_BUDGET\""],
                       env={"ATTRIBUTION_HOOK_ENV": str(hook_env), "ATTRIBUTION_LOG": str(log)},
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout, log.read_text() if log.exists() else ""


@pytest.fixture
def env_dir(tmp_path):
    d = tmp_path / "etc"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    f = d / "hook.env"
    f.write_text("ATTRIBUTION_BUDGET=7\nATTRIBUTION_LOG=/dev/null\n")
    f.chmod(0o644)
    return f


def test_a_hook_env_only_root_can_change_is_read(env_dir, tmp_path):
    budget, log = source_lib(env_dir, tmp_path / "hooks.log")
    assert budget == "7"
    assert log == ""


@pytest.mark.parametrize("change, why", [
    (lambda f: f.chmod(0o666), "hook.env is writable by group or others (mode 666)"),
    (lambda f: f.chmod(0o620), "hook.env is writable by group or others (mode 620)"),
    (lambda f: os.chown(f, 65534, -1), "hook.env is owned by uid 65534, not by root"),
    (lambda f: f.parent.chmod(0o777), "etc is writable by group or others (mode 777)"),
    (lambda f: os.chown(f.parent, 65534, -1), "etc is owned by uid 65534, not by root"),
])
def test_a_hook_env_someone_else_could_change_is_ignored_and_the_refusal_logged(env_dir, tmp_path, change, why):
    change(env_dir)
    budget, log = source_lib(env_dir, tmp_path / "hooks.log")
    assert budget == "20"  # the default: not one line of that file ran
    assert f"ignoring {env_dir}: " in log
    assert log.rstrip().endswith(why)


def test_a_hook_env_in_a_sticky_folder_or_behind_a_symlink_is_judged_where_it_lies(env_dir, tmp_path):
    env_dir.parent.chmod(0o1777)  # like /tmp: others cannot replace root's file there
    assert source_lib(env_dir, tmp_path / "a.log")[0] == "7"
    unsafe = tmp_path / "unsafe"
    unsafe.mkdir()
    unsafe.chmod(0o777)
    link = tmp_path / "link.env"
    link.symlink_to(env_dir)
    assert source_lib(link, tmp_path / "b.log")[0] == "7"
    target = unsafe / "hook.env"
    target.write_text("ATTRIBUTION_BUDGET=9\n")
    target.chmod(0o644)
    link2 = tmp_path / "etc" / "other.env"
    link2.symlink_to(target)
    budget, log = source_lib(link2, tmp_path / "c.log")
    assert budget == "20"
    assert f"{unsafe} is writable by group or others (mode 777)" in log


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


# promtool (the Prometheus server's binaries, installed by the harness) checks the file
@pytest.mark.prometheus
def test_a_clean_job_writes_the_hooks_textfile_without_starting_python(tmp_path, promtool):
    node = Node(tmp_path / "n", "postgresql+psycopg://127.0.0.1:1/none", "5001")
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
    assert not (textfiles / "attribution_spool.prom").exists()  # the agent never ran
    assert sorted(p.name for p in textfiles.iterdir()) == ["attribution_hook_epilog.prom"]  # no temporary left


# promtool (the Prometheus server's binaries, installed by the harness) checks the files
@pytest.mark.prometheus
def test_a_failed_job_with_the_database_away_shows_its_spooled_report(tmp_path, promtool):
    proxy = Proxy(("127.0.0.1", 5432))  # refuses: the database is away
    node = Node(tmp_path / "n", f"postgresql+psycopg://postgres@127.0.0.1:{proxy.port}/none", "5002")
    textfiles = tmp_path / "textfile_collector"
    textfiles.mkdir()
    _, r = run_hook(node, BUDGET, extra=f"ATTRIBUTION_TEXTFILE_DIR={textfiles}\n")
    assert r.returncode == 0
    assert len(node.spooled()) == 1
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
    r = subprocess.run([str(BIN), "spool", "flush", "--timeout", "10"],
                       env=node.env() | {"ATTRIBUTION_TEXTFILE_DIR": str(textfiles)},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert metrics(spool_prom)["attribution_spool_pending_files"] == 1


# the real hook and agent on a cold pack cache: over 10 s on two busy cores
@pytest.mark.slow
def test_textfile_off_writes_nothing(tmp_path):
    node = Node(tmp_path / "n", "postgresql+psycopg://127.0.0.1:1/none", "5003")
    textfiles = tmp_path / "textfile_collector"
    textfiles.mkdir()
    _, r = run_hook(node, BUDGET, extra="ATTRIBUTION_TEXTFILE_DIR=off\n")
    assert r.returncode == 0
    assert list(textfiles.iterdir()) == []
