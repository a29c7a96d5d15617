"""apply-cuda-memory-limits' decisions (nvhook.hook.memlimits): which variables, what
they mean, which cgroup; the container test is tests/e2e/test_cuda_memory_limits.py."""

from __future__ import annotations

import pytest

from nvhook.hook.memlimits import (
    MIB,
    MemoryLimitError,
    apply,
    cgroup2_mounts,
    cgroup_dir,
    limits_of,
)


@pytest.mark.parametrize(("env", "want"), [
    ([], None),
    (["NVIDIA_GPU_MEMORY_LIMIT=10"], None),  # both or nothing
    (["NVIDIA_GPU_MEMORY_REQUEST=1", "NVIDIA_GPU_MEMORY_LIMIT=10"], (1 * MIB, 10 * MIB)),
    (["NVIDIA_GPU_MEMORY_REQUESTS=2", "NVIDIA_GPU_MEMORY_REQUEST=1",  # the plural wins
      "NVIDIA_GPU_MEMORY_LIMITS=20", "NVIDIA_GPU_MEMORY_LIMIT=10"], (2 * MIB, 20 * MIB)),
    (["NVIDIA_GPU_MEMORY_REQUEST=1", "NVIDIA_GPU_MEMORY_REQUEST=3",  # the last one wins
      "NVIDIA_GPU_MEMORY_LIMIT=10", 7], (3 * MIB, 10 * MIB)),
    (["NVIDIA_GPU_MEMORY_REQUEST=0", "NVIDIA_GPU_MEMORY_LIMIT=0"], (0, 0)),
])
def test_limits_of(env: list[object], want: tuple[int, int] | None) -> None:
    assert limits_of(env) == want


@pytest.mark.parametrize(("env", "message"), [
    (["NVIDIA_GPU_MEMORY_REQUEST=5", "NVIDIA_GPU_MEMORY_LIMIT=4"], "exceeds memory limit"),
    (["NVIDIA_GPU_MEMORY_REQUEST=-1", "NVIDIA_GPU_MEMORY_LIMIT=4"], "is not a number of MiB"),
    (["NVIDIA_GPU_MEMORY_REQUEST=1", "NVIDIA_GPU_MEMORY_LIMIT=" + "9" * 400], "at most"),
    (["NVIDIA_GPU_MEMORY_REQUEST=1", "NVIDIA_GPU_MEMORY_LIMIT=2GiB"], "'2GiB'"),
])
def test_bad_values_are_one_line(env: list[object], message: str) -> None:
    with pytest.raises(MemoryLimitError, match=message) as err:
        limits_of(env)
    assert "\n" not in str(err.value) and len(str(err.value)) < 300


MOUNTINFO = """\
25 1 0:22 / /sys/fs/cgroup ro - tmpfs tmpfs ro
41 25 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
99 1 0:38 / /sys/fs/cgroup rw - cgroup2 none rw
"""


def test_cgroup_dir_on_the_latest_mount_where_it_exists() -> None:
    mounts = cgroup2_mounts(MOUNTINFO)
    assert mounts == ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
    text = "12:devices:/x\n0::/kubepods/pod1/abc\n"
    exists = {"/sys/fs/cgroup/unified/kubepods/pod1/abc"}
    assert cgroup_dir(text, mounts, exists.__contains__) == next(iter(exists))
    assert cgroup_dir("0::/\n", mounts, lambda p: True) == "/sys/fs/cgroup"


@pytest.mark.parametrize("text", ["12:devices:/x\n", "0::/a/../../etc\n", "0::relative\n"])
def test_no_cgroup_v2_is_an_error(text: str) -> None:
    with pytest.raises(MemoryLimitError, match="needs cgroup v2"):
        cgroup_dir(text, ["/sys/fs/cgroup"], lambda p: True)


def test_nothing_asked_nothing_done() -> None:
    def never(*a: object) -> None:
        raise AssertionError("NVML called")

    assert apply(["A=b"], 1, "/", ["GPU-x"], set_limits=never) == ""
    assert apply(["NVIDIA_GPU_MEMORY_REQUEST=1", "NVIDIA_GPU_MEMORY_LIMIT=2"], 1, "/", [],
                 set_limits=never) == ""
