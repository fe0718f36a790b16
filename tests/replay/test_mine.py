"""The Drain template miner (attribution.replay.mine): each expected template worked out by hand from the
algorithm (ICWS 2017; drain3's defaults)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attribution.replay.mine import PARAM, Drain


def _mine(messages, **kw):
    d = Drain(**kw)
    ids = [d.add(m).id for m in messages]
    return ids, [(c.template, c.size) for c in d.clusters]


def test_messages_differing_in_parameters_share_a_template():
    ids, templates = _mine(["connected to 10.0.0.1", "connected to 192.168.0.1", "Hex number 0xDEADBEAF",
                            "user davidoh logged in", "user eranr logged in"])
    assert ids == [1, 1, 2, 3, 3]
    assert templates == [("connected to <*>", 2), ("Hex number 0xDEADBEAF", 1), ("user <*> logged in", 2)]


def test_a_message_joins_a_template_only_when_similar_enough():
    # same leaf (4 tokens, first token a): 1 of 4 tokens equal is below 0.4, 3 of 4 is above
    ids, templates = _mine(["a b c d", "a x y z", "a b c z"])
    assert ids == [1, 2, 1]
    assert templates == [("a b c <*>", 2), ("a x y z", 1)]


def test_messages_of_other_lengths_never_join():
    assert _mine(["disk full", "disk full now"])[1] == [("disk full", 1), ("disk full now", 1)]


def test_a_first_token_with_a_digit_routes_as_a_parameter():
    # 42 and 17 lead to the same leaf; 2 of 3 tokens equal joins them
    assert _mine(["42 apples fell", "17 apples fell"])[1] == [("<*> apples fell", 2)]


def test_on_equal_similarity_the_template_with_more_parameters_wins():
    msgs = ["x a b c", "x a b g", "x a q h", "x a b h"]
    # x a b <*> (3/4 equal, one parameter) and x a q h (3/4 equal, none) tie for "x a b h": the first wins
    assert _mine(msgs, similarity=0.6)[1] == [("x a b <*>", 3), ("x a q h", 1)]


def test_past_max_children_new_first_tokens_share_the_parameter_child():
    # max_children 3: p and q get children, the third child is the parameter one, where r and s meet
    ids, templates = _mine(["p x", "q x", "r x", "s x", "p x"], max_children=3)
    assert ids == [1, 2, 3, 3, 1]
    assert templates == [("p x", 2), ("q x", 1), ("<*> x", 2)]


def test_empty_messages_form_one_template():
    assert _mine(["", "   ", "a"])[1] == [("", 2), ("a", 1)]


def test_settings_are_checked():
    with pytest.raises(ValueError):
        Drain(similarity=1.5)
    with pytest.raises(ValueError):
        Drain(max_children=1)


WORDS = st.sampled_from(["a", "b", "c", "err", "x1", "42", "fail", "node7", "ok"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(WORDS, max_size=6).map(" ".join), max_size=60))
def test_every_message_fits_its_template(messages):
    d = Drain()
    got = [(m, d.add(m).id) for m in messages]
    by_id = {c.id: c for c in d.clusters}
    assert sum(c.size for c in d.clusters) == len(messages)
    for m, cid in got:
        tokens = m.split()
        template = by_id[cid].tokens
        assert len(template) == len(tokens)
        assert all(t == PARAM or t == w for t, w in zip(template, tokens))

