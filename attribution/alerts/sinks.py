"""Delivering an alert: the body each kind of sink expects, its text escaped for that sink, and the POST, within the
sink's timeout; a failure is a SinkError whose message has no credential in it.

- webhook: `{"event", "key", "summary", "labels", "details", "link"}` as JSON (optionally with a bearer token);
  JSON needs no escaping beyond its own;
- slack: an incoming webhook's `{"text": ...}`, with `&`, `<` and `>` escaped as Slack's message formatting asks
  (a node named `<!channel>` mentions nobody, `<url|text>` in a job's name links nowhere); the one link is ours;
- alertmanager: `POST <url>/api/v2/alerts` with one alert (labels, annotations, startsAt, generatorURL), as
  Alertmanager's API v2 documents it (JSON); Alertmanager groups and de-duplicates further by its labels.

A URL or a token read from a `*_file` setting is a credential: messages name the sink and where it is
(attribution.secrets.origin, or the file), and every error text passes through the sink's Masker.
"""

from __future__ import annotations

from datetime import datetime, timezone

import httpx

from attribution.alerts.messages import Alert
from attribution.config.alerts import SinkSettings
from attribution.errors import ConfigError
from attribution.secrets import Masker, hide_urls_in_logs, read_secret

UTC = timezone.utc


class SinkError(Exception):
    pass


def slack_escape(text: str) -> str:
    """Text Slack shows as written: its three control characters as the entities Slack documents."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_text(alert: Alert) -> str:
    text = slack_escape(alert.summary)
    if alert.link:
        # the link's URL escaped like text, and '|' (which would end the URL) percent-encoded
        text += f"\n<{slack_escape(alert.link).replace('|', '%7C')}|open in the dashboard>"
    return text


def request_for(sink: SinkSettings, alert: Alert, at: datetime, url: str, token: str | None) -> tuple[str, object,
                                                                                                     dict]:
    """(url, JSON body, headers) of the POST that delivers `alert` (decided at `at`) to `sink`. Pure."""
    headers = {"User-Agent": "attribution-alerts"}
    if sink.type == "slack":
        return url, {"text": slack_text(alert)}, headers
    if sink.type == "alertmanager":
        name = "AttributionInfrastructureVerdict" if alert.event == "verdict" else "AttributionDrainDecision"
        body = [{"labels": {"alertname": name, **{k: str(v) for k, v in alert.labels.items()}},
                 "annotations": {"summary": alert.summary,
                                 "description": str(alert.details.get("explanation") or alert.details.get("reason")
                                                    or "")},
                 "startsAt": at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
                 **({"generatorURL": alert.link} if alert.link else {})}]
        return url.rstrip("/") + "/api/v2/alerts", body, headers
    if token:
        headers["Authorization"] = "Bearer " + token
    return url, alert.as_dict(), headers


def deliver(sink: SinkSettings, alert: Alert, at: datetime) -> None:
    """POST `alert` to `sink`; SinkError (its message masked) when the sink did not take it."""
    what = f"{sink.id} ({sink.type}, {sink.where()})"
    try:
        url = sink.url or read_secret(sink.url_file or "")
        token = read_secret(sink.token_file) if sink.token_file and sink.type == "webhook" else None
    except ConfigError as exc:  # names the file, never what is in it
        raise SinkError(f"{what}: {exc}") from None
    mask = Masker.of(url, token)
    hide_urls_in_logs("httpx")
    url, body, headers = request_for(sink, alert, at, url, token)
    try:
        r = httpx.post(url, json=body, headers=headers, timeout=sink.timeout_seconds)
    except httpx.HTTPError as exc:
        raise SinkError(mask.mask(f"{what}: {type(exc).__name__}: {exc}")) from None
    except httpx.InvalidURL as exc:  # before any request
        raise SinkError(mask.mask(f"{what}: {type(exc).__name__}: {exc}")) from None
    if r.status_code >= 300:
        raise SinkError(mask.mask(f"{what}: HTTP {r.status_code}: {r.text.strip()[:200]}"))
