"""correlate.digest: symptoms folded as they stream give the verdict the whole event list gives.

The reference is correlation over every event of the bundle at once (what the store's attribution runs); the one
diagnosis (pipeline.diagnose, which the incident, case and real-world tests hold to their expected verdicts) folds
symptoms as they stream, and its verdict must be the same document with its symptom list cut at the listed number,
whatever that number, and whether or not it keeps every event.
"""

from __future__ import annotations

import pytest

from attribution.correlate.digest import SymptomDigest
from attribution.correlate.rootcause import correlate
from attribution.pipeline.diagnose import diagnose_bundle
from attribution.reports.render import render_text, verdict_to_dict

from tests.conftest import CASES, INCIDENTS, ROOT, bundles
from tests.correlate.test_rootcause import CTX, ev

ALL = bundles(INCIDENTS) + bundles(CASES) + bundles(ROOT / "tests" / "realworld")


@pytest.mark.parametrize("bundle", ALL, ids=lambda p: p.name)
def test_a_folded_bundle_gives_the_same_verdict(ruleset, bundle):
    d = diagnose_bundle(ruleset, bundle)  # every event kept
    full = correlate(ruleset, d.context, list(d.events), list(d.coverage))
    for listed in (0, 2, 1000):
        for keep in (True, False):
            folded = diagnose_bundle(ruleset, bundle, listed, keep_events=keep).verdict
            assert verdict_to_dict(folded, symptom_limit=listed) == verdict_to_dict(full, symptom_limit=listed), \
                (listed, keep)
            assert render_text(folded) == render_text(full)


def _both(ruleset, events, listed):
    d = SymptomDigest(ruleset.graph, CTX, listed)
    d.extend(events)
    return correlate(ruleset, CTX, events), correlate(ruleset, CTX, (), digest=d)


def test_folded_symptoms_still_break_a_tie_between_causes_of_one_second(ruleset):
    """docs/verdict.md: a tie at the same second goes to the cause that explains more symptoms. The symptoms
    that decide it are folded (none listed), and decide it all the same."""
    for node, gpu in (("a", "0000:01:00"), ("b", "0000:02:00")):
        off_bus = ev(ruleset, "gpu_fallen_off_bus", "a", 0.6, gpu="0000:01:00")
        remap = ev(ruleset, "gpu_row_remap_failure", "b", 0.2, gpu="0000:02:00")
        symptoms = [ev(ruleset, "gpu_lost_reported", node, 1 + i, gpu=gpu) for i in range(3)]
        full, folded = _both(ruleset, [off_bus, remap] + symptoms, 0)
        assert full.root_cause.node == folded.root_cause.node == node
        assert folded.symptoms == () and folded.symptoms_total == len(full.symptoms)
        assert verdict_to_dict(folded, symptom_limit=0) == verdict_to_dict(full, symptom_limit=0)


def test_a_hint_from_folded_symptoms_names_the_first_gpu_of_each_node(ruleset):
    ecc = [ev(ruleset, "cuda_ecc_error", "c", 20 - i, gpu=f"0000:{i:02x}:00") for i in range(5)]
    net = [ev(ruleset, "nccl_ib_completion_error", "a", i) for i in range(5)]
    full, folded = _both(ruleset, ecc + net, 1)
    assert full.culprits == folded.culprits == (("c", "0000:04:00"),)
    assert folded.explanation == full.explanation
    assert [s.event for s in folded.symptoms] == [s.event for s in full.symptoms[:1]]


def test_the_listed_symptoms_are_the_first_in_verdict_order(ruleset):
    root = ev(ruleset, "gpu_fallen_off_bus", "a", 0, gpu="0000:01:00", code=79)
    symptoms = [ev(ruleset, "nccl_error", "abc"[i % 3], 100 - i) for i in range(50)]
    full, folded = _both(ruleset, [root] + symptoms[::-1], 7)
    assert folded.symptoms == full.symptoms[:7]
    assert folded.symptoms_total == 50
    assert verdict_to_dict(folded)["symptom_groups"] == verdict_to_dict(full)["symptom_groups"]
