"""Every error-looking line of the real-world corpus (tests/realworld) is read by a rule or set aside by an
`ignore:` entry of the pack: `attribution rules suggest`, mined over every bundle's kept lines as it mines stored
jobs (rules/replay/error-lines.txt, Drain templates, attribution.replay.suggest), finds no template in more than
two jobs. A wording the pack recognises only because the job state happened to give the right verdict shows up
here as soon as a third job prints it.
"""

from __future__ import annotations

from attribution.collect.bundle import collect_bundle
from attribution.replay.keep import pack_errorlike
from attribution.replay.suggest import mine, unmatched
from attribution.scope.bundle import load_context

from tests.conftest import bundles
from tests.test_realworld import REALWORLD

#: `rules suggest --min-jobs`: a template seen in this many jobs is a rule (or an ignore entry) to write.
MIN_JOBS = 3


def _observations(ruleset):
    """(bundle name, its error-looking observations) of every real-world bundle, as suggest collects them."""
    errorlike = pack_errorlike(ruleset)
    for bundle in bundles(REALWORLD):
        observations, _ = collect_bundle(bundle, load_context(bundle / "context.yaml"), lambda _source: errorlike)
        yield bundle.name, observations


def _unmatched_lines(pack, ruleset):
    return [u for name, obs in _observations(ruleset) for u in unmatched(pack, obs, name, 1.0, False)]


def test_no_error_looking_template_of_the_corpus_is_left_to_the_job_state(ruleset):
    templates = mine(_unmatched_lines(ruleset, ruleset), MIN_JOBS)
    report = [f"[{t.source}] {t.template}  ({len(t.jobs)} jobs: {', '.join(sorted(t.jobs))}; e.g. "
              f"{t.examples[0].location}: {t.examples[0].line[:160]!r})" for t in templates]
    assert not report, "no rule matches or ignores:\n" + "\n".join(report)


class _NoRules:
    """A pack without rules or ignore entries: every error-looking line is unmatched."""

    def matching(self, source, text):
        return []

    def ignoring(self, source, text):
        return []


def test_the_corpus_has_error_looking_lines_to_check(ruleset):
    """The test above is not vacuous: the corpus has error-looking lines, most of them read by rules, and the
    same mining finds recurring templates among them when the rules are left out."""
    kept = sum(len(obs) for _, obs in _observations(ruleset))
    left = _unmatched_lines(ruleset, ruleset)
    assert kept > 200 and len(left) < kept / 2, (kept, len(left))
    assert len(mine(_unmatched_lines(_NoRules(), ruleset), MIN_JOBS)) >= 10
