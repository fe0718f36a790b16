"""The dashboard's URLs. A name goes into a path as one percent-encoded segment (`/` as `%2F`, `?` as `%3F`, any
character a name may hold: attribution/names.py); the service's routes take it back whole
(attribution/api/segments.py)."""

from __future__ import annotations

from urllib.parse import quote, urlencode


def segment(name: str) -> str:
    return quote(str(name), safe="")


def url_job(cluster: str, job_id: str, start: str | None = None, part: str = "") -> str:
    """The job's page (or one of its parts, e.g. `timeline`); `start` picks one of several jobs with this id."""
    url = f"/ui/jobs/{segment(cluster)}/{segment(job_id)}" + (f"/{part}" if part else "")
    return url + (f"?{urlencode({'start': start})}" if start else "")


def url_node(cluster: str, node: str) -> str:
    return f"/ui/nodes/{segment(cluster)}/{segment(node)}"


class DashboardLinks:
    """The links of the fleet report's names, when the dashboard serves it (reports.fleet_page.Links)."""

    def node(self, cluster: str, node: str) -> str:
        return url_node(cluster, node)

    def job(self, cluster: str, job_id: str, start: str | None = None) -> str:
        return url_job(cluster, job_id, start)
