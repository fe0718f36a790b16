"""Injection: log lines and names carrying SQL, shell metacharacters, ANSI escapes and absurd node names are stored
verbatim (as the text decoder documents: control characters other than tab become spaces, invalid UTF-8 becomes
U+FFFD) and never executed; every YAML the tool reads is loaded safely (no tag can construct a Python object).
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import text

from attribution.node import spool
from attribution.collect.joboutput import parse_job_output
from attribution.collect.textio import decode
from attribution.errors import InputError
from attribution.model import ExecutionContext
from attribution.pipeline.diagnose import diagnose_observations
from attribution.pipeline.ingest import ingest, ingest_bundle
from attribution.scope.bundle import parse_context

from tests.conftest import ROOT
from tests.harness.hooknode import Node, run_hook
from tests.harness.service import service_on_new_database

UTC = timezone.utc


@pytest.fixture
def marker(tmp_path):
    """A file that exists only if some payload was executed by a shell, SQL or YAML."""
    m = Path(f"/tmp/attribution-injected-{uuid.uuid4().hex}")
    yield m
    assert not m.exists(), f"a payload was executed: {m} exists"
    m.unlink(missing_ok=True)


def payloads(marker: Path) -> dict[str, str]:
    return {
        "sql": "'); DROP TABLE attribution.jobs; -- \" ; DELETE FROM attribution.verdicts WHERE ''=''",
        "shell": f"$(touch {marker}) `touch {marker}`; touch {marker} | sh && reboot || halt & $HOME ${{IFS}}",
        "ansi": "\x1b[31mRED\x1b[0m \x1b]0;title\x07 \x1b[2J\x1b[H clear\x08\x08 bell\x07 cr\r! tab\tend",
        "format": "%s%n%x {0} {{}} \\x00 \\n %(password)s ${jndi:ldap://x/a}",
        "unicode": "\u202eevil\u202c \u200dzwj \ufeffbom 😀 节点 é \u0085nel \u2028ls",
    }


NODES = ["n1", "nœud-é-节点-😀", "n'1\"q`x`", "a;b|c$(id)&d", "x" * 200 + "-long"]
#: A cluster name has no space (attribution/names.py): its SQL payload is written without; the partition's has.
CLUSTER = "c';DROP(TABLE)attribution.jobs;--"
PARTITION = "p'; DROP TABLE attribution.jobs; --"
CONTEXT = """cluster: "c';DROP(TABLE)attribution.jobs;--"
job_id: '1; touch {marker}'
user: "$(touch {marker})"
partition: "p'; DROP TABLE attribution.jobs; --"
nodes: {nodes}
tasks_per_node: 1
state: FAILED
exit_code: '1:0'
start: 2026-11-30T08:00:00Z
end: 2026-11-30T09:00:00Z
"""


def _write_bundle(base: Path, marker: Path) -> tuple[Path, dict[str, str]]:
    import json

    b = base / "bundle"
    (b / "job").mkdir(parents=True)
    (b / "context.yaml").write_text(CONTEXT.format(marker=marker, nodes=json.dumps(NODES, ensure_ascii=False)))
    lines = {}
    for i, (name, p) in enumerate(payloads(marker).items()):
        lines[f"kernel-{name}"] = (f"[Mon Nov 30 08:{10 + i:02d}:00 2026] NVRM: Xid (PCI:0000:3b:00): "
                                   f"{79 if i == 0 else 13}, pid={i}, name={p}, GPU fault")
        lines[f"job-{name}"] = f"[rank{i}]: RuntimeError: CUDA error: an illegal memory access was encountered {p}"
    for n in NODES:
        (b / "nodes" / n).mkdir(parents=True)
        (b / "nodes" / n / "kernel.log").write_bytes(
            "\n".join(v for k, v in lines.items() if k.startswith("kernel-")).encode() + b"\n")
    (b / "job" / "slurm-1.out").write_bytes(
        "\n".join(v for k, v in lines.items() if k.startswith("job-")).encode() + b"\n")
    return b, lines


def test_hostile_lines_and_names_are_stored_verbatim_and_never_executed(ruleset, store, tmp_path, marker):
    bundle, lines = _write_bundle(tmp_path, marker)
    result, verdict = ingest_bundle(ruleset, store, bundle)
    assert verdict.outcome == "gpu_hardware"
    with store.connect() as c:
        stored_lines = set(c.execute(text("SELECT line FROM attribution.events")).scalars())
        nodes = set(c.execute(text("SELECT node FROM attribution.events")).scalars())
        job = c.execute(text("SELECT cluster, job_id, user_name, nodes, partition FROM attribution.jobs")).one()
        tables = c.execute(text("SELECT count(*) FROM pg_tables WHERE schemaname = 'attribution' "
                                "AND tablename IN ('jobs', 'verdicts')")).scalar()
    assert tables == 2
    assert job == (CLUSTER, f"1; touch {marker}", f"$(touch {marker})", NODES, PARTITION)
    checked = 0
    for key, line in lines.items():
        # the documented decoder: what Python calls non-printable (C0/C1 controls, ESC, BEL, bidi and zero-width
        # format characters, line/paragraph separators) becomes a space, tab stays; everything else is kept as is
        want = "".join(ch if ch.isprintable() or ch == "\t" else " " for ch in line)
        assert decode(line.encode()) == want
        if not any(k in key for k in ("ansi", "unicode")):
            assert want == line  # SQL, shell and format payloads: byte for byte
        assert want in stored_lines, (key, want)
        checked += 1
    assert set(NODES) <= nodes, set(NODES) - nodes  # every node name, byte for byte
    print(f"\ninjection: {checked} hostile lines and {len(NODES)} absurd node names stored as decoded, "
          f"none executed")


@pytest.mark.parametrize("field, value", [("nodes", '["n1", "rack/n5"]'), ("cluster", '"c x"'),
                                          ("failed_node", '"n1\\u200bx"')])
def test_a_name_no_machine_has_is_refused_naming_its_field_and_nothing_is_stored(ruleset, store, tmp_path, field,
                                                                                   value):
    """attribution/names.py: a node is a bundle's folder (no `/`), no name holds whitespace or an invisible
    character; the context is refused whole (the command line's exit 2), not stored under a mangled name."""
    from attribution.errors import InputError

    b = tmp_path / "bundle"
    (b / "nodes" / "n1").mkdir(parents=True)
    fields = {"cluster": '"c1"', "job_id": "'7'", "nodes": '["n1"]', "state": "FAILED",
              "start": "2026-11-30T08:00:00Z", "end": "2026-11-30T09:00:00Z", field: value}
    (b / "context.yaml").write_text("".join(f"{k}: {v}\n" for k, v in fields.items()))
    with pytest.raises(InputError, match=field):
        ingest_bundle(ruleset, store, b)
    with store.connect() as c:
        assert c.execute(text("SELECT count(*) FROM attribution.jobs")).scalar() == 0


def test_the_decoder_keeps_printable_text_byte_for_byte_and_blanks_control_characters():
    raw = "NVRM: Xid ' \" ; | & $ ` \\ % { } é 节 😀 \t tab".encode()
    assert decode(raw) == raw.decode()
    assert decode(b"a\x1b[31mb\x07c\x00d\x7fe") == "a [31mb c d e"
    assert decode(b"bad \xff\xfe utf8") == "bad \ufffd\ufffd utf8"


@pytest.fixture(scope="module")
def node_service(pg_server, pg_template, tmp_path_factory):
    with service_on_new_database(pg_server, pg_template, tmp_path_factory.mktemp("inj-service"), "inj") as both:
        yield both


@pytest.mark.slow
def test_the_hooks_send_hostile_lines_verbatim_and_run_nothing(node_service, tmp_path, marker):
    """hooks/epilog (bash) and the node collector with a kernel log of hostile lines: stored as decoded."""
    from sqlalchemy import create_engine

    svc, url = node_service
    node = Node(tmp_path / "n1", svc.url, svc.tokens["report"], "9401")
    try:
        stamp = datetime.now(UTC).strftime("%a %b %e %H:%M:%S %Y")
        hostile = [f"[{stamp}] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name={p}, GPU has fallen off the bus."
                   for p in payloads(marker).values()]
        node.kernel.write_bytes(("\n".join(hostile) + "\n").encode())
        _, r = run_hook(node, 20)
        log = (node.base / "hooks.log").read_text()
        assert r.returncode == 0 and "stored" in log, log
    finally:
        node.close()
    engine = create_engine(url)
    try:
        with engine.connect() as c:
            rows = c.execute(text("SELECT e.node, e.line FROM attribution.events e JOIN attribution.event_jobs ej "
                                  "ON ej.event_id = e.id JOIN attribution.jobs j ON j.id = ej.job_ref "
                                  "WHERE j.job_id = '9401'")).all()
    finally:
        engine.dispose()
    assert {n for n, _ in rows} == {"n1"}
    assert {decode(h.encode()) for h in hostile} <= {line for _, line in rows}


@pytest.mark.slow
def test_a_node_name_no_system_has_is_refused_and_runs_nothing(node_service, tmp_path, marker):
    """A node name full of shell metacharacters (SLURMD_NODENAME is Slurm's, but the environment is not to be
    trusted blindly): the hook runs nothing, the service refuses the report with its reason (names are checked at
    every intake) and the node sets it aside instead of sending it for ever."""
    svc, _ = node_service
    node_name = "n'1\";touch${IFS}" + str(marker) + ";$(touch " + str(marker) + ")`touch " + str(marker) + "`"
    node = Node(tmp_path / "n2", svc.url, svc.tokens["report"], "9402")
    try:
        env = {k: v for k, v in node.env().items() if k.startswith("SLURM")}
        env.update(SLURMD_NODENAME=node_name, SLURM_NODELIST=node_name)
        _, r = run_hook(node, 20, env=env)
        log = (node.base / "hooks.log").read_text()
        assert r.returncode == 0 and "HTTP 422" in log and "is not a node or cluster name" in log, log
        assert node.spooled() == [] and len(list((node.spool_dir / "bad").glob("*.spool"))) == 1
    finally:
        node.close()


# -- YAML: safe loading everywhere -----------------------------------------------------------------------------

TAGS = [
    "!!python/object/apply:os.system ['touch {m}']",
    "!!python/object/new:subprocess.Popen [['touch', '{m}']]",
    "!!python/name:os.system",
    "!!python/module:os",
]


def _cli(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attribution.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=env)


@pytest.mark.parametrize("tag", TAGS)
def test_a_context_yaml_with_a_python_tag_is_refused(tmp_path, marker, tag):
    b = tmp_path / "b"
    b.mkdir()
    (b / "context.yaml").write_text("cluster: c\njob_id: 1\nnodes: n1\nuser: " + tag.format(m=marker) + "\n")
    with pytest.raises(InputError, match="could not determine a constructor for the tag"):
        parse_context((b / "context.yaml").read_text(), "context.yaml")
    if tag == TAGS[0]:
        r = _cli("diagnose", str(b))
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert r.stderr.startswith(f"attribution: {b / 'context.yaml'}:4: malformed YAML: could not determine a "
                                   "constructor for the tag 'tag:yaml.org,2002:python/object/apply:os.system'")


def test_a_rule_file_with_a_python_tag_is_refused(tmp_path, marker):
    pack = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", pack)
    (pack / "zz-evil.yaml").write_text(
        "type: rules\nrules:\n  - id: kernel.evil\n    source: kernel\n    kind: gpu_fallen_off_bus\n"
        f"    pattern: !!python/object/apply:os.system ['touch {marker}']\n"
        "    examples: {match: [{line: x}], no_match: [y]}\n")
    r = _cli("rules", "check", str(pack))
    assert r.returncode in (1, 2) and "Traceback" not in r.stderr
    assert f"{pack / 'zz-evil.yaml'}:6: malformed YAML: could not determine a constructor" in r.stdout + r.stderr


@pytest.mark.slow
def test_a_config_file_with_a_python_tag_is_refused(tmp_path, marker):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"database:\n  url: !!python/object/apply:os.system ['touch {marker}']\n")
    r = _cli("--config", str(cfg), "db", "status")
    assert r.returncode == 2 and r.stderr.strip() == (
        f"attribution: {cfg}:2: malformed YAML: could not determine a constructor for the tag "
        "'tag:yaml.org,2002:python/object/apply:os.system'")


def test_a_yaml_bomb_in_context_yaml_costs_bounded_time():
    levels = ["a: &a ['lol', 'lol', 'lol', 'lol', 'lol', 'lol', 'lol', 'lol', 'lol']"]
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        levels.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    doc = "\n".join(levels) + "\ncluster: c\njob_id: 1\nnodes: *i\n"
    t0 = time.perf_counter()
    with pytest.raises(InputError):
        parse_context(doc)
    assert time.perf_counter() - t0 < 5


# -- absurd values: reported bugs, kept as strict expected failures -----------------------------------------------


def _absurd_rank_events(ruleset):
    start = datetime(2026, 11, 30, 8, tzinfo=UTC)
    ctx = ExecutionContext(cluster="c", job_id="R1", nodes=("n1",), start=start, end=start + timedelta(hours=1),
                           state="FAILED", tasks_per_node=8)
    line = b"[rank99999999999]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
    obs, _ = parse_job_output(io.BytesIO(line), "job/x.out", ctx, ruleset.prefilter("job"))
    d = diagnose_observations(ruleset, ctx, obs, [])
    return ctx, list(d.events), list(d.coverage)


def test_a_job_line_with_an_absurd_rank_does_not_block_the_job(ruleset, store):
    """'[rank99999999999]:' is no rank (any user can print it): the line is still read and the job stored."""
    ctx, events, coverage = _absurd_rank_events(ruleset)
    assert [e.kind for e in events] == ["cuda_illegal_address"] and events[0].rank is None
    ingest(ruleset, store, ctx, events, coverage, "controller")
    with store.connect() as c:
        assert c.execute(text(
            "SELECT v.outcome FROM attribution.jobs j JOIN attribution.verdicts v ON v.id = j.current_verdict_id "
            "WHERE j.job_id = 'R1'")).scalar() == "application"


def test_out_of_range_numbers_from_a_payload_are_stored_as_unknown(ruleset, store):
    """A spool file or an API client is not trusted to keep codes and ranks within the integer columns."""
    from attribution.frozen import replace

    ctx, events, coverage = _absurd_rank_events(ruleset)
    events = [replace(events[0], rank=10**11, code=-2**40)]
    ingest(ruleset, store, ctx, events, coverage, "controller")
    with store.connect() as c:
        assert c.execute(text("SELECT rank, code FROM attribution.events")).all() == [(None, None)]


def _long_node_payload(ruleset):
    node = "n" * 4000
    start = datetime(2026, 11, 30, 8, tzinfo=UTC)
    ctx = ExecutionContext(cluster="c", job_id="L1", nodes=(node,), start=start, end=start + timedelta(hours=1),
                           state="FAILED")
    from attribution.model import Observation

    obs = [Observation(source="kernel", node=node, location="k:1", line="x", time=start + timedelta(minutes=5),
                       text="NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.")]
    d = diagnose_observations(ruleset, ctx, obs, [])
    return ctx, list(d.events), list(d.coverage)


def test_one_unstorable_spooled_payload_does_not_hold_back_the_others(ruleset, store, tmp_path):
    from attribution.pipeline.intake import decode_document, ingest_document
    from tests.harness.documents import controller_document
    from tests.conftest import INCIDENTS

    long_node = {"format": "attribution.observations/1", "reporter": {"role": "node", "name": "n" * 4000},
                 "cluster": "c", "slurm": {"SLURM_JOB_ID": "L1"}, "times": {"now": 1.7e9}}
    spool.write(tmp_path, long_node)
    good = controller_document(ruleset, INCIDENTS / "06-ib-link-down")
    spool.write(tmp_path, good)
    # the controller's deliver (pipeline/controller.py) maps a document the codec refuses to spool.Refused
    from attribution.errors import InputError
    from attribution.node.spool import Refused

    def handler(d):
        try:
            ingest_document(ruleset, store, decode_document(d))
        except InputError as exc:
            raise Refused(str(exc)) from exc

    res = spool.flush(tmp_path, handler)
    assert (res.replayed, res.left, len(res.bad)) == (1, 0, 1)
    reasons = [p.read_text() for p in (tmp_path / "bad").glob("*.reason")]
    assert len(reasons) == 1 and "reporter.name" in reasons[0] and "at most 255" in reasons[0]
    assert len(list((tmp_path / "bad").glob("*.spool"))) == 1  # kept for a human, not deleted
    with store.connect() as c:
        assert c.execute(text("SELECT count(*) FROM attribution.jobs WHERE job_id = :j"),
                         {"j": good["context"]["job_id"]}).scalar() == 1


def test_a_node_name_longer_than_any_host_name_is_refused_clearly(ruleset, store):
    """4000 characters is no host name (DNS allows 253) and would not fit a btree index row: refused with the
    field named, before anything is written."""
    ctx, events, coverage = _long_node_payload(ruleset)
    with pytest.raises(InputError, match="node: a name of 4000 characters"):
        ingest(ruleset, store, ctx, events, coverage, "node")
    with pytest.raises(InputError, match="nodes: a name of 4000 characters"):
        parse_context("cluster: c\njob_id: '1'\nnodes: " + "n" * 4000 + "\n")
    with store.connect() as c:
        assert c.execute(text("SELECT count(*) FROM attribution.jobs")).scalar() == 0
