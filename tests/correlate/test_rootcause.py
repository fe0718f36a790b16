"""correlate: the root-cause rules of docs/verdict.md over the shipped causal graph, on hand-made events."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from attribution.correlate.rootcause import correlate
from attribution.model import Event, ExecutionContext

UTC = timezone.utc
T0 = datetime(2026, 3, 10, 9, 0, 0, tzinfo=UTC)
CTX = ExecutionContext(cluster="c", job_id="1", nodes=("a", "b", "c"), tasks_per_node=8, state="FAILED",
                       start=T0 - timedelta(hours=1), end=T0 + timedelta(hours=1))


def ev(ruleset, kind, node, seconds=None, gpu=None, code=None, **fields) -> Event:
    spec = ruleset.kinds[kind]
    t = None if seconds is None else T0 + timedelta(seconds=seconds)
    return Event(kind=kind, role=spec.role, rule=f"test.{kind}", source="kernel", location=f"{node}:{seconds}",
                 line=kind, message=kind, node=node, gpu=gpu, code=code, time=t, outcome=spec.outcome,
                 action=spec.action, severity=spec.severity, fields=fields)


def _ctx(**kw) -> ExecutionContext:
    base = dict(cluster=CTX.cluster, job_id=CTX.job_id, nodes=CTX.nodes, tasks_per_node=8, state=CTX.state,
                start=CTX.start, end=CTX.end, failed_node=None)
    base.update(kw)
    return ExecutionContext(**base)


def test_same_second_is_after(ruleset):
    """An app Xid logged a fraction of a second *before* the DBE in the same second is still its consequence."""
    dbe = ev(ruleset, "gpu_ecc_dbe", "a", 0.9, gpu="0000:47:00", code=48)
    app = ev(ruleset, "gpu_app_exception", "a", 0.2, gpu="0000:47:00", code=31)
    v = correlate(ruleset, CTX, [app, dbe])
    assert v.root_cause is dbe and v.outcome == "gpu_hardware"
    assert [(s.event.kind, s.explained_by) for s in v.symptoms] == [("gpu_app_exception", "root_cause")]


def test_app_xid_on_another_gpu_is_not_explained(ruleset):
    dbe = ev(ruleset, "gpu_ecc_dbe", "a", 5, gpu="0000:47:00", code=48)
    app = ev(ruleset, "gpu_app_exception", "a", 1, gpu="0000:b7:00", code=13)
    v = correlate(ruleset, CTX, [dbe, app])
    assert v.root_cause is app and v.outcome == "application" and v.culprits == ()


def test_same_kind_on_two_nodes_never_explain_each_other(ruleset):
    x = ev(ruleset, "gpu_fallen_off_bus", "b", 10, gpu="0000:01:00", code=79)
    y = ev(ruleset, "gpu_fallen_off_bus", "a", 20, gpu="0000:02:00", code=79)
    v = correlate(ruleset, CTX, [y, x])
    assert v.root_cause is x
    assert [n for n, _ in v.culprits] == ["b", "a"]
    assert v.culprits[0] == ("b", "0000:01:00")


def test_clock_skew_between_nodes_is_tolerated(ruleset):
    """A consequence on another node whose clock runs 20 s behind still counts as after its cause."""
    xid = ev(ruleset, "gpu_fallen_off_bus", "a", 100, gpu="0000:01:00", code=79)
    py = ev(ruleset, "python_exception", "b", 80)
    assert correlate(ruleset, CTX, [xid, py]).root_cause is xid
    far = ev(ruleset, "python_exception", "b", 50)
    assert correlate(ruleset, CTX, [xid, far]).root_cause is far


def test_within_seconds_bounds_an_edge(ruleset):
    sw = ev(ruleset, "nvswitch_fatal", "a", 0)
    soon = ev(ruleset, "nvlink_error", "a", 30, gpu="0000:3a:00", code=74)
    late = ev(ruleset, "nvlink_error", "a", 200, gpu="0000:3a:00", code=74)
    v = correlate(ruleset, CTX, [sw, soon, late])
    assert v.root_cause is sw
    assert v.causes == (sw, late)  # the late link fault is a fault of its own
    assert {n for n, _ in v.culprits} == {"a"}


def test_tie_in_the_same_second_goes_to_the_cause_that_explains_more(ruleset):
    link = ev(ruleset, "ib_link_down", "b", 0)
    fs = ev(ruleset, "filesystem_error", "a", 0.5)
    syms = [ev(ruleset, "filesystem_error", "b", 1.0)]  # explained by the link loss on the same node
    v = correlate(ruleset, CTX, [fs, link] + syms)
    assert v.root_cause is link


def test_tie_then_node_name(ruleset):
    x = ev(ruleset, "gpu_firmware_error", "c", 0.1)
    y = ev(ruleset, "gpu_firmware_error", "b", 0.7)
    assert correlate(ruleset, CTX, [x, y]).root_cause is y


def test_events_outside_the_window_do_not_count(ruleset):
    before = ev(ruleset, "gpu_fallen_off_bus", "a", -3600 - 301)
    after = ev(ruleset, "gpu_fallen_off_bus", "a", 3600 + 301)
    edge = ev(ruleset, "gpu_fallen_off_bus", "b", 3600 + 299)
    v = correlate(ruleset, CTX, [before, after])
    assert v.root_cause is None and v.outcome == "unknown"
    assert correlate(ruleset, CTX, [before, edge]).root_cause is edge


def test_untimed_events_sit_at_the_job_end(ruleset):
    py = ev(ruleset, "python_exception", "a", None)
    fs = ev(ruleset, "filesystem_error", "b", 3000)
    v = correlate(ruleset, CTX, [py, fs])
    assert v.root_cause is fs
    assert v.symptoms[0].event is py and v.symptoms[0].explained_by == "root_cause"


def test_symptom_hints_ecc_before_network(ruleset):
    net = ev(ruleset, "nccl_ib_completion_error", "a", 1)
    ecc = ev(ruleset, "cuda_ecc_error", "c", 2)
    v = correlate(ruleset, CTX, [net, ecc])
    assert (v.outcome, v.confidence, v.action, v.root_cause) == ("gpu_hardware", "medium", "reset_gpu", None)
    assert v.culprits == (("c", None),)
    v = correlate(ruleset, CTX, [net])
    assert (v.outcome, v.confidence, v.action, v.culprits) == ("network", "low", "inspect_network", ())


def test_job_state_decides_when_nothing_else_does(ruleset):
    wd = ev(ruleset, "nccl_watchdog_timeout", "a", 1)
    assert correlate(ruleset, _ctx(state="TIMEOUT"), [wd]).outcome == "scheduler"
    v = correlate(ruleset, _ctx(state="NODE_FAIL", failed_node="b"), [wd])
    assert (v.outcome, v.culprits) == ("host", (("b", None),))
    v = correlate(ruleset, _ctx(state="FAILED"), [wd])
    assert (v.outcome, v.action, v.confidence) == ("unknown", "investigate", "low")
    assert correlate(ruleset, _ctx(state="OUT_OF_MEMORY"), []).outcome == "application"


def test_a_found_cause_beats_a_timeout(ruleset):
    x = ev(ruleset, "gpu_fallen_off_bus", "a", 5, gpu="0000:01:00", code=79)
    assert correlate(ruleset, _ctx(state="TIMEOUT"), [x]).outcome == "gpu_hardware"


def test_a_completed_job_attributes_nothing(ruleset):
    x = ev(ruleset, "gpu_row_remap_failure", "a", 5, gpu="0000:01:00", code=64)
    v = correlate(ruleset, _ctx(state="COMPLETED"), [x])
    assert (v.outcome, v.action, v.root_cause, v.culprits) == ("none", "none", None, ())


def test_context_events_play_no_part(ruleset):
    pending = ev(ruleset, "gpu_row_remap_pending", "a", 1, gpu="0000:01:00", code=63)
    v = correlate(ruleset, CTX, [pending])
    assert v.root_cause is None and v.symptoms == ()


def test_application_root_names_no_culprit_even_with_a_later_infra_cause(ruleset):
    py = ev(ruleset, "cuda_oom", "a", 1)
    ib = ev(ruleset, "ib_link_down", "b", 50)
    v = correlate(ruleset, CTX, [py, ib])
    assert v.root_cause is py and v.culprits == () and v.confidence == "medium"


def test_an_event_of_a_kind_the_rule_pack_does_not_know_is_attributed_not_crashed_on(ruleset):
    """Found by the schema-driven service test: a report (or a stored event of another rule-pack version) whose
    kind this pack does not define became the root cause, and explaining it raised KeyError (a 500)."""
    odd = Event(kind="\xa0W", role="cause", rule="elsewhere.rule", source="node", location="x:1", line="l",
                message="m", node="a", time=T0, outcome="host", action="drain_node", severity="error")
    watchdog = ev(ruleset, "nccl_watchdog_timeout", "b", 30)
    v = correlate(ruleset, CTX, [odd, watchdog])
    assert v.root_cause is odd and "'\\xa0W'" in v.explanation


def test_nccl_misuse_alone_is_the_jobs_own_and_the_configuration_line_is_its_root(ruleset):
    """docs/verdict.md "Communication errors": NCCL saying the job misused it is an application cause; the line that
    names the configuration (two ranks on one GPU) explains the wrapper's "invalid usage" and the NCCL symptoms."""
    usage = ev(ruleset, "nccl_invalid_usage", "a")
    config = ev(ruleset, "nccl_config_error", "a")
    nccl = ev(ruleset, "nccl_error", "a")
    v = correlate(ruleset, CTX, [usage, nccl, config])
    assert (v.outcome, v.action, v.culprits) == ("application", "fix_application", ())
    assert v.root_cause is config
    assert {(s.event.kind, s.explained_by) for s in v.symptoms} == {("nccl_invalid_usage", "root_cause"),
                                                                     ("nccl_error", "root_cause")}


def test_an_infrastructure_fault_before_nccl_misuse_explains_it(ruleset):
    """A link that went down leaves no interface matching NCCL_SOCKET_IFNAME: the misuse NCCL reports is then a
    symptom of the network fault, which is the root with its node as culprit."""
    link = ev(ruleset, "ib_link_down", "b", 0)
    config = ev(ruleset, "nccl_config_error", "b", 30)
    usage = ev(ruleset, "nccl_invalid_usage", "a", 31)
    v = correlate(ruleset, CTX, [config, usage, link])
    assert v.root_cause is link and v.outcome == "network"
    assert [n for n, _ in v.culprits] == ["b"]
    assert {s.event.kind for s in v.symptoms} == {"nccl_config_error", "nccl_invalid_usage"}


def test_a_requeued_run_is_the_schedulers_unless_a_cause_is_found(ruleset):
    """Job state REQUEUED (and REQUEUE_HOLD) gives scheduler with no culprit; a GPU that fell off the bus before
    the requeue still wins (docs/verdict.md step 5)."""
    exits = [ev(ruleset, "task_exit", "a", 40)]
    v = correlate(ruleset, _ctx(state="REQUEUED"), exits)
    assert (v.outcome, v.action, v.culprits, v.root_cause) == ("scheduler", "none", (), None)
    held = correlate(ruleset, _ctx(state="REQUEUE_HOLD"), exits)
    assert (held.outcome, held.action) == ("scheduler", "resubmit")
    xid = ev(ruleset, "gpu_fallen_off_bus", "a", 10, gpu="0000:3b:00", code=79)
    v = correlate(ruleset, _ctx(state="REQUEUED"), exits + [xid])
    assert v.root_cause is xid and v.outcome == "gpu_hardware" and v.culprits == (("a", "0000:3b:00"),)
