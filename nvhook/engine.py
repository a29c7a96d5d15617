"""Bridge from the hook's decision to the mount engine (owned by the engine integrator).

`run_engine` is called by `nvhook.prestart` for GPU containers. In dry-run it returns the plan
as a JSON-ready dict (or None when no driver is found) and changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nvhook.config import HookConfig
    from nvhook.request import ContainerRef, ContainerRequest


def run_engine(
    request: ContainerRequest,
    container: ContainerRef,
    config: HookConfig,
    *,
    dry_run: bool,
    debug: bool,
) -> dict[str, object] | None:
    """Configure the container for `request`; in dry-run, return the plan instead."""
    if dry_run:
        return None
    from nvhook.errors import NvhookError

    raise NvhookError("the mount engine is not available yet")
