"""live: a job's context from its scheduler (sacct, Kueue, a context file), its evidence from the configured
connectors (job output files, Loki, Prometheus, pod logs), diagnosed; `backfill` stores what it diagnoses."""

from __future__ import annotations

from pathlib import Path

from attribution.errors import InputError
from attribution.model import Coverage, ExecutionContext, Observation
from attribution.pipeline.diagnose import Diagnosis, diagnose_stream
from attribution.rulepack.values import RuleSet
from attribution.scope.bundle import load_context


def diagnose_collected(ruleset: RuleSet, ctx: ExecutionContext, observations: list[Observation],
                       coverage: list[Coverage], series=(), metric_labels=None,
                       max_symptoms: int | None = None) -> Diagnosis:
    """The one diagnosis of observations in hand, with the events the metric rules find in metric series."""
    from attribution.extract.metrics import evaluate, metric_rules

    extra = evaluate(ruleset, ctx, metric_rules(ruleset, metric_labels), series) if series else []
    return diagnose_stream(ruleset, ctx, observations, list(coverage), extra, max_symptoms)


def _keeper(ruleset: RuleSet, keep: bool):
    from attribution.replay.keep import LineKeeper

    return LineKeeper(ruleset) if keep else None


def diagnose_live(ruleset: RuleSet, connectors, ctx: ExecutionContext, observations=(), coverage=(),
                  workload=None, max_symptoms: int | None = None, keeper=None) -> Diagnosis:
    """Collect a job's evidence with the configured connectors (files, Loki, Prometheus, pod logs) and diagnose.
    With `keeper` (replay.keep.LineKeeper, which may hold lines read before), the diagnosis of a failed job
    carries what they read as the piece kept for replay (docs/replay.md): their lines, with the metric series."""
    from datetime import timedelta

    from attribution.collect.connectors import collect_configured, query_window
    from attribution.extract.metrics import metric_rules

    labels = connectors.prometheus.labels
    window = query_window(ctx, timedelta(seconds=ruleset.graph.before_start_seconds),
                          timedelta(seconds=ruleset.graph.after_end_seconds))
    rules = metric_rules(ruleset, labels)
    got = collect_configured(connectors, ctx, ruleset.prefilter, rules, window, workload, keeper=keeper)
    d = diagnose_collected(ruleset, ctx, list(observations) + got.observations, list(coverage) + got.coverage,
                           got.series, labels, max_symptoms)
    if keeper is None or d.verdict.outcome == "none":
        return d
    from attribution.replay.streams import keep_metrics

    piece = keeper.document(reporter=CONNECTORS_REPORTER) | keep_metrics(got.series, rules, ctx, labels,
                                                                         keeper.limits)
    return Diagnosis(d.context, d.events, d.coverage, d.verdict, evidence=piece)


#: The reporter of the piece a job's connectors give (the store keys it `<source>/connectors`: `sacct/connectors`).
CONNECTORS_REPORTER = "connectors"


def diagnose_sacct_job(ruleset: RuleSet, connectors, job, cluster: str | None = None, job_output=(),
                       max_symptoms: int | None = None, keep: bool = False) -> Diagnosis:
    """One job sacct listed: its stdout/stderr when readable from here, plus the configured connectors; `keep`:
    with what they read kept for replay (Diagnosis.evidence)."""
    from attribution.collect.joboutput import node_of_file, read_job_output
    from attribution.scope.sacct import context_of
    from attribution.scope.schedulers import job_output_paths

    ctx = context_of(job, cluster)
    keeper = _keeper(ruleset, keep)
    paths = [Path(p) for p in job_output]
    if not paths and connectors.slurm.job_output:
        paths = job_output_paths(connectors, job)
    obs: list[Observation] = []
    cov: list[Coverage] = []
    for p in paths:
        tap = None if keeper is None else keeper.stream_tap("text", "job", node_of_file(p.name, ctx.nodes), str(p))
        o, c = read_job_output(p, str(p), ctx, ruleset.prefilter("job"), tap=tap)
        obs += o
        cov.append(c)
    return diagnose_live(ruleset, connectors, ctx, obs, cov, max_symptoms=max_symptoms, keeper=keeper)


def diagnose_slurm_job(ruleset: RuleSet, connectors, job_id: str, cluster: str | None = None, job_output=(),
                       max_symptoms: int | None = None, keep: bool = False) -> Diagnosis:
    """`attribution diagnose --slurm-job ID`: the context from sacct, the evidence from the connectors."""
    from attribution.scope.schedulers import sacct_job

    job = sacct_job(connectors, job_id)
    if not job.ended:
        raise InputError(f"job {job_id}", f"still {job.state}: diagnose it once it has ended")
    return diagnose_sacct_job(ruleset, connectors, job, cluster, job_output, max_symptoms, keep)


def diagnose_kueue_workload(ruleset: RuleSet, connectors, ref: str, cluster: str, pod_selector: str | None = None,
                            max_symptoms: int | None = None, keep: bool = False) -> Diagnosis:
    """`attribution diagnose --kueue-workload NS/NAME`: placement and window from the Workload and its pods, the
    evidence from the pods' logs and the connectors."""
    from attribution.scope.kueue import parse_workload_ref
    from attribution.scope.schedulers import kueue_workload

    ns, name = parse_workload_ref(ref)
    workload, _ = kueue_workload(connectors, ns, name, cluster, pod_selector)
    return diagnose_live(ruleset, connectors, workload.context, workload=workload, max_symptoms=max_symptoms,
                         keeper=_keeper(ruleset, keep))


def failed_slurm_jobs(connectors, since, until) -> list:
    """Every job that ended in [since, until) in a state other than COMPLETED, oldest end first."""
    from attribution.scope.schedulers import sacct_jobs

    from attribution.timeparse import TimeError, parse_iso

    out = []
    for j in sacct_jobs(connectors, since=since, until=until):
        if not j.failed:
            continue
        try:
            end = parse_iso(j.get("End") or "")
        except TimeError:
            continue
        if since <= end < until:
            out.append((end, j))
    return [j for _, j in sorted(out, key=lambda x: (x[0], x[1].job_id))]


def diagnose_static(ruleset: RuleSet, connectors, context_file: Path, max_symptoms: int | None = None,
                    keep: bool = False) -> Diagnosis:
    """`attribution diagnose --context FILE`: a context written by hand (context.yaml, docs/bundle.md), the
    evidence from the configured connectors."""
    return diagnose_live(ruleset, connectors, load_context(Path(context_file)), max_symptoms=max_symptoms,
                         keeper=_keeper(ruleset, keep))
