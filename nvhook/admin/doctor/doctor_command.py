"""`nvhook doctor [--json]`: one line per check, a fix under each problem; exit 1 when a GPU
container would fail to start here (a `fail` finding), else 0.

    OK    driver: 550.54.15 (CUDA 12.4), 8 GPU(s): NVIDIA A100-SXM4-80GB
    FAIL  /dev/nvidia-uvm: missing
          fix: load the module and create the node (`nvidia-modprobe -u -c=0`, ...)
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from nvhook.admin.doctor.findings import Finding, HostPaths

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.flags import GlobalOptions


def run_checks(opts: GlobalOptions, paths: HostPaths) -> list[Finding]:
    """Every check, in the order a container start depends on them."""
    from nvhook.admin.doctor import checks, host

    config, findings = checks.check_config(opts.config_path, os.environ, opts.cwd)
    findings.append(checks.check_root(config))
    inventory, driver = checks.check_driver(config)
    findings += driver
    running = host.running_daemons(paths.proc)
    if inventory is not None:
        findings += checks.check_devices(inventory, config.nvhook.proc_root or "/proc")
        findings.append(checks.check_persistence(inventory, running))
    findings.append(checks.check_ldcache(config))
    findings.append(host.check_cgroups(paths))
    findings.append(host.check_hook_on_path(paths, running))
    findings += host.check_runtimes(paths, running)
    findings += host.check_cdi(config, paths.path)
    return findings


def main(argv: list[str], opts: GlobalOptions) -> int:
    parser = argparse.ArgumentParser(
        prog="nvhook doctor",
        description="check this host for GPU containers: driver, device nodes, persistence, "
                    "cgroups, runtimes, CDI, config, caches; exit 1 when a GPU container "
                    "would fail")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    args = parser.parse_args(argv)
    findings = run_checks(opts, HostPaths(path=os.environ.get("PATH") or HostPaths().path))
    failed = any(f.level == "fail" for f in findings)
    if args.json:
        sys.stdout.write(json.dumps({"ready": not failed,
                                     "findings": [f.to_json() for f in findings]},
                                    indent=2) + "\n")
    else:
        for finding in findings:
            print(finding.line())
        counts = {lv: sum(1 for f in findings if f.level == lv) for lv in ("fail", "warn")}
        print("GPU containers would fail to start here" if failed else
              "ready for GPU containers", f"({counts['fail']} failed, {counts['warn']} "
              "warning(s))")
    return 1 if failed else 0
