"""alerts/sinks.py against real HTTP servers on loopback: Slack's text escaped so that names in it do nothing, the
JSON sinks given the names as they are, and a Slack URL or webhook token read from a file never in the error, the
command's output or a log line, whether the sink refuses the connection, answers 500 echoing the request, or
never answers."""

from __future__ import annotations

import json
import logging
import traceback
from datetime import datetime, timezone

import pytest
import yaml
from click.testing import CliRunner

from attribution.alerts.messages import Alert, verdict_alert
from attribution.alerts.sinks import SinkError, deliver, request_for, slack_text
from attribution.cli import main
from attribution.config.alerts import SinkSettings

from tests.harness.receiver import Receiver, failing, secret_file

AT = datetime(2027, 1, 20, 12, 0, tzinfo=timezone.utc)
HOSTILE = {"id": 7, "cluster": "c&<!channel>", "job_id": "42", "outcome": "nvlink", "action": "drain_node",
           "confidence": 0.9, "root_kind": "nvlink_error", "root_code": 74, "root_node": "<https://evil.example|x>",
           "culprit_nodes": ["<https://evil.example|x>"], "culprit_evidence": ["system"],
           "explanation": "NVLink error <!here>", "current": True}
PATH = "/services/T0AB12CD3/B0EF45GH6/s3cr3tW3bh00kPathXyZ"
TOKEN = "tok-9f8e7d6c5b4a39281706f5e4d3c2b1a0"


def test_slack_text_escapes_what_slack_would_read_as_a_mention_or_a_link():
    alert = verdict_alert(HOSTILE, "https://dash.example/ui?a=1&b=2|x")
    text = slack_text(alert)
    assert "<!channel>" not in text and "<https://evil" not in text and "<!here>" not in text
    assert "c&amp;&lt;!channel&gt;/&lt;https://evil.example|x&gt;: nvlink_error 74" in text
    # one link, ours: its URL escaped too, the '|' that would end it percent-encoded
    assert text.count("<") == 1 and text.count(">") == 1
    assert text.endswith("\n<https://dash.example/ui?a=1&amp;b=2%7Cx/jobs/c%26%3C%21channel%3E/42|open in the "
                          "dashboard>")
    assert slack_text(Alert("drain", "k", "a < b & c > d")) == "a &lt; b &amp; c &gt; d"


def test_slack_gets_the_escaped_text_and_the_json_sinks_the_names_as_they_are():
    r = Receiver()
    try:
        alert = verdict_alert(HOSTILE, None)
        for sink in (SinkSettings(type="slack", url=r.url + "/slack"), SinkSettings(type="webhook", url=r.url + "/w"),
                     SinkSettings(type="alertmanager", url=r.url)):
            deliver(sink, alert, AT)
        assert r.posts["/slack"] == [{"text": slack_text(alert)}]
        assert r.posts["/w"][0]["labels"]["cluster"] == "c&<!channel>"
        [am] = r.posts["/api/v2/alerts"]
        assert am[0]["labels"]["node"] == "<https://evil.example|x>" and am[0]["startsAt"] == "2027-01-20T12:00:00Z"
    finally:
        r.close()


def test_the_webhook_body_is_the_alert_and_its_token_a_bearer_header():
    alert = Alert("drain", "drain:c:n:applied", "drain applied: c/n", {"node": "n"}, {"reason": "r"})
    url, body, headers = request_for(SinkSettings(type="webhook", url="http://x/h"), alert, AT, "http://x/h", TOKEN)
    assert url == "http://x/h" and body == alert.as_dict() and headers["Authorization"] == f"Bearer {TOKEN}"
    assert Alert.from_dict(json.loads(json.dumps(body))) == alert


def _secret_free(text: str) -> None:
    for secret in ("s3cr3tW3bh00k", "T0AB12CD3", "B0EF45GH6", TOKEN, TOKEN[4:20]):
        assert secret not in text, text


@pytest.mark.parametrize("how", ["refused", "500", "timeout"])
def test_a_failing_sink_never_says_its_url_or_token(how, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)  # every library's log line, httpx's "HTTP Request: POST <url>" among them
    expect = {"refused": "ConnectError", "500": "HTTP 500", "timeout": "ReadTimeout"}[how]
    with failing(how, [PATH, "/hook"]) as (base, receiver):
        url_file = secret_file(tmp_path, "slack-url", base + PATH)
        token_file = secret_file(tmp_path, "token", TOKEN)
        sinks = [SinkSettings(type="slack", url_file=url_file, timeout_seconds=0.5),
                 SinkSettings(type="webhook", url=base + "/hook", token_file=token_file, timeout_seconds=0.5)]
        for sink in sinks:
            with pytest.raises(SinkError) as exc:
                deliver(sink, verdict_alert(HOSTILE, None), AT)
            said = str(exc.value) + repr(exc.value) + "".join(traceback.format_exception(exc.value))
            assert expect in said, said
            _secret_free(said)
        if how == "500":  # the server did echo them: the masked error still says what it answered
            assert receiver.hits == {PATH: 1, "/hook": 1} and "[secret]" in str(exc.value)
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump({"alerts": {"sinks": [
            {"type": "slack", "url_file": url_file, "timeout_seconds": 0.5},
            {"type": "webhook", "url": base + "/hook", "token_file": token_file, "timeout_seconds": 0.5}]}}))
        r = CliRunner().invoke(main, ["--config", str(config), "alerts", "test"])
    assert r.exit_code == 3 and r.stderr.count(expect) == 2, r.output
    _secret_free(r.stdout + r.stderr + repr(r.exception))
    _secret_free("\n".join(rec.getMessage() for rec in caplog.records))
    if how == "500":
        assert any(rec.name == "httpx" for rec in caplog.records)  # it did log the requests, with origins


def test_a_credentials_file_that_cannot_be_read_is_a_sink_error_naming_the_file(tmp_path):
    with pytest.raises(SinkError, match=r"slack \(slack, url_file .*/nope\): .*nope: credentials file does not"):
        deliver(SinkSettings(type="slack", url_file=str(tmp_path / "nope")), Alert("drain", "k", "s"), AT)
