"""Owners of file descriptors: the one close/context-manager pattern of the engine's handles.

`FdOwner` closes the fds named in its class's `FD_ATTRS` (each once, newest first, set to -1)
and any `FdOwner`s it was told it owns. `ContainerHandle`, `ProcFs` and `Root` use it.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self


class FdOwner:
    """Base of objects that own fds: `close()` and `with` close each fd in `FD_ATTRS` once."""

    FD_ATTRS: tuple[str, ...] = ("fd",)

    def owned(self) -> tuple[FdOwner, ...]:
        """Other owners this one closes with itself (override)."""
        return ()

    def close(self) -> None:
        for name in self.FD_ATTRS:
            fd = getattr(self, name)
            if fd >= 0:
                setattr(self, name, -1)
                os.close(fd)
        for other in self.owned():
            other.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
