"""`attribution diagnose` and `attribution rules check`: the offline commands (no database)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from attribution.cli import EXIT_PROBLEMS, main, ruleset_of, settings_of
from attribution.cli.connector_options import apply_connector_options, connector_options


@main.command()
@click.argument("bundle", type=click.Path(path_type=Path), required=False)
@click.option("--slurm-job", "slurm_job", default=None, metavar="ID",
              help="Diagnose an ended Slurm job: its context from sacct, its stdout/stderr when readable from here, "
                   "and the configured connectors.")
@click.option("--kueue-workload", "kueue_workload", default=None, metavar="NS/NAME",
              help="Diagnose a Kueue Workload: placement and window from the Workload and its pods, the pods' logs "
                   "(kubectl logs) and the configured connectors.")
@click.option("--context", "context_file", default=None, type=click.Path(path_type=Path),
              help="Diagnose the job a context.yaml describes (docs/bundle.md), its evidence from the configured "
                   "connectors.")
@click.option("--pod-selector", default=None, metavar="SELECTOR",
              help="Label selector of the workload's pods (default: from the kind of the Workload's owner).")
@click.option("--job-output", "job_output", multiple=True, type=click.Path(path_type=Path),
              help="With --slurm-job: the job's stdout/stderr file (repeatable; default: scontrol's paths, or "
                   "slurm-%j.out in the job's working directory).")
@connector_options
@click.option("--json", "as_json", is_flag=True, help="Print the verdict JSON (docs/verdict.md).")
@click.option("--max-symptoms", type=click.IntRange(min=0), default=None,
              help="List at most this many symptoms (default 1000; symptoms_total and symptom_groups count them "
                   "all).")
@click.option("--html", "html_out", type=click.Path(path_type=Path), default=None,
              help="Also write the job timeline as one self-contained HTML page.")
@click.pass_context
def diagnose(ctx: click.Context, bundle: Path | None, slurm_job: str | None, kueue_workload: str | None,
             context_file: Path | None, pod_selector: str | None, job_output: tuple[Path, ...], as_json: bool,
             max_symptoms: int | None, html_out: Path | None, **connector_flags) -> None:
    """Diagnose one job (no database): an incident BUNDLE (a folder, or a .tar.gz of one) offline, or a live
    --slurm-job / --kueue-workload / --context with the configured connectors. Exit 0 whatever the outcome."""
    from attribution.pipeline.diagnose import LISTED_SYMPTOMS, diagnose_bundle
    from attribution.pipeline.live import diagnose_kueue_workload, diagnose_slurm_job, diagnose_static
    from attribution.reports.render import render_text, verdict_to_dict

    if sum(x is not None for x in (bundle, slurm_job, kueue_workload, context_file)) != 1:
        raise click.UsageError("give exactly one of BUNDLE, --slurm-job ID, --kueue-workload NS/NAME or "
                               "--context FILE")
    if bundle is not None:
        if any(v for v in connector_flags.values()) or job_output or pod_selector:
            raise click.UsageError("a BUNDLE carries its own evidence: connector flags go with --slurm-job, "
                                   "--kueue-workload or --context")
        from attribution.cli.bundles import opened

        # symptoms folded as they stream: memory bounded however noisy the logs, unless the timeline wants every
        # event. A .tar.gz bundle is unpacked as `ingest` and POST /v1/diagnose unpack it.
        with opened(bundle) as folder:
            d = diagnose_bundle(ruleset_of(ctx), folder, max_symptoms, keep_events=html_out is not None)
    else:
        settings = apply_connector_options(settings_of(ctx), **connector_flags)
        if context_file is not None:
            d = diagnose_static(ruleset_of(ctx), settings.connectors, context_file)
        elif slurm_job is not None:
            d = diagnose_slurm_job(ruleset_of(ctx), settings.connectors, slurm_job, settings.cluster, job_output)
        else:
            d = diagnose_kueue_workload(ruleset_of(ctx), settings.connectors, kueue_workload,
                                        settings.cluster or "default", pod_selector)
    if html_out is not None:
        from attribution.reports.timeline import write_timeline

        write_timeline(d, html_out)
    if as_json:
        limit = LISTED_SYMPTOMS if max_symptoms is None else max_symptoms
        click.echo(json.dumps(verdict_to_dict(d.verdict, symptom_limit=limit), indent=2))
    else:
        click.echo(render_text(d.verdict))


@main.group()
def rules() -> None:
    """Rule pack commands."""


@rules.command("path")
@click.pass_context
def rules_path(ctx: click.Context) -> None:
    """Print the folder of the rule pack in use (--rules, rules_dir in the configuration, else the shipped one)."""
    from attribution.resources import rules_dir

    obj = ctx.find_root().obj
    chosen = obj.get("rules_dir") or settings_of(ctx).rules_dir
    click.echo(Path(chosen).resolve() if chosen else rules_dir())


@rules.command("check")
@click.argument("directory", type=click.Path(path_type=Path), required=False)
@click.option("--hook-filter", "hook_filter", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="The node hook's filter file to compare with the pack (default: hooks/suspicious.patterns "
                   "beside the pack, when there is one).")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object: ok, problems (each `path:line: message`), summary; the exit code is the same.")
def rules_check(directory: Path | None, hook_filter: Path | None, as_json: bool) -> None:
    """Validate a rule pack; every problem printed as path:line: message; exit 1 if any."""
    from attribution.pipeline.rulecheck import check_pack

    problems, summary = check_pack(directory, hook_filter)
    if as_json:
        click.echo(json.dumps({"ok": not problems, "summary": None if problems else summary,
                               "problems": [str(p) for p in problems]}, indent=2))
        if problems:
            sys.exit(EXIT_PROBLEMS)
        return
    for p in problems:
        click.echo(str(p))
    if problems:
        click.echo(f"{len(problems)} problem(s)", err=True)
        sys.exit(EXIT_PROBLEMS)
    click.echo(summary)


@rules.command("filter")
@click.argument("directory", type=click.Path(path_type=Path), required=False)
@click.option("--error-lines", "error_lines", is_flag=True,
              help="Print the error-looking lines' patterns the node collector keeps for replay instead "
                   "(> hooks/error-lines.patterns).")
def rules_filter(directory: Path | None, error_lines: bool) -> None:
    """Print the node hook's grep filter generated from the pack (attribution rules filter > hooks/suspicious.patterns)."""
    from attribution.rulepack.hookfilter import error_lines_text, filter_text
    from attribution.rulepack.load import load_rules

    rs = load_rules(directory)
    click.echo(error_lines_text(rs) if error_lines else filter_text(rs), nl=False)
