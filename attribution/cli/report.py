"""Text tables of the fleet views for the terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # the CLI imports no database code until a command needs it
    from sqlalchemy import Engine


def fleet_summary(engine: Engine, echo: Callable[[str], None]) -> None:
    from attribution.store import queries

    echo("\n== verdicts by outcome")
    for outcome, n in queries.outcomes(engine):
        echo(f"  {n:>5}  {outcome}")
    echo("\n== recurring faults (same node/GPU/kind in two or more ISO weeks)")
    rows = queries.recurring_faults(engine)
    if not rows:
        echo("  none")
    else:
        echo(f"  {'cluster':<10} {'node':<14} {'gpu':<12} {'kind':<22} {'code':>5} {'weeks':>5} {'events':>6} "
             f"{'failed jobs':>11}  last seen")
        for r in rows:
            echo(f"  {r['cluster']:<10} {r['node']:<14} {r['gpu'] or '-':<12} {r['kind']:<22} "
                 f"{'' if r['code'] is None else r['code']:>5} {r['weeks']:>5} {r['events']:>6} "
                 f"{r['jobs_failed']:>11}  {r['last_seen']:%Y-%m-%d}")
    echo("\n== nodes named as culprits")
    for cluster, node, n in queries.culprit_nodes(engine):
        echo(f"  {n:>5}  {cluster}/{node}")
