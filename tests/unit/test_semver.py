"""nvhook.hook.semver: Go x/mod/semver semantics (hook-spec 1.6, 1.7)."""

from __future__ import annotations

import pytest

from nvhook.hook import semver

VALID = [
    ("v1", True),
    ("v1.2", True),
    ("v1.2.3", True),
    ("v0.0.0", True),
    ("v1.0.0-rc1", True),
    ("v1.0.0-rc2-dev", True),
    ("v1.0.0-alpha.1", True),
    ("v1.0.0+build.5", True),
    ("v1.0.0-rc.1+build", True),
    ("v4294967296.0.0", True),
    ("", False),
    ("v", False),
    ("1.2.3", False),
    ("vfoo", False),
    ("v01.2.3", False),
    ("v1.02", False),
    ("v1.2.03", False),
    ("v1-rc1", False),
    ("v1.2-rc1", False),
    ("v1.2.3.4", False),
    ("v1.2.3-", False),
    ("v1.2.3-rc..1", False),
    ("v1.2.3-01", False),
    ("v1.2.3+", False),
    ("v1.2.3+a..b", False),
    ("v1.2.3-rc_1", False),
    ("v1.", False),
    ("v1..2", False),
]


@pytest.mark.parametrize(("version", "valid"), VALID, ids=[v or "empty" for v, _ in VALID])
def test_is_valid(version: str, valid: bool) -> None:
    assert semver.is_valid(version) is valid


COMPARE = [
    ("v1.0.0", "v1.0.0", 0),
    ("v1", "v1.0.0", 0),
    ("v1.0", "v1.0.0", 0),
    ("v1.0.0-rc1", "v1.0.0", -1),
    ("v1.0.0-rc10", "v1.0.0-rc5", -1),  # ASCII order: the quirk that makes rc10 "old format"
    ("v1.0.0-rc2-dev", "v1.0.0-rc5", -1),
    ("v1.0.0-rc5", "v1.0.0-rc1", 1),
    ("v1.0.0-alpha", "v1.0.0-alpha.1", -1),
    ("v1.0.0-alpha.1", "v1.0.0-alpha.beta", -1),
    ("v1.0.0-beta.2", "v1.0.0-beta.11", -1),
    ("v1.0.0-1", "v1.0.0-a", -1),
    ("v1.0.0+a", "v1.0.0+b", 0),
    ("v10.0.0", "v9.0.0", 1),
    ("vfoo", "v0.0.0", -1),
    ("v", "vfoo", 0),
    ("v1.2.3", "vbad", 1),
]


@pytest.mark.parametrize(("a", "b", "want"), COMPARE, ids=[f"{a}~{b}" for a, b, _ in COMPARE])
def test_compare(a: str, b: str, want: int) -> None:
    assert semver.compare(a, b) == want
    assert semver.compare(b, a) == -want


@pytest.mark.parametrize(
    ("version", "want"),
    [("v1", "v1.0"), ("v1.2.3-rc1", "v1.2"), ("bad", "")],
    ids=["shorthand", "prerelease", "invalid"],
)
def test_major_minor(version: str, want: str) -> None:
    assert semver.major_minor(version) == want


CUDA_VALID = [
    ("0", "0.0"),
    ("8", "8.0"),
    ("7.5", "7.5"),
    ("9.0.116", "9.0"),
    ("v11.6", "11.6"),
    ("4294967295.4294967295.4294967295", "4294967295.4294967295"),
    ("11.0.0-rc1", "11.0"),
    ("12.4.1+build", "12.4"),
]


@pytest.mark.parametrize(("version", "want"), CUDA_VALID, ids=[v for v, _ in CUDA_VALID])
def test_parse_major_minor(version: str, want: str) -> None:
    assert semver.parse_major_minor(version) == want


CUDA_INVALID = [
    ("foo", "invalid version string"),
    ("9.0.116.50", "invalid version string"),
    ("9.0.116foo", "invalid version string"),
    ("9.", "invalid version string"),
    ("9..0", "invalid version string"),
    (".5.10", "invalid version string"),
    ("-9", "invalid version string"),
    ("+9", "invalid version string"),
    ("09.0", "invalid version string"),
    ("legacy", "invalid version string"),
    ("vv9", "invalid version string"),
    ("9-rc1", "invalid version string"),
    ("", "invalid version string"),
    ("4294967296.0", "invalid major version"),
    ("9.4294967296", "invalid minor version"),
]


@pytest.mark.parametrize(
    ("version", "message"), CUDA_INVALID, ids=[v or "empty" for v, _ in CUDA_INVALID]
)
def test_parse_major_minor_invalid(version: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        semver.parse_major_minor(version)
