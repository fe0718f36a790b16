"""attribution/drain/slurmrest.py: drains, resumes and node states through slurmrestd (JWT auth), against the real
slurmrestd 24.11 of the Debian 13 root (tests/harness/debroot.py), and on its recorded answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from attribution.cli import main
from attribution.config import ConnectorSettings, SlurmrestdSettings
from attribution.drain.slurmctl import Scontrol, SlurmError
from attribution.drain.slurmrest import Slurmrestd, controller, epoch_of, errors_of, from_settings, node_state
from attribution.errors import ConfigError

from tests.harness.receiver import failing, secret_file

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm24"
BIN = Path(sys.executable).parent / "attribution"
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def _recorded(name: str) -> dict:
    return json.loads((DATA / name).read_text())


# -- recorded answers of slurmrestd 24.11.5 ------------------------------------------------------------------


def test_recorded_node_list_gives_names_states_and_reasons():
    nodes = {n["name"]: node_state(n) for n in _recorded("restd-nodes-drained.json")["nodes"]}
    assert set(nodes) == {"node1", "node2"}
    assert nodes["node1"].state == "IDLE" and nodes["node1"].reason is None
    assert nodes["node2"].state == "IDLE+DRAIN" and nodes["node2"].reason == "attribution: test"


def test_recorded_node_list_gives_who_set_the_reason_and_when_and_the_boot_times():
    """The node's life from slurmrestd (#31): v0.0.42 gives times as {"set", "infinite", "number"} epochs."""
    doc = {n["name"]: n for n in _recorded("restd-nodes-drained.json")["nodes"]}
    n2 = node_state(doc["node2"])
    assert n2.reason_user == "root"
    assert n2.reason_at == datetime.fromtimestamp(doc["node2"]["reason_changed_at"]["number"], timezone.utc)
    assert n2.boot_time == datetime.fromtimestamp(doc["node2"]["boot_time"]["number"], timezone.utc)
    assert n2.slurmd_start == datetime.fromtimestamp(doc["node2"]["slurmd_start_time"]["number"], timezone.utc)
    assert node_state(doc["node1"]).reason_user is None and node_state(doc["node1"]).reason_at is None
    assert epoch_of({"set": False, "infinite": False, "number": 0}) is None and epoch_of(1796116151) == \
        datetime.fromtimestamp(1796116151, timezone.utc) and epoch_of({"set": True, "infinite": True}) is None


def test_recorded_errors_are_read_as_text():
    assert errors_of(_recorded("restd-nodes-drained.json")) == []
    assert errors_of(_recorded("restd-node-unknown.json")) == [
        "Failure to update node node9 (Invalid node name specified)"]
    assert errors_of(_recorded("restd-bad-token.json")) == ["Failure to query nodes (Protocol authentication error)"]


def test_controller_is_scontrol_unless_slurmrestd_is_configured(tmp_path):
    assert isinstance(controller(ConnectorSettings(), "/opt/slurm/bin/scontrol"), Scontrol)
    token = tmp_path / "jwt"
    token.write_text("eyJx\n")
    token.chmod(0o600)
    c = controller(ConnectorSettings(slurmrestd=SlurmrestdSettings(url="http://ctl:6820", token_file=str(token))))
    assert isinstance(c, Slurmrestd) and c.token == "eyJx" and c.url == "http://ctl:6820"
    token.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by others"):
        from_settings(SlurmrestdSettings(url="http://ctl:6820", token_file=str(token)))
    with pytest.raises(ConfigError, match="token_file"):
        from_settings(SlurmrestdSettings(url="http://ctl:6820"))


def test_the_slurmrestd_settings_are_checked():
    from attribution.config import parse_connectors

    ok = parse_connectors({"slurmrestd": {"url": "https://ctl:6820", "user": "attribution", "token_file": "/x",
                                          "api_version": "v0.0.41", "timeout": 5}}, "c.yaml")
    assert ok.slurmrestd.api_version == "v0.0.41" and ok.slurmrestd.user == "attribution"
    with pytest.raises(ConfigError, match="c.yaml: connectors.slurmrestd.api_version: expected e.g. v0.0.42"):
        parse_connectors({"slurmrestd": {"url": "http://ctl", "api_version": "0.0.42"}}, "c.yaml")
    with pytest.raises(ConfigError, match="unknown setting.*password"):
        parse_connectors({"slurmrestd": {"url": "http://ctl", "password": "x"}}, "c.yaml")
    with pytest.raises(ConfigError, match="timeout must be a positive"):
        parse_connectors({"slurmrestd": {"url": "http://ctl", "timeout": 0}}, "c.yaml")


def test_node_names_are_checked_before_any_request():
    c = Slurmrestd("http://127.0.0.1:9", "root", "t", api_version="v0.0.42")
    with pytest.raises(SlurmError, match="refusing node name"):
        c.drain("n1/../x", "r")


@pytest.mark.parametrize("how", ["refused", "500", "timeout"])
def test_the_token_is_in_no_error_nor_the_commands_output(how, tmp_path):
    """slurmrestd refusing the connection, answering 500 with the request echoed (its X-SLURM-USER-TOKEN too), or
    never answering: the error says which, `drain sync-nodes` exits with one line, and the JWT read from
    token_file is in none of them, nor in the client's repr."""
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJzbHVybSJ9.c2VjcmV0LXNpZ25hdHVyZS0xMjM0NTY3ODkw"
    token_file = secret_file(tmp_path, "jwt", jwt)
    expect = {"refused": "ConnectError", "500": "GET /nodes: 500: ", "timeout": "ReadTimeout"}[how]
    with failing(how, ["/slurm/v0.0.42/nodes"]) as (url, receiver):
        client = from_settings(SlurmrestdSettings(url=url, user="slurm", token_file=token_file, timeout=0.5))
        with pytest.raises(SlurmError) as exc:
            client.nodes()
        said = str(exc.value) + repr(exc.value) + "".join(traceback.format_exception(exc.value)) + repr(client)
        assert expect in str(exc.value), said
        if how == "500":
            assert receiver.hits["/slurm/v0.0.42/nodes"] == 1 and "[secret]" in str(exc.value)
        config = tmp_path / "config.yaml"
        config.write_text(json.dumps({"connectors": {"slurmrestd": {
            "url": url, "user": "slurm", "token_file": token_file, "timeout": 0.5}}}))
        r = CliRunner().invoke(main, ["--config", str(config), "drain", "sync-nodes", "--cluster", "c"])
    assert r.exit_code != 0 and expect in r.stderr and r.stdout == "", r.output
    for text in (said, r.stdout + r.stderr + repr(r.exception)):
        assert jwt not in text and jwt.split(".")[2][:20] not in text, text


# -- the real slurmrestd -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def restd(tmp_path_factory, slurm24_root):
    from tests.harness.debroot import python_binds
    from tests.harness.slurm_versions import ROOT_VERSION, SlurmVersion
    from tests.conftest import ROOT

    root, manifest = slurm24_root
    v = SlurmVersion(ROOT_VERSION, root=root, binds=[ROOT, *python_binds()], manifest=manifest)
    base = tmp_path_factory.mktemp("restd")
    base.chmod(0o755)
    # its own ports: the hooks' 24.11 cluster may be alive at the same time
    c = v.cluster(base / "slurm", with_restd=True, with_accounting=True, slurmctld_port=16837,
                  slurmdbd_port=16838, node_ports=(17021, 17022), mysql_port=13336, restd_port=16840)
    c.start()
    # an administrator that is not root: slurmrestd's callers should not hold root tokens
    r = c.run(["sacctmgr", "-i", "add", "user", "slurm", "account=root", "adminlevel=Admin"])
    assert r.returncode == 0, r.stdout + r.stderr
    token = base / "jwt"
    token.write_text(c.token("slurm") + "\n")
    token.chmod(0o600)
    c.token_file = token
    try:
        yield c
    finally:
        c.stop()


@pytest.mark.slurm
@pytest.mark.slurm24
def test_drain_read_back_and_resume_through_slurmrestd(restd):
    c = Slurmrestd(restd.restd_url, "slurm", restd.token_file.read_text().strip())
    assert c.version() == "v0.0.42"
    assert c.cluster_name() == "attrtest"
    assert {n: s.state for n, s in c.nodes().items()} == {"node1": "IDLE", "node2": "IDLE"}
    c.drain("node2", "attribution: xid79 gpu 0000:3b:00 job 7")
    n2 = c.node("node2")
    assert n2.state == "IDLE+DRAIN" and n2.reason == "attribution: xid79 gpu 0000:3b:00 job 7"
    assert restd.drained_nodes() == ["node2"]  # what sinfo of the same Slurm says
    info = restd.run(["scontrol", "show", "node", "-o", "node2"]).stdout
    assert "Reason=attribution: xid79 gpu 0000:3b:00 job 7" in info
    c.resume("node2")
    deadline = time.monotonic() + 20
    while c.nodes()["node2"].state != "IDLE" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert c.nodes()["node2"].state == "IDLE" and restd.drained_nodes() == []


@pytest.mark.slurm
@pytest.mark.slurm24
def test_a_bad_token_or_an_unknown_node_is_a_clear_error(restd):
    with pytest.raises(SlurmError, match=r"refused \((401|511)"):
        Slurmrestd(restd.restd_url, "slurm", "not-a-jwt").nodes()
    other = restd.token("nobody")  # a real token of a user Slurm does not know as an administrator
    with pytest.raises(SlurmError, match="node1"):
        Slurmrestd(restd.restd_url, "nobody", other).drain("node1", "attribution: test")
    c = Slurmrestd(restd.restd_url, "slurm", restd.token_file.read_text().strip())
    with pytest.raises(SlurmError, match="node9"):
        c.drain("node9", "attribution: test")
    with pytest.raises(SlurmError, match="ConnectError"):
        Slurmrestd("http://127.0.0.1:9", "root", "x").nodes()


@pytest.mark.slurm
@pytest.mark.slurm24
def test_drain_apply_and_resume_through_slurmrestd_with_no_scontrol(restd, pg_url, ruleset, tmp_path):
    """A central host with no Slurm client: `attribution drain` configured with connectors.slurmrestd."""
    from sqlalchemy import create_engine, text

    from attribution.pipeline.ingest import ingest
    from attribution.pipeline.rulecheck import events_for_line
    from attribution.scope.bundle import parse_context

    now = datetime.now(timezone.utc).replace(microsecond=0)
    ctx = parse_context(f"cluster: attrtest\njob_id: '9002'\nnodes: node[1-2]\nstate: FAILED\nuser: bob\n"
                        f"start: {(now - timedelta(hours=1)).isoformat()}\nend: {now.isoformat()}\n")
    proto = events_for_line(ruleset, "kernel", XID79)[0]
    ev = type(proto)(**{**{k: getattr(proto, k) for k in proto.__slots__}, "node": "node1",
                        "time": now - timedelta(minutes=5), "location": "kernel.log:3"})
    engine = create_engine(pg_url)
    try:
        ingest(ruleset, engine, ctx, [ev], [], "bundle")
    finally:
        engine.dispose()
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"database:\n  url: {pg_url}\nconnectors:\n  slurmrestd:\n    url: {restd.restd_url}\n"
                   f"    user: slurm\n    token_file: {restd.token_file}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(ATTRIBUTION_CONFIG=str(cfg), ATTRIBUTION_HOME=str(tmp_path / "home"))

    def cli(*args):
        return subprocess.run([str(BIN), *args, "--scontrol", "/nonexistent/scontrol"], env=env,
                              capture_output=True, text=True, timeout=120)

    r = cli("drain", "apply")
    assert r.returncode == 0, r.stderr
    assert "applied     attrtest/node1" in r.stdout
    assert restd.drained_nodes() == ["node1"]
    assert "Reason=attribution: xid79 gpu 0000:3b:00 job 9002" in restd.run(
        ["scontrol", "show", "node", "-o", "node1"]).stdout
    again = cli("drain", "apply")
    assert "skipped     attrtest/node1" in again.stdout and "already IDLE+DRAIN" in again.stdout
    # apply recorded Slurm's view through slurmrestd (#31): each node's boot, our drain as Slurm saw it
    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            life = conn.execute(text("SELECT node, what, at, actor, detail FROM attribution.node_life "
                                     "WHERE cluster = 'attrtest' AND source = 'slurm' ORDER BY node, what")).all()
    finally:
        engine.dispose()
    btime = next(datetime.fromtimestamp(int(ln.split()[1]), timezone.utc)
                 for ln in Path("/proc/stat").read_text().splitlines() if ln.startswith("btime "))
    assert [(r.node, r.what) for r in life] == [("node1", "boot"), ("node1", "drain"), ("node2", "boot")]
    assert all(abs(r.at - btime) <= timedelta(seconds=2) for r in life if r.what == "boot")
    drain = life[1]
    assert drain.actor == "slurm" and "attribution: xid79 gpu 0000:3b:00 job 9002" in drain.detail
    assert abs(drain.at - datetime.now(timezone.utc)) < timedelta(minutes=5)
    back = cli("drain", "resume", "node1")
    assert back.returncode == 0, back.stderr
    deadline = time.monotonic() + 20
    while restd.drained_nodes() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert restd.drained_nodes() == []
