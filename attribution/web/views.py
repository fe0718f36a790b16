"""What the dashboard's pages show, computed from the store's rows and a job's verdict document. Pure."""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime, timedelta
from typing import Any

from attribution.store import browse
from attribution.timeparse import TimeError, parse_iso


def symptom_groups(doc: dict, nodes_shown: int = 8) -> list[dict]:
    """The verdict's symptom groups (kind and node) counted by kind, with the nodes they came from."""
    groups: dict[str, dict] = {}
    for s in doc.get("symptom_groups") or []:
        g = groups.setdefault(s.get("kind") or "?", {"kind": s.get("kind") or "?", "count": 0, "nodes": set()})
        g["count"] += int(s.get("count") or 0)
        if s.get("node"):
            g["nodes"].add(s["node"])
    out = []
    for g in sorted(groups.values(), key=lambda g: (-g["count"], g["kind"])):
        nodes = sorted(g["nodes"])
        out.append({**g, "nodes": nodes[:nodes_shown], "more_nodes": max(0, len(nodes) - nodes_shown)})
    return out


#: an event's fields that say where it came from, not what was counted
_EVENT_FIELDS = ("evidence", "device", "window", "vanished")


def counter_evidence(events: list, doc: dict) -> list[dict]:
    """The job's counter events (rules/counters.yaml) with the counters each quotes: `0 -> 2` between the
    snapshots, a value alone when only one snapshot was there."""
    root = doc.get("root_cause") or {}
    out = []
    for e in events:
        if e.source != browse.TELEMETRY_SOURCE:
            continue
        deltas = [(k, v) for k, v in sorted(e.fields.items()) if k not in _EVENT_FIELDS] or [("", e.message)]
        out.append({"node": e.node, "device": e.gpu or e.fields.get("device") or "", "kind": e.kind,
                    "role": e.role if e.fields.get("window") == "job" else f"{e.role} ({e.fields.get('window')})",
                    "deltas": deltas,
                    "root": root.get("kind") == e.kind and root.get("node") == e.node and root.get("rule") == e.rule
                    and (root.get("gpu") or None) == e.gpu})
    return out


def num(v: Any) -> str:
    if v is None:
        return ""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    return str(int(f)) if f.is_integer() else f"{f:g}"


def yes(v: Any) -> str:
    return "" if v is None else ("yes" if v else "no")


#: port counters that move with traffic, not errors
_TRAFFIC = ("_data", "_packets", "_wait", "lifespan")


def port_errors(counters: dict | None) -> list[tuple[str, Any]]:
    return [(k.split("/", 1)[-1], v) for k, v in sorted((counters or {}).items())
            if v and not k.endswith(_TRAFFIC)]


def week_of(t: datetime) -> date:
    """The Monday of t's ISO week (UTC)."""
    d = t.date()
    return d - timedelta(days=d.weekday())


def weekly(rows: list[dict], since: str, until: str) -> tuple[list[dict], list[str]]:
    """Cause events per ISO week as one row per week and one column per fault (kind and code), newest first, from
    the week of `since` to the week of `until`. Weeks without faults are there too: a run of them is one row
    (`quiet`: from, to, how many weeks), so a gap reads as a gap."""
    by_week: dict[str, dict[str, int]] = defaultdict(dict)
    kinds: set[str] = set()
    for r in rows:
        label = r["kind"] + (f" {r['code']}" if r.get("code") is not None else "")
        kinds.add(label)
        week = str(r["week"])[:10]
        by_week[week][label] = by_week[week].get(label, 0) + int(r["events"])
    if not by_week:
        return [], []
    try:
        first, last = week_of(parse_iso(since)), week_of(parse_iso(until))
    except (TimeError, ValueError):
        first = last = None
    known = sorted(by_week)
    first = min(first or date.fromisoformat(known[0]), date.fromisoformat(known[0]))
    last = max(last or date.fromisoformat(known[-1]), date.fromisoformat(known[-1]))
    out: list[dict] = []
    week = last
    while week >= first:
        counts = by_week.get(week.isoformat())
        if counts:
            out.append({"week": week.isoformat(), "counts": counts, "total": sum(counts.values())})
        elif out and out[-1].get("quiet"):
            out[-1].update(since=week.isoformat(), weeks=out[-1]["weeks"] + 1)
        else:
            out.append({"quiet": True, "since": week.isoformat(), "to": week.isoformat(), "weeks": 1})
        week -= timedelta(weeks=1)
    return out, sorted(kinds)
