"""Semantic versions with Go `golang.org/x/mod/semver` semantics. Pure.

NVIDIA's hook (v1.17.8) uses x/mod/semver for two decisions, so nvhook reproduces it exactly,
quirks included:

- the capability format of `process.capabilities`, chosen by comparing `"v" + ociVersion` with
  `v1.0.0-rc1` and `v1.0.0-rc5` (invalid versions sort below every valid one; prerelease
  identifiers compare ASCII-wise, so `rc10 < rc5`);
- the `cuda>=MAJOR.MINOR` requirement of legacy CUDA images, from `CUDA_VERSION`.

Versions carry the leading "v" as in Go (`is_valid("v1.2.3")`). The shorthands `v1` and `v1.2`
are valid (= v1.0.0, v1.2.0) but cannot carry a prerelease or build suffix.
"""

from __future__ import annotations

_IDENT_CHARS = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-")
_UINT32_MAX_TEXT = str(0xFFFF_FFFF)


def _parse_int(v: str) -> tuple[str, str] | None:
    """A decimal number without leading zeros at the start of `v`, and the rest."""
    i = 0
    while i < len(v) and "0" <= v[i] <= "9":
        i += 1
    if i == 0 or (v[0] == "0" and i != 1):
        return None
    return v[:i], v[i:]


def _is_bad_num(ident: str) -> bool:
    return ident.isascii() and ident.isdigit() and len(ident) > 1 and ident[0] == "0"


def _parse_suffix(v: str, lead: str) -> tuple[str, str] | None:
    """A `-prerelease` (lead "-") or `+build` (lead "+") suffix and the rest of `v`."""
    end = v.find("+", 1) if lead == "-" else -1
    body, rest = (v[1:end], v[end:]) if end >= 0 else (v[1:], "")
    for ident in body.split("."):
        if not ident or not all(c in _IDENT_CHARS for c in ident):
            return None
        if lead == "-" and _is_bad_num(ident):
            return None
    return v[: len(body) + 1], rest


def parse(v: str) -> tuple[str, str, str, str, str] | None:
    """(major, minor, patch, prerelease, build) as strings, or None if `v` is not valid."""
    if not v.startswith("v"):
        return None
    head = _parse_int(v[1:])
    if head is None:
        return None
    major, rest = head
    if not rest:
        return major, "0", "0", "", ""
    if rest[0] != ".":
        return None
    head = _parse_int(rest[1:])
    if head is None:
        return None
    minor, rest = head
    if not rest:
        return major, minor, "0", "", ""
    if rest[0] != ".":
        return None
    head = _parse_int(rest[1:])
    if head is None:
        return None
    patch, rest = head
    prerelease = build = ""
    for lead in ("-", "+"):
        if rest.startswith(lead):
            suffix = _parse_suffix(rest, lead)
            if suffix is None:
                return None
            if lead == "-":
                prerelease, rest = suffix
            else:
                build, rest = suffix
    if rest:
        return None
    return major, minor, patch, prerelease, build


def is_valid(v: str) -> bool:
    return parse(v) is not None


def _compare_int(x: str, y: str) -> int:
    if x == y:
        return 0
    if len(x) != len(y):
        return -1 if len(x) < len(y) else 1
    return -1 if x < y else 1


def _compare_prerelease(x: str, y: str) -> int:
    if x == y:
        return 0
    if not x:
        return 1
    if not y:
        return -1
    xs, ys = x[1:].split("."), y[1:].split(".")
    for dx, dy in zip(xs, ys):
        if dx == dy:
            continue
        nx, ny = dx.isdigit(), dy.isdigit()
        if nx != ny:
            return -1 if nx else 1
        if nx and len(dx) != len(dy):
            return -1 if len(dx) < len(dy) else 1
        return -1 if dx < dy else 1
    return -1 if len(xs) < len(ys) else 1


def compare(v: str, w: str) -> int:
    """-1, 0 or +1; an invalid version equals another invalid one and sorts below valid ones."""
    pv, pw = parse(v), parse(w)
    if pv is None or pw is None:
        if pv is None and pw is None:
            return 0
        return -1 if pv is None else 1
    for a, b in zip(pv[:3], pw[:3]):
        c = _compare_int(a, b)
        if c:
            return c
    return _compare_prerelease(pv[3], pw[3])


def major_minor(v: str) -> str:
    """"vMAJOR.MINOR" of a valid version, "" for an invalid one (Go's semver.MajorMinor)."""
    p = parse(v)
    return "" if p is None else f"v{p[0]}.{p[1]}"


def parse_major_minor(version: str) -> str:
    """"MAJOR.MINOR" of a version such as CUDA_VERSION (one leading "v" allowed).

    Mirrors the toolkit's `parseMajorMinorVersion`: the value must be a valid semver and major
    and minor must fit in uint32. Raises ValueError with the toolkit's texts.
    """
    vv = "v" + version.removeprefix("v")
    p = parse(vv)
    if p is None:
        raise ValueError("invalid version string")
    if _compare_int(p[0], _UINT32_MAX_TEXT) > 0:  # compared as digits: never int() of input
        raise ValueError("invalid major version")
    if _compare_int(p[1], _UINT32_MAX_TEXT) > 0:
        raise ValueError("invalid minor version")
    return f"{p[0]}.{p[1]}"
