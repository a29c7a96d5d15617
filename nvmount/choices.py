"""Enumerations that cost nothing at import: `Choice` (str values), `Number` (int values) and
`FlagSet` (int bit sets), in place of `enum.Enum`/`IntEnum`/`Flag`.

Creating an `enum` class runs its metaclass (about 0.5 ms each) and `import enum` alone costs
the hook about 8 ms; these are plain `str`/`int` subclasses whose members are set by
`members(cls, NAME=value, ...)` after the class body, annotated as ClassVars for mypy. They
keep the parts of the enum API the code uses: `Cls(value)` (validated, returns the member),
`.value`, `.name`, iteration over a class (`members_of`), and for flag sets `|`, `&`, `~`,
`in` (subset), iteration over the set members, `Cls.all()` and `Cls.from_names(...)`.
A member compares equal to its plain value (`SourceKind.FILE == "file"`).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import TypeVar

    from typing_extensions import Self  # typing.Self is 3.11+ (TYPE_CHECKING only)

    C = TypeVar("C", bound="type[Choice] | type[Number] | type[FlagSet]")


def members(cls: C, **values: object) -> C:
    """Create the members of an enumeration class (`members(Kind, FILE="file", ...)`)."""
    base = int if issubclass(cls, int) else str
    table: dict[object, object] = {}
    for name, value in values.items():
        member = base.__new__(cls, value)  # type: ignore[call-overload,type-var]
        type.__setattr__(cls, name, member)
        table[value] = member
    type.__setattr__(cls, "_BY_VALUE", table)
    type.__setattr__(cls, "_NAMES", {v: k for k, v in values.items()})
    if issubclass(cls, FlagSet):
        bits = 0
        for value in values.values():
            bits |= value  # type: ignore[operator]
        type.__setattr__(cls, "_ALL", bits)
    return cls


def members_of(cls: type[Choice] | type[Number]) -> tuple[object, ...]:
    """The members of an enumeration class, in definition order."""
    return tuple(cls._BY_VALUE.values())


class Choice(str):
    """One of a fixed set of strings (an `enum.Enum` with str values)."""

    __slots__ = ()
    _BY_VALUE: dict[object, object]
    _NAMES: dict[object, str]

    def __new__(cls, value: str) -> Self:
        try:
            return cls._BY_VALUE[value]  # type: ignore[return-value]
        except KeyError:
            raise ValueError(f"{value!r} is not a valid {cls.__name__}") from None

    @property
    def value(self) -> str:
        return str.__str__(self)

    @property
    def name(self) -> str:
        return self._NAMES[str.__str__(self)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return type(self), (str.__str__(self),)


class Number(int):
    """One of a fixed set of integers with names (an `enum.IntEnum`)."""

    __slots__ = ()
    _BY_VALUE: dict[object, object]
    _NAMES: dict[object, str]

    def __new__(cls, value: int) -> Self:
        try:
            return cls._BY_VALUE[value]  # type: ignore[return-value]
        except KeyError:
            raise ValueError(f"{value!r} is not a valid {cls.__name__}") from None

    @property
    def value(self) -> int:
        return int(self)

    @property
    def name(self) -> str:
        return self._NAMES[int(self)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __reduce__(self) -> tuple[type, tuple[int]]:
        return type(self), (int(self),)


class FlagSet(int):
    """A set of flags as an int (an `enum.Flag`): `|`, `&`, `~`, `in`, iteration."""

    __slots__ = ()
    _BY_VALUE: dict[object, object]
    _NAMES: dict[object, str]

    def __new__(cls, value: int = 0) -> Self:
        if value & ~cls._all_bits():
            raise ValueError(f"{value!r} is not a valid {cls.__name__}")
        return int.__new__(cls, value)

    _ALL: int

    @classmethod
    def _all_bits(cls) -> int:
        return cls._ALL

    @classmethod
    def all(cls) -> Self:
        return cls(cls._all_bits())

    @classmethod
    def from_names(cls, names: tuple[str, ...] | list[str]) -> Self:
        """Flags from known member names (any case); callers validate names first."""
        by_name = {n.lower(): v for v, n in cls._NAMES.items()}
        result = 0
        for name in names:
            result |= by_name[name.lower()]  # type: ignore[operator]
        return cls(result)

    def __or__(self, other: int) -> Self:
        return type(self)(int(self) | int(other))

    def __and__(self, other: int) -> Self:
        return type(self)(int(self) & int(other))

    def __xor__(self, other: int) -> Self:
        return type(self)(int(self) ^ int(other))

    def __invert__(self) -> Self:
        return type(self)(self._all_bits() & ~int(self))

    __ror__ = __or__
    __rand__ = __and__

    def __contains__(self, other: int) -> bool:
        return int(other) & ~int(self) == 0

    def __iter__(self) -> Iterator[Self]:
        for value in self._NAMES:
            if value and int(value) & int(self) == value:  # type: ignore[call-overload]
                yield type(self)(int(value))  # type: ignore[call-overload]

    def member_names(self) -> tuple[str, ...]:
        """The names of the set members, in definition order."""
        return tuple(self._NAMES[int(m)] for m in self)

    @property
    def value(self) -> int:
        return int(self)

    @property
    def name(self) -> str | None:
        return "|".join(self.member_names()) or None

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name or '0'}"

    def __reduce__(self) -> tuple[type, tuple[int]]:
        return type(self), (int(self),)
