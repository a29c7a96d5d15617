"""Fault points: make a chosen effect of the engine fail, to test rollback (test support).

The engine calls `faults(step)` right before every effect: each mount, each created file,
directory or symlink, each tmpfs flag change, ldconfig, each cgroup write, NVML init. A
`Faults` object that is not armed only records the step names (`steps`), so a test can list
every step of a run and then arm each one in turn.

Arming from the environment needs all three of:

- `[nvhook] test-faults = true` in the config file (tests set it; nothing in production does:
  the hook's environment alone arms nothing, since an image may control it),
- `NVHOOK_FAULT=<step name or prefix>[:<nth>]` (nth counts matching steps from 1, default 1;
  an empty prefix matches every step, so `NVHOOK_FAULT=:7` fails the 7th effect),
- a debug run (`--debug`).

With `NVHOOK_FAULT_SLEEP=<seconds>` as well, the matching step sleeps that long and then
goes on instead of failing: a test can kill the container init while the hook waits at a
chosen step ("a container that dies mid-way").

The config switch plus debug keep a stray (or leaked) variable from breaking or stalling
production starts. When the prefix itself contains a `:`, always give the count
(`cgroup allow c 195:0:1`).
"""

from __future__ import annotations

import errno

from nvmount.log import get_logger

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Mapping

log = get_logger(__name__)

ENV_FAULT = "NVHOOK_FAULT"
ENV_SLEEP = "NVHOOK_FAULT_SLEEP"
MAX_SLEEP = 60.0


class Faults:
    """Records steps; when armed, raises OSError(EIO) at the nth step matching `prefix`."""

    def __init__(self, prefix: str | None = None, nth: int = 1, sleep: float = 0.0, *,
                 record: bool = True) -> None:
        self.prefix = prefix  # None: never fail
        self.nth = nth
        self.sleep = sleep  # > 0: sleep at the step instead of failing
        self.steps: list[str] = []
        self._matched = 0
        # whether a step's name is made at all: not for the hook's unarmed points (`from_env`)
        self.wants = record or prefix is not None

    @classmethod
    def parse(cls, spec: str) -> Faults:
        """`<prefix>[:<nth>]` as in NVHOOK_FAULT."""
        from nvmount.bounds import parse_decimal

        prefix, sep, count = spec.rpartition(":")
        nth = parse_decimal(count) if sep else None
        if nth:
            return cls(prefix, nth)
        return cls(spec)

    @classmethod
    def from_env(cls, environ: Mapping[str, str], *, debug: bool, enabled: bool) -> Faults:
        """Armed only when `enabled` (the config's test-faults), NVHOOK_FAULT is set and in a
        debug run."""
        spec = environ.get(ENV_FAULT)
        if spec is None or not enabled or not debug:
            return cls(record=False)  # nothing to record: no step name is even made
        log.warning("fault injection armed: %s=%s", ENV_FAULT, spec)
        faults = cls.parse(spec)
        try:
            faults.sleep = min(max(float(environ.get(ENV_SLEEP, "0")), 0.0), MAX_SLEEP)
        except ValueError:
            faults.sleep = 0.0
        return faults

    @property
    def armed(self) -> bool:
        return self.prefix is not None

    def __call__(self, step: object) -> None:
        """A fault point: call right before the effect named `step` (a string, or an object
        whose str() is the name: made only when recording or armed)."""
        if not self.wants:
            return
        step = str(step)
        self.steps.append(step)
        if self.prefix is None or not step.startswith(self.prefix):
            return
        self._matched += 1
        if self._matched == self.nth and self.sleep > 0:
            import time

            log.warning("sleeping %.2fs at step %r", self.sleep, step)
            time.sleep(self.sleep)
        elif self._matched == self.nth:
            log.warning("injecting a fault at step %r", step)
            raise OSError(errno.EIO, f"injected fault ({ENV_FAULT}={self.prefix}:{self.nth})")
