"""Owners of file descriptors: the one close/context-manager pattern of the engine's handles,
and `Cleanup`, which closes a set of them in reverse order.

`FdOwner` closes the fds named in its class's `FD_ATTRS` (each once, newest first, set to -1)
and any `FdOwner`s it was told it owns. `ContainerHandle`, `ProcFs` and `Root` use it.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType
    from typing import Protocol, TypeVar

    from typing_extensions import Self  # typing.Self is 3.11+ (TYPE_CHECKING only)

    T = TypeVar("T")
    T_co = TypeVar("T_co", covariant=True)

    class _CM(Protocol[T_co]):
        def __enter__(self) -> T_co: ...

        def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                     tb: TracebackType | None) -> object: ...


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


class Cleanup:
    """Context managers and callbacks to close in reverse order (contextlib.ExitStack's job,
    without importing contextlib on the hook's path)."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], object]] = []

    def enter_context(self, cm: _CM[T]) -> T:
        value = cm.__enter__()
        self._undo.append(lambda: cm.__exit__(None, None, None))
        return value

    def callback(self, fn: Callable[[], object]) -> None:
        self._undo.append(fn)

    def __enter__(self) -> Cleanup:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        first: BaseException | None = None
        while self._undo:
            try:
                self._undo.pop()()
            except BaseException as err:  # keep closing; the first error wins
                first = first or err
        if first is not None and exc is None:
            raise first
