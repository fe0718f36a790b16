"""replay.keep: the lines kept for replay are redacted before they are kept (extract.redact), whole before they
are cut to their bound, wherever they were read (a bundle's file, a connector's stream)."""

from __future__ import annotations

from attribution.replay.bounds import Limits
from attribution.replay.keep import LineKeeper

AWS = "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def _lines(doc: dict, key: str = "files") -> list[str]:
    return [ln[1] for f in doc.get(key, ()) for ln in f["lines"]]


def test_a_kept_line_holds_no_secret(ruleset):
    keeper = LineKeeper(ruleset)
    keeper.feed("job", None, "job/slurm-1.out",
                b"step 10 ok\nERROR: upload failed with " + AWS.encode() + b"\nfatal: password=hunter2 rejected\n")
    assert _lines(keeper.document()) == ["ERROR: upload failed with AWS_SECRET_ACCESS_KEY=[redacted:aws_secret_access_key]",
                                         "fatal: password=[redacted:password] rejected"]


def test_a_connector_stream_is_redacted_like_a_file(ruleset):
    keeper = LineKeeper(ruleset)
    tap = keeper.stream_tap("loki", "job", "g01", 'loki:{job="x"}', {"job": "x"})
    tap(b"error: token=ghp_JewM2MsfG7wzAbcg2CPoZwfFv6MIA1UmCkoB\n", 0, [1700000000000000000])
    assert _lines(keeper.document(), "streams") == ["error: token=[redacted:github_token]"]


def test_a_long_line_is_redacted_before_it_is_cut(ruleset):
    """Cut first, the token would be kept in part, too short for its pattern to find."""
    keeper = LineKeeper(ruleset, Limits(line_chars=30))
    keeper.feed("job", None, "job/slurm-1.out", b"error: ghp_JewM2MsfG7wzAbcg2CPoZwfFv6MIA1UmCkoB was refused\n")
    assert _lines(keeper.document()) == ["error: [redacted:github_token]"]
