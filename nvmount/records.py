"""Immutable records that cost nothing at import: `@record` classes.

A `@record` class is written like a frozen dataclass (annotated fields, defaults,
`field(default_factory=...)`) and type-checked as one (PEP 681 `dataclass_transform`), but at
run time the decorator only rebuilds the class with `__slots__` and attaches a shared
`__init__`, `__repr__`, `__eq__` and `__hash__`: no `dataclasses`, `inspect` or `typing`
import and no code generation with exec. `dataclasses` would cost the hook about 1 ms per
class plus 20 ms for its own import (style.md, convention 2); a `@record` costs a few
microseconds. `@mutable_record` is the same without the frozen `__setattr__` (and without
`__hash__`). `replace(obj, **changes)` and `asdict(obj)` work as their dataclass namesakes.

Fields are the class's own annotations, in order (no inheritance between records, no
ClassVar, no __post_init__). Annotations are never evaluated.
"""

from __future__ import annotations

from _operator import attrgetter  # the C module: operator.py is not imported

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    from typing_extensions import dataclass_transform

    T = TypeVar("T")


class FrozenRecordError(AttributeError):
    """Assignment to a field of a frozen record."""


class _Factory:
    __slots__ = ("make",)

    def __init__(self, make: Callable[[], object]) -> None:
        self.make = make


def field(*, default_factory: Callable[[], T]) -> T:
    """A field whose default is made per instance (`field(default_factory=list)`)."""
    return _Factory(default_factory)  # type: ignore[return-value]


def _init(names: tuple[str, ...], defaults: dict[str, object]) -> Callable[..., None]:
    count = len(names)

    def __init__(self: object, *args: object, **kwargs: object) -> None:
        if len(args) > count:
            raise TypeError(f"{type(self).__name__}() takes {count} arguments, "
                            f"{len(args)} given")
        setter = object.__setattr__
        for name, value in zip(names, args):
            setter(self, name, value)
        for name in names[len(args):]:
            if name in kwargs:
                value = kwargs.pop(name)
            elif name in defaults:
                value = defaults[name]
                if type(value) is _Factory:
                    value = value.make()
            else:
                raise TypeError(f"{type(self).__name__}() missing argument {name!r}")
            setter(self, name, value)
        if kwargs:
            raise TypeError(f"{type(self).__name__}() got unexpected {sorted(kwargs)}")

    return __init__


def _frozen_setattr(self: object, name: str, value: object) -> None:
    raise FrozenRecordError(f"cannot assign to field {name!r} of {type(self).__name__}")


def _frozen_delattr(self: object, name: str) -> None:
    raise FrozenRecordError(f"cannot delete field {name!r} of {type(self).__name__}")


def _build(cls: type, frozen: bool) -> type:
    names = tuple(cls.__dict__.get("__annotations__", {}))  # noqa: RUF063 (no inspect)
    defaults = {n: cls.__dict__[n] for n in names if n in cls.__dict__}
    body = {k: v for k, v in cls.__dict__.items()
            if k not in defaults and k not in ("__dict__", "__weakref__")}
    # `lambda obj: names` for no fields (names is ()): mypy 1.x (the last for 3.9) types `()`
    # as tuple[()] and rejects it against the first branch
    key: Callable[[object], tuple[Any, ...]] = attrgetter(*names) if len(names) > 1 else (
        (lambda obj: (getattr(obj, names[0]),)) if names else (lambda obj: names))

    def __eq__(self: object, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return bool(key(self) == key(other))

    def __repr__(self: object) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        return f"{type(self).__qualname__}({shown})"

    def __reduce__(self: object) -> tuple[type, tuple[object, ...]]:  # pickle, copy
        return type(self), tuple(getattr(self, n) for n in names)

    body.update(__slots__=names, __match_args__=names, __record_fields__=names,
                __init__=_init(names, defaults), __eq__=__eq__, __repr__=__repr__,
                __reduce__=__reduce__)
    body.setdefault("__doc__", None)
    if frozen:
        body.update(__setattr__=_frozen_setattr, __delattr__=_frozen_delattr,
                    __hash__=lambda self: hash(key(self)))
    else:
        body["__hash__"] = None
    return type(cls)(cls.__name__, cls.__bases__, body)


def _record(cls: type[T]) -> type[T]:
    return _build(cls, frozen=True)


def _mutable_record(cls: type[T]) -> type[T]:
    return _build(cls, frozen=False)


if TYPE_CHECKING:

    @dataclass_transform(frozen_default=True, field_specifiers=(field,))
    def record(cls: type[T]) -> type[T]: ...

    @dataclass_transform(field_specifiers=(field,))
    def mutable_record(cls: type[T]) -> type[T]: ...

else:
    record = _record
    mutable_record = _mutable_record


def record_fields(obj: object) -> tuple[str, ...]:
    """The field names of a record (instance or class), in order."""
    names: tuple[str, ...] = obj.__record_fields__  # type: ignore[attr-defined]
    return names


def replace(obj: T, **changes: Any) -> T:
    """A copy of record `obj` with `changes` applied (dataclasses.replace)."""
    values = {n: getattr(obj, n) for n in record_fields(obj)}
    values.update(changes)
    return type(obj)(**values)


def asdict(obj: object) -> dict[str, Any]:
    """A record as a dict, nested records, lists and tuples converted (dataclasses.asdict)."""
    return {n: _plain(getattr(obj, n)) for n in record_fields(obj)}


def _plain(value: Any) -> Any:
    if hasattr(type(value), "__record_fields__"):
        return asdict(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
