"""Driver capabilities (NVIDIA_DRIVER_CAPABILITIES) as a flag set. Pure."""

from __future__ import annotations

from nvmount.choices import FlagSet, members

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import ClassVar


class DriverCapability(FlagSet):
    __slots__ = ()
    COMPAT32: ClassVar[DriverCapability]
    COMPUTE: ClassVar[DriverCapability]
    DISPLAY: ClassVar[DriverCapability]
    GRAPHICS: ClassVar[DriverCapability]
    NGX: ClassVar[DriverCapability]
    UTILITY: ClassVar[DriverCapability]
    VIDEO: ClassVar[DriverCapability]

    def names(self) -> tuple[str, ...]:
        """Sorted lowercase names, as NVIDIA's hook emits its flags."""
        return tuple(sorted(n.lower() for n in self.member_names()))


members(DriverCapability, COMPAT32=1, COMPUTE=2, DISPLAY=4, GRAPHICS=8, NGX=16, UTILITY=32,
        VIDEO=64)

KNOWN_CAPABILITIES: tuple[str, ...] = DriverCapability.all().names()
UNGATED = DriverCapability(0)  # an ungated file or node: exposed whatever the request
