"""Where nvhook deliberately differs from NVIDIA's hook, runtime, CLI (v1.17.8, and v1.20.0 where
it changed the hook's decision) and nvidia-ctk / nvidia-cdi-hook (v1.20.0).

The one list of deviations, in two parts: `hook` (the hook, the engine, CDI, driver coverage;
docs/hook.md repeats it) and `tools` (the runtime wrapper, the CLI drop-ins, `runtime
configure`, nvidia-ctk and nvidia-cdi-hook; docs/runtimes.md repeats it). A test keeps the
documents in step. Each entry is (topic, what nvhook does, why).
"""

from __future__ import annotations

from nvhook.deviations.hook import HOOK
from nvhook.deviations.tools import TOOLS

DEVIATIONS: tuple[tuple[str, str, str], ...] = HOOK + TOOLS
