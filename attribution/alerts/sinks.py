"""Delivering an alert: the body each kind of sink expects, and the POST, within the sink's timeout.

- webhook: `{"event", "key", "summary", "labels", "details", "link"}` as JSON (optionally with a bearer token);
- slack: an incoming webhook's `{"text": ...}`;
- alertmanager: `POST <url>/api/v2/alerts` with one alert (labels, annotations, startsAt, generatorURL), as
  Alertmanager's API v2 documents it; Alertmanager groups and de-duplicates further by its labels.
"""

from __future__ import annotations

from datetime import datetime, timezone

from attribution.alerts.messages import Alert
from attribution.config.alerts import SinkSettings

UTC = timezone.utc


class SinkError(Exception):
    pass


def request_for(sink: SinkSettings, alert: Alert, now: datetime) -> tuple[str, dict, dict]:
    """(url, JSON body, headers) of the POST that delivers `alert` to `sink`. Pure apart from reading secrets."""
    from attribution.config import read_secret

    url = sink.url or read_secret(sink.url_file).strip()
    headers = {"User-Agent": "attribution-alerts"}
    if sink.type == "slack":
        text = alert.summary + (f"\n<{alert.link}|open in the dashboard>" if alert.link else "")
        return url, {"text": text}, headers
    if sink.type == "alertmanager":
        name = "AttributionInfrastructureVerdict" if alert.event == "verdict" else "AttributionDrainDecision"
        body = [{"labels": {"alertname": name, **{k: str(v) for k, v in alert.labels.items()}},
                 "annotations": {"summary": alert.summary,
                                 "description": str(alert.details.get("explanation") or alert.details.get("reason")
                                                    or "")},
                 "startsAt": now.astimezone(UTC).isoformat().replace("+00:00", "Z"),
                 **({"generatorURL": alert.link} if alert.link else {})}]
        return url.rstrip("/") + "/api/v2/alerts", body, headers
    if sink.token_file:
        headers["Authorization"] = "Bearer " + read_secret(sink.token_file).strip()
    return url, {"event": alert.event, "key": alert.key, "summary": alert.summary, "labels": dict(alert.labels),
                 "details": dict(alert.details), "link": alert.link}, headers


def deliver(sink: SinkSettings, alert: Alert, now: datetime) -> None:
    import httpx

    url, body, headers = request_for(sink, alert, now)
    try:
        r = httpx.post(url, json=body, headers=headers, timeout=sink.timeout_seconds)
    except httpx.HTTPError as exc:
        raise SinkError(f"{sink.type} {url}: {type(exc).__name__}: {exc}") from None
    if r.status_code >= 300:
        raise SinkError(f"{sink.type} {url}: HTTP {r.status_code}")
