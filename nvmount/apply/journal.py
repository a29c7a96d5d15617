"""A journal of undoable steps: what apply, ldcache and cgroup did, to undo it in reverse.

Each `record` pairs a description with an undo callable; `rollback` runs the undos newest
first, keeps going when one fails (logging it) and returns the failures; `commit` forgets
the undos. `on_close` callables (closing fds that undos need) run after either, once.

Undo callables of mounts must run in the container's mount namespace: the engine keeps one
journal per namespace (`apply` owns the container side, the engine the host side).
"""

from __future__ import annotations

from nvmount.log import get_logger

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable

log = get_logger(__name__)


class Journal:
    def __init__(self, name: str = "journal") -> None:
        self.name = name
        self._undo: list[tuple[str, Callable[[], object]]] = []
        self._close: list[Callable[[], object]] = []

    def __len__(self) -> int:
        return len(self._undo)

    @property
    def steps(self) -> tuple[str, ...]:
        """Descriptions of the recorded steps, oldest first."""
        return tuple(what for what, _ in self._undo)

    def record(self, what: str, undo: Callable[[], object]) -> None:
        self._undo.append((what, undo))

    def on_close(self, close: Callable[[], object]) -> None:
        self._close.append(close)

    def rollback(self) -> tuple[str, ...]:
        """Undo every step newest first; returns "<step>: <error>" for those that failed."""
        failures: list[str] = []
        while self._undo:
            what, undo = self._undo.pop()
            try:
                undo()
                log.debug("%s: undid %s", self.name, what)
            except Exception as err:  # keep undoing the rest; report all at the end
                log.error("%s: could not undo %s: %s", self.name, what, err)
                failures.append(f"{what}: {err}")
        self._finish()
        return tuple(failures)

    def commit(self) -> None:
        """Keep everything done; release what the undos held."""
        self._undo.clear()
        self._finish()

    def _finish(self) -> None:
        while self._close:
            close = self._close.pop()
            try:
                close()
            except OSError as err:
                log.debug("%s: close failed: %s", self.name, err)
