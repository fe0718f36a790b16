"""Value classes without generated code: the base of every value class the node agent loads.

`dataclasses` compiles each class's methods from source with `exec` when the class is created (`__init__`,
`__repr__`, `__eq__`, `__hash__`, `__setattr__`, `__delattr__`: one `exec` each before Python 3.13), and imports
`inspect` and `ast` to do it. On the node path that was 40-60 ms of a ~100 ms import (35 classes, measured on a
2-CPU EPYC), paid by every failed job's epilog on every node; msgspec's C structs were measured too and cost more
to import than they save (docs/performance.md, row 2). A `Value` subclass is made by its metaclass in a few
microseconds: the fields are the class's annotations in order (a base's first), each with the class attribute of
the same name as its default, or `field(default_factory=...)`; the methods are the shared ones below, read from the
fields at run time.

    class Window(Value):
        start: datetime
        end: datetime
        how: str = "slurm"

What a `@dataclass(frozen=True, slots=True)` gives, a `Value` gives: keyword or positional construction with
defaults, `__post_init__`, `__slots__`, immutability (assigning raises AttributeError; `__post_init__` sets with
`object.__setattr__`), equality and hashing by field values within one class, a repr, pickling (by the
constructor, so a changed class never unpickles stale state). `class X(Value, frozen=False)` makes a mutable one
(unhashable, as a dataclass with `eq=True`). `replace`, `fields` and `asdict` stand for `dataclasses`' functions.
Constructing one costs about 1.7x a generated `__init__`; a class made in bulk (an event per log line) may define
its own `__init__` in its body (compiled with its module, no `exec`), which tests/test_frozen.py checks against
its fields.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["Value", "asdict", "field", "fields", "replace"]

_MISSING = object()


class _Factory:
    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make

    def __repr__(self) -> str:
        return f"field(default_factory={self.make!r})"


def field(*, default_factory: Callable[[], Any]) -> Any:
    """A field's default made anew for each instance (a list, a dict, a read-only mapping)."""
    return _Factory(default_factory)


def _is_classvar(annotation: object) -> bool:
    return str(annotation).startswith(("ClassVar", "typing.ClassVar"))


class _ValueType(type):
    """Makes a Value class: its fields, their defaults and its `__slots__` from the class body."""

    def __new__(mcls, name: str, bases: tuple, ns: dict, frozen: bool = True):
        inherited: list[str] = []
        defaults: dict[str, Any] = {}
        for base in bases:
            inherited += [f for f in getattr(base, "__value_fields__", ()) if f not in inherited]
            defaults.update(getattr(base, "__value_defaults__", {}))
        own = [n for n, t in ns.get("__annotations__", {}).items()
               if not _is_classvar(t) and not n.startswith("__") and n not in inherited]
        for n in own:
            if n in ns:
                defaults[n] = ns.pop(n)
        names = tuple(inherited + own)
        seen_default = None
        for n in names:
            if n in defaults:
                seen_default = n
            elif seen_default is not None:
                raise TypeError(f"{name}: field '{n}' without a default follows '{seen_default}', which has one")
        ns["__slots__"] = tuple(own)
        ns["__value_fields__"] = names
        ns["__value_defaults__"] = defaults
        ns["__match_args__"] = names
        if not frozen:
            ns.setdefault("__setattr__", object.__setattr__)
            ns.setdefault("__delattr__", object.__delattr__)
            ns.setdefault("__hash__", None)
        return super().__new__(mcls, name, bases, ns)


class Value(metaclass=_ValueType):
    """The base of a value class (see the module's documentation)."""

    __slots__ = ()
    __value_fields__: tuple[str, ...] = ()
    __value_defaults__: dict[str, Any] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        names = self.__value_fields__
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__}() takes {len(names)} positional arguments but {len(args)} "
                            f"were given")
        put = object.__setattr__
        for n, v in zip(names, args):
            put(self, n, v)
        if kwargs or len(args) < len(names):
            defaults = self.__value_defaults__
            for n in names[len(args):]:
                if n in kwargs:
                    put(self, n, kwargs.pop(n))
                    continue
                d = defaults.get(n, _MISSING)
                if d is _MISSING:
                    raise TypeError(f"{type(self).__name__}() missing required argument: '{n}'")
                put(self, n, d.make() if type(d) is _Factory else d)
            if kwargs:
                n = next(iter(kwargs))
                raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument '{n}'"
                                if n not in names else f"{type(self).__name__}() got multiple values for '{n}'")
        post = getattr(self, "__post_init__", None)
        if post is not None:
            post()

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field '{name}' of a frozen {type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field '{name}' of a frozen {type(self).__name__}")

    def __value_tuple(self) -> tuple:
        return tuple([getattr(self, n) for n in self.__value_fields__])

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self.__value_tuple() == other.__value_tuple()  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.__value_tuple())

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self.__value_fields__)})"

    def __reduce__(self):
        return type(self), self.__value_tuple()


def fields(obj: Value | type[Value]) -> tuple[str, ...]:
    """The field names of a Value class or instance, in order."""
    return obj.__value_fields__


def replace(obj: Value, **changes: Any) -> Any:
    """A copy of `obj` with the given fields changed (through the constructor, so `__post_init__` runs)."""
    for n in changes:
        if n not in obj.__value_fields__:
            raise TypeError(f"{type(obj).__name__} has no field '{n}'")
    return type(obj)(**{n: changes[n] if n in changes else getattr(obj, n) for n in obj.__value_fields__})


def asdict(obj: Value) -> dict[str, Any]:
    """The fields of `obj` and their values (not recursive)."""
    return {n: getattr(obj, n) for n in obj.__value_fields__}
