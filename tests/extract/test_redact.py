"""extract.redact: the pack's redactions (rules/redactions.yaml) take every secret out of a line before a rule
matches it, whatever the kind, leave near-misses alone, change nothing when run again, and are checked by
`rules check` with the file and line of the pattern whose example fails."""

from __future__ import annotations

import shutil

import pytest

from attribution.extract.events import extract
from attribution.extract.redact import (check_examples, entropy, redact, redact_counted, redact_document,
                                        redact_event, redact_kept, redact_observation)
from attribution.model import Event, ExecutionContext, Observation
from attribution.pipeline.rulecheck import check_pack
from attribution.rulepack.load import load_rules

from tests.conftest import ROOT

CTX = ExecutionContext(cluster="c", job_id="7", nodes=("gpu01",), tasks_per_node=8)

#: issue 29's finding, line by line, and what each must become.
FINDING = [
    ("password=hunter2", "password=[redacted:password]"),
    ("DATABASE_URL=postgresql://app:s3cret@db:5432/x", "DATABASE_URL=postgresql://app:[redacted:url_password]@db:5432/x"),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
     "AWS_SECRET_ACCESS_KEY=[redacted:aws_secret_access_key]"),
    ("GITHUB_TOKEN=ghp_JewM2MsfG7wzAbcg2CPoZwfFv6MIA1UmCkoB", "GITHUB_TOKEN=[redacted:github_token]"),
]


@pytest.mark.parametrize("line, want", FINDING)
def test_the_four_secrets_of_the_finding_are_redacted(ruleset, line, want):
    assert redact(ruleset.redactions, line) == want


def test_every_kind_the_brief_names_has_a_pattern_with_examples(ruleset):
    kinds = {p.kind for p in ruleset.redactions.patterns}
    assert kinds >= {"password", "secret", "url_password", "aws_access_key_id", "aws_secret_access_key",
                     "gcp_api_key", "azure_account_key", "azure_sas_signature", "github_token", "gitlab_token",
                     "slack_token", "slack_webhook", "huggingface_token", "jwt", "authorization", "private_key",
                     "high_entropy_secret"}
    assert all(p.examples and p.no_match for p in ruleset.redactions.patterns)


def test_every_example_and_near_miss_of_the_pack_passes(ruleset):
    assert check_examples(ruleset) == []


def test_redacting_twice_gives_what_redacting_once_gave(ruleset):
    red = ruleset.redactions
    for p in red.patterns:
        for ex in p.examples:
            once = redact(red, ex.line)
            assert once != ex.line and redact(red, once) == once, p.id


def test_a_line_without_secrets_is_the_same_object(ruleset):
    line = "[E ProcessGroupNCCL.cpp:737] [Rank 9] Watchdog caught collective operation timeout"
    assert redact(ruleset.redactions, line) is line
    assert redact_counted(ruleset.redactions, line) == (line, {})


def test_the_count_is_per_kind_and_every_occurrence_is_redacted(ruleset):
    text, counts = redact_counted(ruleset.redactions, "password=a1 user=x password=b2 url=redis://:c3@h:1/0")
    assert text == "password=[redacted:password] user=x password=[redacted:password] url=redis://:[redacted:url_password]@h:1/0"
    assert counts == {"password": 2, "url_password": 1}


def test_entropy_is_bits_per_character():
    assert entropy("") == 0.0
    assert entropy("aaaa") == 0.0
    assert entropy("abcd") == 2.0


def test_a_rule_still_matches_the_redacted_line_and_the_event_carries_it(ruleset):
    """The exception line of a traceback (as the collector flags it) quoting a URL with its password: still a
    python_exception, and the event's line, message and captured detail hold no password."""
    text = "sqlalchemy.exc.ArgumentError: Could not parse SQLAlchemy URL from string 'postgresql://app:s3cret@db:5432/x'"
    obs = Observation(source="job", node="gpu01", location="job/out:4", text=text, line=f"[rank0]: {text}",
                      flags=frozenset({"traceback_exception"}))
    evs = extract(ruleset, CTX, [obs])
    assert [e.kind for e in evs] == ["python_exception"]
    ev = evs[0]
    assert "s3cret" not in ev.line + ev.message + "".join(map(str, ev.fields.values()))
    assert "postgresql://app:[redacted:url_password]@db:5432/x" in ev.fields["detail"]


def test_an_observation_or_event_without_a_secret_is_left_as_it_is(ruleset):
    obs = Observation(source="job", node=None, location="o:1", text="NCCL WARN x", line="NCCL WARN x")
    assert redact_observation(ruleset, obs) is obs
    ev = Event(kind="k", role="cause", rule="r", source="job", location="o:1", line="l", message="m")
    assert redact_event(ruleset, ev) is ev


def test_an_event_made_elsewhere_is_redacted_in_line_message_and_fields(ruleset):
    ev = Event(kind="k", role="cause", rule="r", source="job", location="o:1", line="password=hunter2",
               message="password=hunter2", fields={"detail": "token=ghp_JewM2MsfG7wzAbcg2CPoZwfFv6MIA1UmCkoB", "n": 3})
    out = redact_event(ruleset, ev)
    assert out.line == out.message == "password=[redacted:password]"
    assert out.fields == {"detail": "token=[redacted:github_token]", "n": 3}


def test_kept_evidence_and_verdict_documents_are_redacted_where_their_lines_are(ruleset):
    red = ruleset.redactions
    kept = {"format": 1, "files": [{"file": "job/x.out", "lines": [[3, "password=hunter2", "e"], [4, "ok", "p"]]}],
            "streams": [{"location": "loki:{}", "lines": [[1, "token: xoxb-3634485567431-2991411332045-XQuVesOgOZ1TvZVVAxhPRxs5", "e", 17]]}]}
    doc, counts = redact_kept(red, kept)
    assert doc["files"][0]["lines"] == [[3, "password=[redacted:password]", "e"], [4, "ok", "p"]]
    assert doc["streams"][0]["lines"] == [[1, "token: [redacted:slack_token]", "e", 17]]
    assert counts == {"password": 1, "slack_token": 1}
    verdict = {"explanation": "password=hunter2 in prose is not a line", "root_cause": {"line": "password=hunter2",
               "fields": {"detail": "password=hunter2"}}, "symptoms": [{"message": "password=x1"}]}
    doc, counts = redact_document(red, verdict)
    assert doc["explanation"] == verdict["explanation"]
    assert doc["root_cause"] == {"line": "password=[redacted:password]", "fields": {"detail": "password=[redacted:password]"}}
    assert doc["symptoms"] == [{"message": "password=[redacted:password]"}]
    assert counts == {"password": 3}


def test_a_pack_without_redactions_redacts_nothing(tmp_path):
    d = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", d)
    (d / "redactions.yaml").unlink()
    rs = load_rules(d)
    assert rs.redactions.matcher is None
    assert redact(rs.redactions, "password=hunter2") == "password=hunter2"


def _pack_with(tmp_path, old: str, new: str):
    d = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", d)
    f = d / "redactions.yaml"
    text = f.read_text()
    assert old in text
    f.write_text(text.replace(old, new, 1))
    return d, f


def test_rules_check_names_the_pattern_whose_example_is_not_redacted_as_written(tmp_path):
    d, f = _pack_with(tmp_path, "          span: 'hunter2'\n          ref: RECON a script echoing",
                      "          span: 'hunter'\n          ref: RECON a script echoing")
    problems, _ = check_pack(d)
    line = next(i for i, ln in enumerate(f.read_text().splitlines(), 1) if "id: redact.password.bare" in ln)
    assert any(p.path == str(f) and p.line == line and "redact.password.bare: example gives" in p.message
               for p in problems), problems


def test_rules_check_names_a_near_miss_that_is_redacted(tmp_path):
    d, f = _pack_with(tmp_path, "        - 'token_count=512'", "        - 'token_count=512 token=abc123'")
    problems, _ = check_pack(d)
    assert any("redact.secret.bare: near-miss redacted (secret)" in p.message for p in problems), problems


def test_the_entropy_threshold_is_the_pack_s(tmp_path, ruleset):
    line = "cache key: 9fceb02d0ae598e95dc970b74767f19372d61af8c0ffee0ddba11ad5eedfeed5"
    assert redact(ruleset.redactions, line) == line
    d, _ = _pack_with(tmp_path, "    min_entropy: 4.0", "    min_entropy: 3.0")
    assert redact(load_rules(d).redactions, line) == "cache key: [redacted:high_entropy_secret]"


def test_a_text_built_to_be_slow_is_redacted_whole_past_the_bound(ruleset):
    """More than MAX_MATCHES matches of one pattern in one text: the rest is redacted from there on, whole, so
    the time is bounded and nothing is kept."""
    from attribution.extract.redact import MAX_MATCHES

    text = " ".join(f"password=p{i:04d}" for i in range(MAX_MATCHES + 50))
    out, counts = redact_counted(ruleset.redactions, text)
    assert counts == {"password": MAX_MATCHES + 1}
    assert "p0" not in out and out.endswith("password=[redacted:password] [redacted:password]")
    assert redact(ruleset.redactions, out) == out


def test_a_pattern_anchored_at_the_start_finds_the_message_after_the_prefix(tmp_path):
    """One set pass over an observation's line and text together: a pattern with ^ still finds the text's start."""
    d = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", d)
    (d / "redactions.yaml").write_text(
        "type: redactions\npatterns:\n  - id: redact.local.start\n    kind: local\n"
        "    pattern: '^key-(?P<secret>\\w+)$'\n"
        "    examples: {redact: [{line: key-abc, span: abc}], keep: ['a key-abc']}\n")
    rs = load_rules(d)
    obs = Observation(source="job", node=None, location="o:1", text="key-abc", line="0: key-abc")
    out = redact_observation(rs, obs)
    assert (out.text, out.line) == ("key-[redacted:local]", "0: key-abc")
