"""secrets.py: the one place that takes credentials out of what may be said."""

from __future__ import annotations

import base64
import json
import logging

from attribution.secrets import MASK, Masker, hide_urls_in_logs, origin


def test_every_form_of_a_credential_is_masked_and_nothing_else():
    token = "s3cr3t/t0ken+with=signs"
    m = Masker.of(token, None, "")
    b64 = base64.b64encode(token.encode()).decode()
    for said in (token, json.dumps(token).replace("/", "\\/"), "t=s3cr3t%2Ft0ken%2Bwith%3Dsigns",
                 "s3cr3t/t0ken%2Bwith%3Dsigns", b64):
        out = m.mask(f"answer: {said}.")
        assert "s3cr3t" not in out and "t0ken" not in out and b64 not in out and MASK in out, (said, out)
    assert m.mask("HTTP 500: internal error") == "HTTP 500: internal error"
    assert Masker.of().mask("x") == "x" and Masker.of("  ").forms == ()


def test_a_secret_url_is_masked_whole_and_by_its_path_and_its_password():
    m = Masker.of("https://bot:pa55w0rd@hooks.slack.example/services/T01/B02/xyz?k=v")
    assert m.mask("POST https://bot:pa55w0rd@hooks.slack.example/services/T01/B02/xyz?k=v") == f"POST {MASK}"
    assert m.mask("404 for /services/T01/B02/xyz") == f"404 for {MASK}"
    assert m.mask("password pa55w0rd, k=v") == f"password {MASK}, {MASK}"
    assert "hooks.slack.example" in m.mask("connect to hooks.slack.example failed")  # the host is no secret


def test_maskers_add_up():
    assert (Masker.of("aaaa1") + Masker.of("bbbb2")).mask("aaaa1 bbbb2") == f"{MASK} {MASK}"


def test_origin_is_scheme_host_and_port_only():
    assert origin("https://u:p@hooks.example:8443/a/b?c=d#e") == "https://hooks.example:8443"
    assert origin("http://[::1]:9/x") == "http://[::1]:9"
    assert origin("hooks.example/x") == "(not a URL)" and origin("http://h:99999999/") == "(a URL that does not parse)"


def test_an_http_clients_log_records_name_origins(caplog):
    hide_urls_in_logs("tests.fake_http_client")
    hide_urls_in_logs("tests.fake_http_client")  # idempotent
    log = logging.getLogger("tests.fake_http_client")
    assert len(log.filters) == 1
    with caplog.at_level(logging.INFO, logger="tests.fake_http_client"):
        log.info('HTTP Request: %s %s "%s %d %s"', "POST", "https://hooks.example/services/T/B/secret", "HTTP/1.1",
                 500, "Internal Server Error")
    assert caplog.records[0].getMessage() == ('HTTP Request: POST https://hooks.example "HTTP/1.1 500 Internal '
                                              'Server Error"')
