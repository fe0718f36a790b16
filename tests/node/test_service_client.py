"""The hooks' client of the service: what counts as stored, what is worth retrying within the deadline, and what
the service refused for good (so the spool moves it aside instead of retrying it forever)."""

from __future__ import annotations

import time

import pytest

httpx = pytest.importorskip("httpx")  # a venv installed before the service's dependencies skips this module

from attribution.config import Settings
from attribution.errors import ConfigError
from attribution.node.service_client import ServiceClient, ServiceError, ServiceRejected, client_from_settings


def client_with(handler, **kw) -> ServiceClient:
    c = ServiceClient("http://service.test", "t" * 32, **kw)
    c._http = httpx.Client(base_url="http://service.test", transport=httpx.MockTransport(handler),
                           headers={"Authorization": f"Bearer {c.token}"})
    return c


def test_a_2xx_is_stored_and_the_token_is_sent():
    seen = []

    def handler(request):
        seen.append((request.url.path, request.headers["authorization"]))
        return httpx.Response(200, json={"verdict_changed": True})

    assert client_with(handler).post_observations({"type": "ingest"}) == {"verdict_changed": True}
    assert seen == [("/v1/observations", "Bearer " + "t" * 32)]


def test_a_busy_service_is_retried_while_time_remains():
    answers = iter([httpx.Response(503, json={"message": "busy"}, headers={"Retry-After": "0"}),
                    httpx.Response(200, json={})])
    assert client_with(lambda r: next(answers)).post_observations({}, deadline=time.monotonic() + 5) == {}


@pytest.mark.parametrize("status", [400, 413, 415, 422])
def test_a_payload_refused_for_good_raises_rejected_at_once(status):
    calls = []

    def handler(request):
        calls.append(1)
        return httpx.Response(status, json={"error": "x", "message": "events.0.role: bad"})

    with pytest.raises(ServiceRejected, match="events.0.role: bad") as e:
        client_with(handler).post_observations({})
    assert e.value.status == status and len(calls) == 1


@pytest.mark.parametrize("status", [401, 403, 500])
def test_auth_and_server_errors_keep_the_payload_for_later(status):
    with pytest.raises(ServiceError) as e:
        client_with(lambda r: httpx.Response(status, json={"message": "no"})).post_observations({})
    assert not isinstance(e.value, ServiceRejected)


def test_an_unreachable_service_gives_up_within_the_deadline():
    def handler(request):
        raise httpx.ConnectError("refused")

    t0 = time.monotonic()
    with pytest.raises(ServiceError, match="ConnectError"):
        client_with(handler).post_observations({}, deadline=time.monotonic() + 1.0)
    assert time.monotonic() - t0 < 1.5
    with pytest.raises(ServiceError, match="no time left"):
        client_with(handler).post_observations({}, deadline=time.monotonic())


def test_the_token_file_must_be_set_and_private(tmp_path):
    with pytest.raises(ConfigError, match="service_token_file"):
        client_from_settings(Settings(service_url="http://x"))
    f = tmp_path / "token"
    f.write_text("s" * 32 + "\n")
    f.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by others"):
        client_from_settings(Settings(service_url="http://x", service_token_file=str(f)))
    f.chmod(0o600)
    assert client_from_settings(Settings(service_url="http://x", service_token_file=str(f))).token == "s" * 32
