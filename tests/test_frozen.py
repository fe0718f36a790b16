"""attribution.frozen: value classes behave as the frozen, slotted dataclasses they replace, without generated code."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
from types import MappingProxyType
from typing import ClassVar, Mapping

import pytest

from attribution.frozen import Value, asdict, field, fields, replace


class Point(Value):
    """A test value."""

    x: int
    y: int = 0
    tags: tuple[str, ...] = ()
    LIMIT: ClassVar[int] = 10


class Labelled(Point):
    """A subclass adds fields after its base's."""

    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))


class Counter(Value, frozen=False):
    """A mutable one."""

    n: int = 0
    seen: list[str] = field(default_factory=list)


def test_fields_come_from_annotations_in_order_bases_first_without_classvars():
    assert fields(Point) == ("x", "y", "tags")
    assert fields(Labelled(1)) == ("x", "y", "tags", "labels")
    assert Point.LIMIT == 10 and Point.__match_args__ == ("x", "y", "tags")
    assert Point.__slots__ == ("x", "y", "tags") and Labelled.__slots__ == ("labels",)
    assert not hasattr(Point(1), "__dict__")


def test_construction_by_position_keyword_and_default():
    assert asdict(Point(1, 2)) == {"x": 1, "y": 2, "tags": ()}
    assert asdict(Point(y=5, x=3)) == {"x": 3, "y": 5, "tags": ()}
    with pytest.raises(TypeError, match="missing required argument: 'x'"):
        Point()
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        Point(1, z=2)
    with pytest.raises(TypeError, match="multiple values for 'x'"):
        Point(1, x=2)
    with pytest.raises(TypeError, match="takes 3 positional arguments but 4"):
        Point(1, 2, (), 4)


def test_a_field_without_default_after_one_with_is_refused_at_class_creation():
    with pytest.raises(TypeError, match="'b' without a default follows 'a'"):
        class Bad(Value):  # noqa: F841
            a: int = 1
            b: int


def test_frozen_equal_by_value_within_a_class_and_hashable():
    p = Point(1, 2)
    with pytest.raises(AttributeError, match="frozen Point"):
        p.x = 3  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del p.y
    assert p == Point(1, 2) and p != Point(1, 3) and hash(p) == hash(Point(1, 2))
    assert Labelled(1, 2) != Point(1, 2)  # another class: not equal, as with dataclasses
    assert len({Point(1), Point(1), Point(2)}) == 2
    assert repr(p) == "Point(x=1, y=2, tags=())"


def test_post_init_and_default_factories_run_for_each_instance():
    a, b = Labelled(1, labels={"k": "v"}), Labelled(2)
    assert isinstance(a.labels, MappingProxyType) and a.labels["k"] == "v"
    assert b.labels == {} and Counter().seen is not Counter().seen


def test_replace_goes_through_the_constructor():
    a = Labelled(1, labels={"k": "v"})
    b = replace(a, y=9, labels={"j": "w"})
    assert (b.x, b.y, dict(b.labels)) == (1, 9, {"j": "w"}) and isinstance(b.labels, MappingProxyType)
    assert a.y == 0
    with pytest.raises(TypeError, match="no field 'nope'"):
        replace(a, nope=1)


def test_mutable_values_assign_and_are_not_hashable():
    c = Counter()
    c.n += 1
    c.seen.append("x")
    assert (c.n, c.seen) == (1, ["x"]) and c == Counter(1, ["x"])
    with pytest.raises(TypeError):
        hash(c)


def test_pickle_and_copy_rebuild_through_the_constructor():
    p = Point(1, 2, ("t",))
    for q in (pickle.loads(pickle.dumps(p)), copy.copy(p), copy.deepcopy(p)):
        assert q == p and type(q) is Point
    a = Labelled(1, 2, ("t",), {"k": "v"})  # a read-only mapping does not pickle (the pack's cache maps it)
    b = copy.copy(a)
    assert b == a and isinstance(b.labels, MappingProxyType)


def test_the_node_path_imports_no_dataclasses_inspect_or_ast():
    """#16 target 2: the generated methods' `exec`s and the modules dataclasses needs for them are gone from
    every failed job's epilog."""
    probe = ("import sys, attribution.node.agent, attribution.node.logs, attribution.node.post, "
             "attribution.node.document, attribution.node.snapshots, attribution.node.hookenv, "
             "attribution.node.spool, attribution.node.textfile; "
             "print(sorted(m for m in ('dataclasses', 'inspect', 'ast', 'dis') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def _written_out():
    from attribution.collect.joblog import JobLine
    from attribution.collect.kernel import KernelLine
    from attribution.model import Event, Observation

    return [Observation, Event, JobLine, KernelLine]


@pytest.mark.parametrize("cls", _written_out(), ids=lambda c: c.__name__)
def test_a_written_out_init_takes_the_fields_in_order_with_their_defaults(cls):
    """The classes made in bulk write their `__init__` out: it must take exactly the fields, in order, and give
    what the shared constructor gives."""
    import inspect

    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    assert [p.name for p in params] == list(fields(cls))
    required = [p.name for p in params if p.default is inspect.Parameter.empty]
    assert required == [n for n in fields(cls) if n not in cls.__value_defaults__]
    args = {n: f"v-{n}" for n in required}
    shared = object.__new__(cls)
    Value.__init__(shared, **args)  # the shared constructor (none of these has a __post_init__ to run)
    assert not hasattr(cls, "__post_init__") and cls(**args) == shared
    for p in params:
        if p.default is not inspect.Parameter.empty and p.name in cls.__value_defaults__:
            d = cls.__value_defaults__[p.name]
            if not hasattr(d, "make"):
                assert p.default == d, p.name
