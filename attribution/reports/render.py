"""A verdict as the JSON of docs/verdict.md, and as a short text for a human at a terminal."""

from __future__ import annotations

from collections import Counter, defaultdict

from attribution.model import Event, Verdict
from attribution.timeparse import format_utc

SCHEMA = "attribution.verdict/1"


def event_dict(ev: Event, root: bool = False) -> dict:
    d = {
        "kind": ev.kind,
        "code": ev.code,
        "node": ev.node,
        "gpu": ev.gpu,
        "rank": ev.rank,
        "time": format_utc(ev.time),
        "source": ev.source,
        "evidence": ev.evidence,
        "rule": ev.rule,
        "location": ev.location,
        "line": ev.line,
    }
    if root:
        d["role"] = ev.role
        d["outcome"] = ev.outcome
        d["action"] = ev.action
        if ev.fields:
            d["fields"] = dict(ev.fields)
    return d


def symptom_groups(verdict: Verdict) -> list[dict]:
    """The symptoms by (kind, node): how many, first and last time; most first. All of them, also when the
    verdict lists only the first (symptoms folded as they streamed: verdict.symptom_groups)."""
    if verdict.symptom_groups is not None:
        rows = [(kind, node, n, first, last) for kind, node, n, first, last in verdict.symptom_groups]
    else:
        groups: dict[tuple, list[Event]] = defaultdict(list)
        for s in verdict.symptoms:
            groups[(s.event.kind, s.event.node)].append(s.event)
        rows = []
        for (kind, node), evs in groups.items():
            times = [e.time for e in evs if e.time]
            rows.append((kind, node, len(evs), min(times) if times else None, max(times) if times else None))
    rows.sort(key=lambda r: (-r[2], r[0], r[1] or ""))
    return [{"kind": kind, "node": node, "count": n, "first": format_utc(first) if first else None,
             "last": format_utc(last) if last else None} for kind, node, n, first, last in rows]


def symptoms_total(verdict: Verdict) -> int:
    return len(verdict.symptoms) if verdict.symptoms_total is None else verdict.symptoms_total


def followed_text(symptoms: int, causes: int, root: bool) -> str:
    """The events that followed the root cause, said in full: what the explanation's "N consequences" counts (the
    symptom lines and the other causes), so the two numbers a page shows agree."""
    def n(count: int, what: str) -> str:
        return f"{count} {what}" + ("" if count == 1 else "s")

    parts = n(symptoms, "symptom line") + (f" and {n(causes, 'other cause' if root else 'cause')}" if causes else "")
    if not root:
        return parts
    if not causes:
        return f"{parts} after the root cause"
    return f"{n(symptoms + causes, 'event')} after the root cause: {parts}"


def verdict_to_dict(verdict: Verdict, symptom_limit: int | None = None) -> dict:
    ctx = verdict.context
    symptoms = verdict.symptoms if symptom_limit is None else verdict.symptoms[:symptom_limit]
    return {
        "schema": SCHEMA,
        "job": {
            "cluster": ctx.cluster,
            "job_id": ctx.job_id,
            "user": ctx.user,
            "partition": ctx.partition,
            "state": ctx.state,
            "exit_code": ctx.exit_code,
            "failed_node": ctx.failed_node,
            "start": format_utc(ctx.start),
            "end": format_utc(ctx.end),
            "nodes": list(ctx.nodes),
        },
        "outcome": verdict.outcome,
        "confidence": verdict.confidence,
        "action": verdict.action,
        "root_cause": event_dict(verdict.root_cause, root=True) if verdict.root_cause else None,
        "culprits": [{"node": n, "gpu": g, "evidence": verdict.evidence_of_culprit(i)}
                     for i, (n, g) in enumerate(verdict.culprits)],
        "symptoms": [dict(event_dict(s.event), explained_by=s.explained_by) for s in symptoms],
        "symptoms_total": symptoms_total(verdict),
        "symptom_groups": symptom_groups(verdict),
        "other_causes": [event_dict(e) for e in verdict.causes[1:]] if verdict.root_cause else
                        [event_dict(e) for e in verdict.causes],
        "explanation": verdict.explanation,
        "coverage": [c.as_dict() for c in verdict.coverage],
        "rules_version": verdict.rules_version,
        "cost": dict(verdict.cost) if verdict.cost is not None else None,
    }


def render_text(verdict: Verdict, top: int = 8) -> str:
    ctx = verdict.context
    lines = [
        f"job {ctx.cluster}/{ctx.job_id}  state {ctx.state}  exit {ctx.exit_code or '-'}  "
        f"{len(ctx.nodes)} node(s)  {format_utc(ctx.start) or '?'} .. {format_utc(ctx.end) or '?'}",
        f"outcome     {verdict.outcome}  (confidence {verdict.confidence})",
        f"action      {verdict.action}",
    ]
    r = verdict.root_cause
    if r:
        where = r.node or "job"
        gpu = f" gpu {r.gpu}" if r.gpu else ""
        code = f" code {r.code}" if r.code is not None else ""
        lines.append(f"root cause  {r.kind}{code} on {where}{gpu} at {format_utc(r.time) or 'unknown time'}")
        lines.append(f"            {r.location}: {r.line[:200]}")
    else:
        lines.append("root cause  none found")
    lines.append("culprits    " + (", ".join(
        f"{n}" + (f" (gpu {g})" if g else "")
        + (" (job output only)" if verdict.evidence_of_culprit(i) == "job_output" else "")
        for i, (n, g) in enumerate(verdict.culprits)) or "none"))
    lines.append(f"why         {verdict.explanation}")
    groups = symptom_groups(verdict)
    if groups:
        lines.append(f"symptoms    {symptoms_total(verdict)} in {len(groups)} group(s):")
        for g in groups[:top]:
            lines.append(f"  {g['count']:>6}  {g['kind']:<28} {g['node'] or '(job)'}")
        if len(groups) > top:
            rest = sum(g["count"] for g in groups[top:])
            lines.append(f"  {rest:>6}  ... in {len(groups) - top} more group(s)")
    gaps = [c for c in verdict.coverage if c.status != "ok" or c.notes]
    if gaps:
        lines.append("coverage gaps:")
        for c in gaps:
            what = c.file or f"{c.source} on {c.node}"
            detail = c.reason or "; ".join(c.notes)
            if c.reason and c.notes:
                detail += "; " + "; ".join(c.notes)
            lines.append(f"  {c.status:<8} {what}: {detail}")
    counts = Counter(c.status for c in verdict.coverage)
    lines.append("sources     " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return "\n".join(lines)


def render_document_text(doc: dict, top: int = 8) -> str:
    """The same short text as render_text, from a stored verdict document (docs/verdict.md)."""
    job = doc.get("job") or {}
    lines = [
        f"job {job.get('cluster')}/{job.get('job_id')}  state {job.get('state')}  exit {job.get('exit_code') or '-'}  "
        f"{len(job.get('nodes') or [])} node(s)  {job.get('start') or '?'} .. {job.get('end') or '?'}",
        f"outcome     {doc.get('outcome')}  (confidence {doc.get('confidence')})",
        f"action      {doc.get('action')}",
    ]
    r = doc.get("root_cause")
    if r:
        gpu = f" gpu {r['gpu']}" if r.get("gpu") else ""
        code = f" code {r['code']}" if r.get("code") is not None else ""
        lines.append(f"root cause  {r.get('kind')}{code} on {r.get('node') or 'job'}{gpu} at "
                     f"{r.get('time') or 'unknown time'}")
        lines.append(f"            {r.get('location')}: {(r.get('line') or '')[:200]}")
    else:
        lines.append("root cause  none found")
    culprits = [c.get("node", "?") + (f" (gpu {c['gpu']})" if c.get("gpu") else "") for c in doc.get("culprits") or []]
    lines.append("culprits    " + (", ".join(culprits) or "none"))
    lines.append(f"why         {doc.get('explanation')}")
    groups = doc.get("symptom_groups") or []
    if groups:
        lines.append(f"symptoms    {doc.get('symptoms_total', sum(g['count'] for g in groups))} in {len(groups)} "
                     f"group(s):")
        for g in groups[:top]:
            lines.append(f"  {g['count']:>6}  {g['kind']:<28} {g.get('node') or '(job)'}")
        if len(groups) > top:
            lines.append(f"  {sum(g['count'] for g in groups[top:]):>6}  ... in {len(groups) - top} more group(s)")
    gaps = [c for c in doc.get("coverage") or [] if c.get("status") != "ok"]
    if gaps:
        lines.append("coverage gaps:")
        for c in gaps:
            lines.append(f"  {c.get('status'):<8} {c.get('file') or (str(c.get('source')) + ' on ' + str(c.get('node')))}"
                         f": {c.get('reason') or ''}")
    return "\n".join(lines)
