"""rulepack.cache: the rule pack compiled once and kept on disk for the central commands, the controller's epilog
and the service; a cached pack gives the loaded pack's verdicts, a changed pack a new entry, an entry others could
write is never unpickled."""

from __future__ import annotations

import io
import pickle

from attribution.rulepack import cache
from attribution.rulepack.load import load_rules
from tests.conftest import INCIDENTS, ROOT, bundles


def test_the_cached_pack_gives_the_same_verdicts_as_the_loaded_one(tmp_path):
    from attribution.pipeline.diagnose import diagnose_bundle
    from attribution.reports.render import verdict_to_dict

    loaded = load_rules(ROOT / "rules")
    assert cache.cached_rules(ROOT / "rules", tmp_path / "c") is not None  # a miss: loads and writes
    [entry] = (tmp_path / "c").glob("rules-*.pickle")
    cached = cache.cached_rules(ROOT / "rules", tmp_path / "c")
    assert isinstance(cached.prefilter("kernel")._rx, cache.LazyRegex)  # read from the cache, not compiled
    assert cached.version == loaded.version and len(cached.rules) == len(loaded.rules)
    cases = bundles(INCIDENTS)
    assert len(cases) >= 10
    for b in cases:
        assert verdict_to_dict(diagnose_bundle(cached, b).verdict) == verdict_to_dict(
            diagnose_bundle(loaded, b).verdict), b.name
    assert entry.exists()


def test_a_changed_pack_gets_a_new_entry_and_a_writable_one_is_not_trusted(tmp_path):
    pack = tmp_path / "rules"
    import shutil

    shutil.copytree(ROOT / "rules", pack)
    c = tmp_path / "c"
    cache.cached_rules(pack, c)
    [first] = c.glob("rules-*.pickle")
    kinds = pack / "kinds.yaml"
    kinds.write_text(kinds.read_text() + "\n# a comment changes the digest\n")
    rs = cache.cached_rules(pack, c)
    [second] = c.glob("rules-*.pickle")
    assert second != first and rs.root == str(pack)
    # an entry others may write is never unpickled: replace it with a pickle that would fail loudly
    buf = io.BytesIO()
    pickle.dump("not a rule set", buf)
    second.write_bytes(buf.getvalue())
    second.chmod(0o666)
    assert cache._read(second, pack) is None
    second.chmod(0o600)
    assert cache._read(second, pack) is None  # owned and private, but not a RuleSet: loaded from the pack instead
