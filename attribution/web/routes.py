"""The dashboard's pages under /ui/, rendered on the server from the store.

    /ui/jobs                          the job list: filters (cluster, outcome, node, user, time range), paging
    /ui/jobs/{cluster}/{job}?start=   one job: the verdict, the counter changes that became evidence, its
                                      symptoms and coverage gaps, its timeline
    /ui/nodes/{cluster}/{node}        one node: recurring faults, fault events by week, failed jobs, telemetry
                                      counters and counter events, drains
    /ui/fleet                         the fleet report, live
    /ui/drain                         the drain candidates with their evidence

Every page but the login form needs a session (attribution.web.session); without one it sends the browser to
the login form and back. Filters, cursors and job start times live in the URL, so a link or a reload shows the
same page. The essentials are plain HTML; only the timeline and fleet charts use JavaScript (inlined, no CDN).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from attribution.api.service import Service
from attribution.errors import InputError
from attribution.store import browse
from attribution.timeparse import TimeError, format_utc, parse_iso
from attribution.web.session import COOKIE, PATH, Sessions

UTC = timezone.utc
PAGE_SIZE = 50
#: The outcome filter's choices: "" is any; a job list opened without a filter shows the failed jobs.
OUTCOMES = ("failed", "", "gpu_hardware", "nvlink", "nvswitch_fabric", "network", "host", "application",
            "scheduler", "unknown", "none")
FORM_BYTES = 4096
#: Pages without charts run no script at all; chart pages run only their own inline scripts.
CSP_PLAIN = ("default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; frame-src 'self'; "
             "form-action 'self'; base-uri 'none'; frame-ancestors 'self'")
CSP_CHARTS = ("default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
              "img-src data: blob:; base-uri 'none'; form-action 'self'; frame-ancestors 'self'")


def when(value: Any) -> str:
    """An ISO 8601 time as the pages print it: `2026-04-09 16:40:52Z`."""
    if not value:
        return ""
    try:
        return parse_iso(str(value)).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    except (TimeError, ValueError):
        return str(value)


def url_job(cluster: str, job_id: str, start: str | None = None, part: str = "") -> str:
    """The job's page (or one of its parts, e.g. `timeline`); `start` picks one of several jobs with this id."""
    url = f"/ui/jobs/{quote(cluster, safe='')}/{quote(job_id, safe='')}" + (f"/{part}" if part else "")
    return url + (f"?{urlencode({'start': start})}" if start else "")


def url_node(cluster: str, node: str) -> str:
    return f"/ui/nodes/{quote(cluster, safe='')}/{quote(node, safe='')}"


def _templates():
    from jinja2 import ChainableUndefined, Environment, PackageLoader, select_autoescape

    from attribution.reports.shell import CSS

    env = Environment(loader=PackageLoader("attribution.web", "templates"), autoescape=select_autoescape(["html"]),
                      undefined=ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
    env.globals.update(css=CSS, when=when, url_job=url_job, url_node=url_node, num=_num, yes=_yes,
                       port_errors=_port_errors)
    return env


def _safe_next(value: str | None) -> str:
    """Where to go after signing in: a dashboard path of this service, never another site."""
    if value and value.startswith("/ui/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/ui/jobs"


def add_web_routes(app: FastAPI, svc: Service) -> None:
    env = _templates()
    sessions = Sessions(svc.tokens)

    def page(name: str, status: int = 200, csp: str = CSP_PLAIN, **values) -> HTMLResponse:
        html = env.get_template(name).render(signed_in=values.pop("signed_in", True), **values)
        return HTMLResponse(html, status_code=status, headers=_headers(csp))

    def signed_in(request: Request) -> None:
        if sessions.principal(request.cookies.get(COOKIE)) is None:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            raise HTTPException(303, "sign in first", headers={"Location": "/ui/login?" + urlencode({"next": target})})

    async def on_db(fn, *args):
        def work():
            with svc.engine.connect() as conn:
                return fn(conn, *args)
        return await svc.db.run(work)

    bundle: list[str] = []
    bundle_lock = threading.Lock()

    def chart_bundle() -> str:
        """Vega's script for the chart pages, made once per app (vl-convert takes seconds; a request that comes
        while the warm-up makes it waits for that one)."""
        with bundle_lock:
            if not bundle:
                from attribution.reports.vega import script_bundle

                bundle.append(script_bundle())
            return bundle[0]

    # built when the worker starts (app.py's lifespan runs app.state.warm in a thread), so the first fleet or
    # timeline page does not wait for it
    app.state.warm = [*getattr(app.state, "warm", []), chart_bundle]

    def not_found(message: str) -> HTMLResponse:
        return page("error.html", 404, title="Not found", page="error", message=message)

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        return Response(status_code=204)  # no icon; a 404 would be a console error on every page

    @app.get("/ui", include_in_schema=False)
    @app.get("/ui/", include_in_schema=False)
    async def home() -> Response:
        return RedirectResponse("/ui/jobs", status_code=303)

    @app.get("/ui/login", include_in_schema=False)
    async def login_form(next: str | None = None) -> HTMLResponse:
        return page("login.html", title="Sign in", page="login", next=_safe_next(next), problem=None,
                    signed_in=False)

    @app.post("/ui/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        body = await request.body()
        form = parse_qs(body[:FORM_BYTES].decode("utf-8", "replace"), max_num_fields=4)
        token = (form.get("token") or [""])[0].strip()
        nxt = _safe_next((form.get("next") or [None])[0])
        cookie = sessions.issue(token)
        if cookie is None:
            return page("login.html", 401, title="Sign in", page="login", next=nxt, signed_in=False,
                        problem="That token is not in the tokens file, or lacks the read scope.")
        response = RedirectResponse(nxt, status_code=303)
        response.set_cookie(COOKIE, cookie, max_age=sessions.seconds, path=PATH, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")
        return response

    @app.post("/ui/logout", include_in_schema=False)
    async def logout() -> Response:
        response = RedirectResponse("/ui/login", status_code=303)
        response.delete_cookie(COOKIE, path=PATH)
        return response

    @app.get("/ui/jobs", include_in_schema=False)
    async def jobs(request: Request) -> HTMLResponse:
        signed_in(request)
        q = request.query_params
        outcome = q.get("outcome", "failed")
        problem = None
        try:
            if outcome not in OUTCOMES:
                raise InputError("outcome", f"not an outcome: {outcome[:40]}")
            where = browse.JobFilter(cluster=q.get("cluster") or None, outcome=outcome or None,
                                     node=q.get("node") or None, user=q.get("user") or None,
                                     since=_time(q, "since"), until=_time(q, "until"))
            after = browse.Cursor.decode(q["after"]) if q.get("after") else None
            rows, nxt = await on_db(browse.list_jobs, where, PAGE_SIZE, after)
        except InputError as exc:
            problem, rows, nxt, after = f"{exc.path}: {exc.message}", [], None, None
        known = await on_db(browse.clusters)
        kept = {k: v for k, v in q.items() if k != "after" and v}
        if "outcome" in q:
            kept["outcome"] = q["outcome"]  # "" (any) differs from no filter given (failed)
        filters = {"cluster": q.get("cluster"), "outcome": outcome, "node": q.get("node"), "user": q.get("user"),
                   "since": q.get("since"), "until": q.get("until")}
        return page("jobs.html", 400 if problem else 200, title="Jobs", page="jobs", rows=rows, f=filters,
                    clusters=known, outcomes=OUTCOMES, problem=problem, first_page=after is None,
                    first_url="/ui/jobs?" + urlencode(kept),
                    next_url=("/ui/jobs?" + urlencode({**kept, "after": nxt.encode()})) if nxt else None)

    @app.get("/ui/jobs/{cluster}/{job_id}", include_in_schema=False)
    async def job(request: Request, cluster: str, job_id: str, start: str | None = None) -> HTMLResponse:
        signed_in(request)
        found = await _stored(cluster, job_id, start)
        if isinstance(found, HTMLResponse):
            return found
        doc = found.document
        starts = [format_utc(s) for s in found.starts]
        job_start = (doc.get("job") or {}).get("start")
        return page("job.html", title=f"Job {job_id}", page="job", doc=doc, other_starts=starts,
                    symptom_groups=_symptom_groups(doc), counter_evidence=_counter_evidence(found.events, doc),
                    gaps=[c for c in doc.get("coverage") or [] if c.get("status") != "ok"],
                    timeline_url=url_job(cluster, job_id, job_start, part="timeline"))

    @app.get("/ui/jobs/{cluster}/{job_id}/timeline", include_in_schema=False)
    async def job_timeline(request: Request, cluster: str, job_id: str, start: str | None = None) -> HTMLResponse:
        signed_in(request)
        found = await _stored(cluster, job_id, start)
        if isinstance(found, HTMLResponse):
            return found
        from attribution.reports.timeline import render_timeline

        html = await svc.cpu.run(lambda: render_timeline(found.document, found.events, chart_bundle()))
        return HTMLResponse(html, headers=_headers(CSP_CHARTS))

    async def _stored(cluster: str, job_id: str, start: str | None):
        from attribution.store.reports import stored_job

        try:
            at = parse_iso(start) if start else None
        except (TimeError, ValueError):
            return not_found(f"not a start time: {start[:64]}")
        try:
            return await svc.db.run(lambda: stored_job(svc.engine, cluster, job_id, at))
        except InputError:
            return not_found(f"No job {job_id} on cluster {cluster} has a verdict in the store.")

    @app.get("/ui/nodes/{cluster}/{node}", include_in_schema=False)
    async def node(request: Request, cluster: str, node: str, days: int = 91) -> HTMLResponse:
        signed_in(request)
        days = min(max(days, 1), 3660)
        h = await on_db(browse.node_history, cluster, node, datetime.now(UTC), days)
        weeks, kinds = _weekly(h["faults_weekly"])
        return page("node.html", title=f"Node {node}", page="node", h=h, weeks=weeks, kinds=kinds,
                    max_total=max([w["total"] for w in weeks] or [1]), bar_width=160,
                    jobs_url="/ui/jobs?" + urlencode({"cluster": cluster, "node": node, "outcome": "failed"}))

    @app.get("/ui/fleet", include_in_schema=False)
    async def fleet(request: Request, weeks: int = 8) -> HTMLResponse:
        signed_in(request)
        from attribution.reports.fleet_page import fleet_html
        from attribution.store.reports import fleet_data

        weeks = min(max(weeks, 1), 104)
        data = await svc.db.run(lambda: fleet_data(svc.engine, weeks=weeks))
        html = await svc.cpu.run(lambda: fleet_html(data, chart_bundle()))
        nav = ('<nav style="background:#1d2127;padding:8px 24px"><a style="color:#fff" href="/ui/jobs">'
               '&larr; dashboard</a></nav>')
        return HTMLResponse(html.replace("<main", nav + "<main", 1), headers=_headers(CSP_CHARTS))

    @app.get("/ui/drain", include_in_schema=False)
    async def drain(request: Request) -> HTMLResponse:
        signed_in(request)
        from attribution.store import reads

        rows, _ = await on_db(reads.view_rows, "drain_candidates", {}, "score DESC NULLS LAST, cluster, node", 1000)
        return page("drain.html", title="Drain candidates", page="drain", rows=rows)


def _time(q, name: str) -> datetime | None:
    value = q.get(name)
    if not value:
        return None
    try:
        return parse_iso(value)
    except (TimeError, ValueError):
        raise InputError(name, f"not an ISO 8601 time: {value[:64]}") from None


def _headers(csp: str) -> dict[str, str]:
    return {"Content-Security-Policy": csp, "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff",
            "Cache-Control": "no-store"}


def _symptom_groups(doc: dict, nodes_shown: int = 8) -> list[dict]:
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


def _counter_evidence(events: list, doc: dict) -> list[dict]:
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


def _num(v: Any) -> str:
    if v is None:
        return ""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    return str(int(f)) if f.is_integer() else f"{f:g}"


def _yes(v: Any) -> str:
    return "" if v is None else ("yes" if v else "no")


#: port counters that move with traffic, not errors
_TRAFFIC = ("_data", "_packets", "_wait", "lifespan")


def _port_errors(counters: dict | None) -> list[tuple[str, Any]]:
    return [(k.split("/", 1)[-1], v) for k, v in sorted((counters or {}).items())
            if v and not k.endswith(_TRAFFIC)]


def _weekly(rows: list[dict]) -> tuple[list[dict], list[str]]:
    """Cause events per ISO week as one row per week and one column per fault (kind and code)."""
    by_week: dict[str, dict[str, int]] = defaultdict(dict)
    kinds: set[str] = set()
    for r in rows:
        label = r["kind"] + (f" {r['code']}" if r.get("code") is not None else "")
        kinds.add(label)
        by_week[r["week"]][label] = by_week[r["week"]].get(label, 0) + int(r["events"])
    weeks = [{"week": w, "counts": c, "total": sum(c.values())} for w, c in sorted(by_week.items(), reverse=True)]
    return weeks, sorted(kinds)
