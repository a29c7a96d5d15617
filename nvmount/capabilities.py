"""Driver capabilities (NVIDIA_DRIVER_CAPABILITIES) as a flag set. Pure."""

from __future__ import annotations

import enum


class DriverCapability(enum.Flag):
    COMPAT32 = enum.auto()
    COMPUTE = enum.auto()
    DISPLAY = enum.auto()
    GRAPHICS = enum.auto()
    NGX = enum.auto()
    UTILITY = enum.auto()
    VIDEO = enum.auto()

    @classmethod
    def all(cls) -> DriverCapability:
        result = cls(0)
        for member in cls:
            result |= member
        return result

    @classmethod
    def from_names(cls, names: tuple[str, ...] | list[str]) -> DriverCapability:
        """Flags from known lowercase names; callers validate names first."""
        result = cls(0)
        for name in names:
            result |= cls[name.upper()]
        return result

    def names(self) -> tuple[str, ...]:
        """Sorted lowercase names, as NVIDIA's hook emits its flags."""
        return tuple(sorted(m.name.lower() for m in type(self) if m in self and m.name))


KNOWN_CAPABILITIES: tuple[str, ...] = DriverCapability.all().names()
UNGATED = DriverCapability(0)  # an ungated file or node: exposed whatever the request
