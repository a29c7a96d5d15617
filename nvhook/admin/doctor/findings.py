"""The record every doctor check returns, and the host paths the checks read. Pure."""

from __future__ import annotations

from nvmount.records import record

LEVELS = ("ok", "info", "warn", "fail")


@record
class Finding:
    """One check's result: `fix` says what to do (empty when there is nothing to do)."""

    check: str
    level: str
    message: str
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        return {"check": self.check, "level": self.level, "message": self.message,
                "fix": self.fix}

    def line(self) -> str:
        text = f"{self.level.upper():<5} {self.check}: {self.message}"
        return text + (f"\n      fix: {self.fix}" if self.fix else "")


@record
class HostPaths:
    """Where the host's facts are (tests point them at a fake host)."""

    etc: str = "/etc"
    proc: str = "/proc"
    run: str = "/run"
    usr_share: str = "/usr/share"
    var_lib: str = "/var/lib"
    path: str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
