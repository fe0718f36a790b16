"""The dashboard's pages under /ui/, rendered on the server from the store.

    /                                 leads to /ui/
    /ui/jobs                          the job list: filters (cluster, outcome, node, user, time range), paging
    /ui/jobs/{cluster}/{job}?start=   one job: the verdict, the counter changes that became evidence, its
                                      symptoms and coverage gaps, its timeline chart
    /ui/jobs/{cluster}/{job}/timeline the job's whole timeline page (what happened in order of cause, every source)
    /ui/nodes/{cluster}/{node}        one node: recurring faults, fault events by week, failed jobs, telemetry
                                      counters and counter events, drains
    /ui/fleet                         the fleet report, live
    /ui/drain                         the drain candidates with their evidence
    /ui/assets/vega-<digest>.js       the chart library, cached by the browser (attribution.web.assets)

Every page but the login form needs a session (attribution.web.session); without one it sends the browser to
the login form and back. Filters, cursors and job start times live in the URL, so a link or a reload shows the
same page; names are percent-encoded path segments (attribution.web.urls) checked against the rule of
attribution/names.py. The essentials are plain HTML; only the charts use JavaScript (no CDN).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from attribution import names
from attribution.api.segments import from_segment
from attribution.api.service import Service
from attribution.errors import InputError
from attribution.store import browse
from attribution.timeparse import TimeError, format_utc, parse_iso, parse_when
from attribution.web import views
from attribution.web.assets import CACHE, PREFIX, ChartLibrary
from attribution.web.session import COOKIE, PATH, Sessions
from attribution.web.urls import DashboardLinks, url_job, url_node

UTC = timezone.utc
PAGE_SIZE = 50
#: The outcome filter's choices: "" is any; a job list opened without a filter shows the failed jobs.
OUTCOMES = ("failed", "", "gpu_hardware", "nvlink", "nvswitch_fabric", "network", "host", "application",
            "scheduler", "unknown", "none")
FORM_BYTES = 4096
#: Pages without charts run no script at all; chart pages run their own inline scripts and the chart library
#: from this service (attribution.web.assets).
CSP_PLAIN = ("default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
             "form-action 'self'; base-uri 'none'; frame-ancestors 'self'")
CSP_CHARTS = ("default-src 'none'; script-src 'self' 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
              "img-src data: blob:; base-uri 'none'; form-action 'self'; frame-ancestors 'self'")


def when(value: Any) -> str:
    """An ISO 8601 time as the pages print it: `2026-04-09 16:40:52Z`."""
    if not value:
        return ""
    try:
        return parse_iso(str(value)).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    except (TimeError, ValueError):
        return str(value)


def _templates():
    from jinja2 import ChainableUndefined, Environment, PackageLoader, select_autoescape

    from attribution.reports.palette import outcome_class
    from attribution.reports.render import followed_text
    from attribution.reports.shell import CSS

    env = Environment(loader=PackageLoader("attribution.web", "templates"), autoescape=select_autoescape(["html"]),
                      undefined=ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
    env.globals.update(css=CSS, when=when, url_job=url_job, url_node=url_node, num=views.num,
                       yes=views.yes, port_errors=views.port_errors, outcome_class=outcome_class,
                       followed=followed_text)
    return env


def _safe_next(value: str | None) -> str:
    """Where to go after signing in: a dashboard path of this service, never another site."""
    if value and value.startswith("/ui/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/ui/jobs"


def _path_name(value: str, what: str, problem_of) -> tuple[str, str | None]:
    """A name from the path (one segment, `%2F` a slash in it) and why it is no name, if it is not one."""
    name = from_segment(value)
    problem = problem_of(name)
    return name, None if problem is None else f"Not a {what} name ({problem})."


def add_web_routes(app: FastAPI, svc: Service) -> None:
    from attribution.reports.palette import Palette

    env = _templates()
    sessions = Sessions(svc.tokens)
    library = ChartLibrary()
    palette = Palette.of(svc.ruleset.kinds)
    # the chart library is made when the worker starts (app.py's lifespan runs app.state.warm in a thread), so
    # the first chart page does not wait for it
    app.state.warm = [*getattr(app.state, "warm", []), library.warm]

    def page(name: str, status: int = 200, csp: str = CSP_PLAIN, **values) -> HTMLResponse:
        html = env.get_template(name).render(signed_in=values.pop("signed_in", True), **values)
        return HTMLResponse(html, status_code=status, headers=_headers(csp))

    def signed_in(request: Request) -> None:
        if sessions.principal(request.cookies.get(COOKIE)) is None:
            raw = request.scope.get("raw_path")  # as the browser sent it: names keep their %2F
            path = raw.decode("latin-1") if raw else request.url.path
            target = path + (f"?{request.url.query}" if request.url.query else "")
            raise HTTPException(303, "sign in first", headers={"Location": "/ui/login?" + urlencode({"next": target})})

    async def on_db(fn, *args):
        def work():
            with svc.engine.connect() as conn:
                return fn(conn, *args)
        return await svc.db.run(work)

    def not_found(message: str) -> HTMLResponse:
        return page("error.html", 404, title="Not found", page="error", message=message)

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        return Response(status_code=204)  # no icon; a 404 would be a console error on every page

    @app.get("/", include_in_schema=False)
    @app.get("/ui", include_in_schema=False)
    @app.get("/ui/", include_in_schema=False)
    async def home() -> Response:
        return RedirectResponse("/ui/jobs", status_code=303)

    @app.get(PREFIX + "vega-{digest}.js", include_in_schema=False)
    async def chart_library(request: Request, digest: str) -> Response:
        script = await svc.cpu.run(library.script)
        if digest != script.digest:
            return Response("not this version of the chart library", status_code=404, media_type="text/plain")
        headers = {"Cache-Control": CACHE, "X-Content-Type-Options": "nosniff", "Vary": "Accept-Encoding"}
        if "gzip" in request.headers.get("accept-encoding", ""):
            return Response(script.gzipped, media_type="text/javascript; charset=utf-8",
                            headers={**headers, "Content-Encoding": "gzip"})
        return Response(script.text, media_type="text/javascript; charset=utf-8", headers=headers)

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
        from attribution.reports.timeline_data import build_timeline
        from attribution.reports.timeline_page import chart_page_scripts, chart_section

        doc = found.document
        j = doc.get("job") or {}
        script = await svc.cpu.run(library.script)

        def chart() -> tuple[str, str]:
            tl = build_timeline(doc, found.events)
            return chart_section(tl), chart_page_scripts(tl, palette, script_src=script.url)

        section, scripts = await svc.cpu.run(chart)

        def owner_section() -> dict:  # the AdminComment line, the requeue plan, what was done (job_actions:)
            from attribution.pipeline.jobactions import job_plan

            with svc.engine.connect() as c:
                return job_plan(svc.ruleset, c, str(j.get("cluster")), str(j.get("job_id")), doc)

        acted = await svc.db.run(owner_section)
        return page("job.html", csp=CSP_CHARTS, title=f"Job {j.get('job_id')}", page="job", doc=doc, acted=acted,
                    other_starts=[format_utc(s) for s in found.starts], symptom_groups=views.symptom_groups(doc),
                    counter_evidence=views.counter_evidence(found.events, doc),
                    gaps=[c for c in doc.get("coverage") or [] if c.get("status") != "ok"],
                    timeline_url=url_job(j.get("cluster"), j.get("job_id"), j.get("start"), part="timeline"),
                    timeline_section=section, chart_scripts=scripts)

    @app.get("/ui/jobs/{cluster}/{job_id}/timeline", include_in_schema=False)
    async def job_timeline(request: Request, cluster: str, job_id: str, start: str | None = None) -> HTMLResponse:
        signed_in(request)
        found = await _stored(cluster, job_id, start)
        if isinstance(found, HTMLResponse):
            return found
        from attribution.reports.timeline_data import build_timeline
        from attribution.reports.timeline_page import chart_page_scripts, timeline_body, timeline_title

        script = await svc.cpu.run(library.script)

        def whole() -> tuple[str, str, str]:
            tl = build_timeline(found.document, found.events)
            return timeline_title(tl), timeline_body(tl), chart_page_scripts(tl, palette, script_src=script.url)

        title, body, scripts = await svc.cpu.run(whole)
        return page("chart_page.html", csp=CSP_CHARTS, title=title, page="job", body=body, chart_scripts=scripts)

    async def _stored(cluster: str, job_id: str, start: str | None):
        from attribution.store.reports import stored_job

        cluster, problem = _path_name(cluster, "cluster", names.system_name_problem)
        job_id, problem = (job_id, problem) if problem else _path_name(job_id, "job", names.text_problem)
        if problem:
            return not_found(problem)
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
        cluster, problem = _path_name(cluster, "cluster", names.system_name_problem)
        node, problem = (node, problem) if problem else _path_name(node, "node", names.system_name_problem)
        if problem:
            return not_found(problem)
        days = min(max(days, 1), 3660)
        h = await on_db(browse.node_history, cluster, node, datetime.now(UTC), days)
        weeks, kinds = views.weekly(h["faults_weekly"], h["since"], h["until"])
        return page("node.html", title=f"Node {node}", page="node", h=h, weeks=weeks, kinds=kinds,
                    max_total=max([w["total"] for w in weeks if not w.get("quiet")] or [1]), bar_width=160,
                    jobs_url="/ui/jobs?" + urlencode({"cluster": cluster, "node": node, "outcome": "failed"}))

    @app.get("/ui/fleet", include_in_schema=False)
    async def fleet(request: Request, weeks: int = 8) -> HTMLResponse:
        signed_in(request)
        from attribution.reports.fleet_page import fleet_parts
        from attribution.reports.shell import chart_scripts
        from attribution.store.reports import fleet_data

        weeks = min(max(weeks, 1), 104)
        data = await svc.db.run(lambda: fleet_data(svc.engine, weeks=weeks))
        script = await svc.cpu.run(library.script)
        parts = await svc.cpu.run(lambda: fleet_parts(data, palette, DashboardLinks()))
        return page("chart_page.html", csp=CSP_CHARTS, title=parts.title, page="fleet", body=parts.body,
                    chart_scripts=chart_scripts(parts.specs, templates=parts.templates, script_src=script.url))

    @app.get("/ui/drain", include_in_schema=False)
    async def drain(request: Request) -> HTMLResponse:
        signed_in(request)
        from attribution.store import reads

        rows, _ = await on_db(reads.view_rows, "drain_candidates", {}, "score DESC NULLS LAST, cluster, node", 1000)
        return page("drain.html", title="Drain candidates", page="drain", rows=rows)


def _time(q, name: str) -> datetime | None:
    """A filter's time, read as the command line and the API read one (`now-7d`, `7d`, `yesterday`, ISO 8601)."""
    value = q.get(name)
    if not value:
        return None
    try:
        return parse_when(value, datetime.now(UTC))
    except TimeError as exc:
        raise InputError(name, str(exc)) from None


def _headers(csp: str) -> dict[str, str]:
    return {"Content-Security-Policy": csp, "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff",
            "Cache-Control": "no-store"}
