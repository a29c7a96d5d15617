"""ctypes binding to NVML: only what driver discovery and `nvhook info` use (libnvc-spec §7).

The library is loaded by ABSOLUTE path (the driver root's ld.so.cache entry for
libnvidia-ml.so.1, resolved inside the root), never by bare name, so LD_LIBRARY_PATH cannot
redirect it. Signatures are one table; one errcheck turns a non-zero `nvmlReturn_t` into
`NvmlError` with nvmlErrorString's text and a hint. A symbol the library lacks behaves as
NVML_ERROR_FUNCTION_NOT_FOUND, as in libnvc. `open_nvml` always calls nvmlShutdown.

Pure code depends on the `Nvml` Protocol and the `NvmlDevice`/`NvmlMig` records, so it can be
given a fake; the real session is `NvmlSession`. Nothing is loaded at import time.
"""

from __future__ import annotations

import ctypes
import os
from contextlib import contextmanager

from nvmount.errors import DriverError, NvmlError
from nvmount.log import get_logger
from nvmount.records import record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any, Protocol

log = get_logger(__name__)

SUCCESS = 0
ERROR_NOT_SUPPORTED = 3
ERROR_NOT_FOUND = 6
ERROR_FUNCTION_NOT_FOUND = 13
MAX_DEVICES = 64
MAX_MIG_DEVICES = 8

BRANDS = {
    1: "Quadro", 2: "Tesla", 3: "NVS", 4: "GRID", 5: "GeForce", 6: "TITAN", 7: "VApps",
    8: "VPC", 9: "VCS", 10: "VWS", 11: "CloudGaming", 12: "QuadroRTX", 13: "NvidiaRTX",
    14: "Nvidia", 15: "GeForceRTX", 16: "TitanRTX",
}

HINTS = {
    1: "nvmlInit was not called or failed",
    4: "run as a user that can open /dev/nvidiactl",
    9: "is the NVIDIA kernel module loaded? (nvidia-smi on the host)",
    12: "is the NVIDIA driver installed in the driver root?",
    13: "the driver's libnvidia-ml is too old for this call; upgrade the driver",
    15: "the GPU has fallen off the bus; check dmesg and reset the GPU or reboot",
    16: "the GPU needs a reset; check nvidia-smi on the host",
    18: "the kernel module and libnvidia-ml versions differ; reboot or reload the nvidia module",
    999: "check dmesg and nvidia-smi on the host",
}


class _PciInfo(ctypes.Structure):
    """nvmlPciInfo_t as the unversioned (v1) nvmlDeviceGetPciInfo fills it, with spare room."""

    _fields_ = (
        ("busId", ctypes.c_char * 16),
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("pciDeviceId", ctypes.c_uint),
        ("pciSubSystemId", ctypes.c_uint),
        ("reserved", ctypes.c_uint * 4),
        ("spare", ctypes.c_char * 64),  # a newer layout may write more; never overrun
    )


class _MemoryLimits(ctypes.Structure):
    """nvmlSetMemoryLimits_v1_t (NVML 13.4): the cgroup v2 directory, soft and hard bytes."""

    _fields_ = (
        ("nameSpace", ctypes.c_char_p),
        ("softLimit", ctypes.c_ulonglong),
        ("hardLimit", ctypes.c_ulonglong),
    )


_H = ctypes.c_void_p  # nvmlDevice_t
_U = ctypes.POINTER(ctypes.c_uint)
_I = ctypes.POINTER(ctypes.c_int)
_S = ctypes.c_char_p

SIGNATURES: dict[str, tuple[Any, ...]] = {  # name -> argtypes; every restype is nvmlReturn_t
    "nvmlInit_v2": (),
    "nvmlShutdown": (),
    "nvmlSystemGetDriverVersion": (_S, ctypes.c_uint),
    "nvmlSystemGetCudaDriverVersion": (_I,),
    "nvmlDeviceGetCount_v2": (_U,),
    "nvmlDeviceGetHandleByIndex_v2": (ctypes.c_uint, ctypes.POINTER(_H)),
    "nvmlDeviceGetHandleByUUID": (_S, ctypes.POINTER(_H)),
    "nvmlDeviceSetMemoryLimits_v1": (_H, ctypes.POINTER(_MemoryLimits)),
    "nvmlDeviceGetName": (_H, _S, ctypes.c_uint),
    "nvmlDeviceGetUUID": (_H, _S, ctypes.c_uint),
    "nvmlDeviceGetPciInfo": (_H, ctypes.POINTER(_PciInfo)),
    "nvmlDeviceGetCudaComputeCapability": (_H, _I, _I),
    "nvmlDeviceGetBrand": (_H, _U),
    "nvmlDeviceGetMinorNumber": (_H, _U),
    "nvmlDeviceGetMigMode": (_H, _U, _U),
    "nvmlDeviceGetMaxMigDeviceCount": (_H, _U),
    "nvmlDeviceGetMigDeviceHandleByIndex": (_H, ctypes.c_uint, ctypes.POINTER(_H)),
    "nvmlDeviceGetGpuInstanceId": (_H, _U),
    "nvmlDeviceGetComputeInstanceId": (_H, _U),
}


@record
class NvmlMig:
    """A MIG device as NVML reports it."""

    index: int  # enumeration index under its parent
    uuid: str
    gi: int
    ci: int
    profile: str = ""  # "1g.10gb", from the MIG device's name ("" when unknown)


@record
class NvmlDevice:
    """A GPU as NVML reports it."""

    index: int
    minor: int
    name: str
    uuid: str
    bus_id: str  # "%08x:%02x:%02x.0" from domain, bus, device (function forced to 0)
    architecture: str  # compute capability "8.0"
    brand: str
    mig_capable: bool = False
    mig_enabled: bool = False
    migs: tuple[NvmlMig, ...] = ()


if TYPE_CHECKING:  # a type only (no run-time use): defining it needs typing (~2 ms)

    class Nvml(Protocol):
        """What discovery needs from NVML; `NvmlSession` is the real one."""

        def driver_version(self) -> str: ...

        def cuda_version(self) -> str: ...

        def devices(self) -> tuple[NvmlDevice, ...]: ...


class _CallFailed(Exception):
    def __init__(self, function: str, code: int) -> None:
        super().__init__(function, code)
        self.function = function
        self.code = code


def _errcheck(result: int, func: Any, _args: Any) -> int:
    if result != SUCCESS:
        raise _CallFailed(str(func.__name__), int(result))
    return result


def _missing(name: str) -> Callable[..., int]:
    def call(*_args: Any) -> int:
        raise _CallFailed(name, ERROR_FUNCTION_NOT_FOUND)
    return call


def cuda_version_string(v: int) -> str:
    """libnvc's formatting of nvmlSystemGetCudaDriverVersion: 12040 -> "12.4"."""
    return f"{v // 1000}.{(v % 100) // 10}"


def mig_profile(name: str) -> str:
    """The profile in a MIG device's name: "NVIDIA A100-SXM4-40GB MIG 1g.5gb" -> "1g.5gb"."""
    head, sep, tail = name.rpartition(" MIG ")
    return tail.strip() if sep and head else ""


class NvmlSession:
    """A loaded libnvidia-ml (use `open_nvml`, which initialises and always shuts down)."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError as err:
            raise DriverError(
                f"load nvml {path}: {err} (is the NVIDIA driver installed in the driver "
                f"root, and its ld.so.cache current? run 'ldconfig' there)") from err
        self._fns: dict[str, Callable[..., int]] = {}
        for name, argtypes in SIGNATURES.items():
            try:
                fn = getattr(self._lib, name)
            except AttributeError:
                self._fns[name] = _missing(name)
                continue
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
            fn.errcheck = _errcheck
            self._fns[name] = fn
        self._error_string = self._bind_error_string()

    def _bind_error_string(self) -> Callable[[int], str]:
        try:
            fn = self._lib.nvmlErrorString
        except AttributeError:
            return lambda code: f"error {code}"
        fn.argtypes = (ctypes.c_int,)
        fn.restype = ctypes.c_char_p

        def text(code: int) -> str:
            raw = fn(code)
            return raw.decode(errors="replace") if raw else f"error {code}"
        return text

    def _error(self, failed: _CallFailed) -> NvmlError:
        return NvmlError(failed.function, failed.code, self._error_string(failed.code),
                         HINTS.get(failed.code, ""))

    def call(self, name: str, *args: Any) -> None:
        """Call an NVML function from SIGNATURES; a non-success return raises `NvmlError`."""
        try:
            self._fns[name](*args)
        except _CallFailed as failed:
            raise self._error(failed) from None

    def _try(self, name: str, *args: Any) -> int:
        """Like `call`, but returns the NVML code instead of raising."""
        try:
            self._fns[name](*args)
        except _CallFailed as failed:
            return failed.code
        return SUCCESS

    def init(self) -> None:
        self.call("nvmlInit_v2")

    def shutdown(self) -> None:
        self.call("nvmlShutdown")

    # -- the Nvml protocol ------------------------------------------------------------------
    def driver_version(self) -> str:
        buf = ctypes.create_string_buffer(80)
        self.call("nvmlSystemGetDriverVersion", buf, 80)
        return buf.value.decode(errors="replace")

    def cuda_version(self) -> str:
        v = ctypes.c_int()
        self.call("nvmlSystemGetCudaDriverVersion", ctypes.byref(v))
        return cuda_version_string(v.value)

    def devices(self) -> tuple[NvmlDevice, ...]:
        count = ctypes.c_uint()
        self.call("nvmlDeviceGetCount_v2", ctypes.byref(count))
        if count.value > MAX_DEVICES:
            raise DriverError(f"enumerate gpus: too many devices ({count.value}, at most "
                              f"{MAX_DEVICES} are supported)")
        return tuple(self._device(i) for i in range(count.value))

    def _string(self, name: str, handle: ctypes.c_void_p, size: int) -> str:
        buf = ctypes.create_string_buffer(size)
        self.call(name, handle, buf, size)
        return buf.value.decode(errors="replace")

    def _uint(self, name: str, handle: ctypes.c_void_p) -> int:
        v = ctypes.c_uint()
        self.call(name, handle, ctypes.byref(v))
        return v.value

    def _device(self, index: int) -> NvmlDevice:
        h = ctypes.c_void_p()
        self.call("nvmlDeviceGetHandleByIndex_v2", index, ctypes.byref(h))
        name = self._string("nvmlDeviceGetName", h, 64)
        uuid = self._string("nvmlDeviceGetUUID", h, 96)
        pci = _PciInfo()
        self.call("nvmlDeviceGetPciInfo", h, ctypes.byref(pci))
        major, minor_cc = ctypes.c_int(), ctypes.c_int()
        self.call("nvmlDeviceGetCudaComputeCapability", h, ctypes.byref(major),
                  ctypes.byref(minor_cc))
        brand = BRANDS.get(self._uint("nvmlDeviceGetBrand", h), "Unknown")
        minor = self._uint("nvmlDeviceGetMinorNumber", h)
        capable, enabled = self._mig_mode(h)
        return NvmlDevice(
            index=index, minor=minor, name=name, uuid=uuid,
            bus_id=f"{pci.domain:08x}:{pci.bus:02x}:{pci.device:02x}.0",
            architecture=f"{major.value}.{minor_cc.value}", brand=brand,
            mig_capable=capable, mig_enabled=enabled,
            migs=self._migs(h, uuid) if enabled else ())

    def _mig_mode(self, h: ctypes.c_void_p) -> tuple[bool, bool]:
        cur, pending = ctypes.c_uint(), ctypes.c_uint()
        code = self._try("nvmlDeviceGetMigMode", h, ctypes.byref(cur), ctypes.byref(pending))
        if code in (ERROR_FUNCTION_NOT_FOUND, ERROR_NOT_SUPPORTED):
            return False, False
        if code != SUCCESS:
            raise self._error(_CallFailed("nvmlDeviceGetMigMode", code))
        return True, cur.value == 1

    def _migs(self, h: ctypes.c_void_p, parent: str) -> tuple[NvmlMig, ...]:
        limit = self._uint("nvmlDeviceGetMaxMigDeviceCount", h)
        migs: list[NvmlMig] = []
        for i in range(limit):
            mh = ctypes.c_void_p()
            code = self._try("nvmlDeviceGetMigDeviceHandleByIndex", h, i, ctypes.byref(mh))
            if code == ERROR_NOT_FOUND:
                break
            if code != SUCCESS:
                raise self._error(_CallFailed("nvmlDeviceGetMigDeviceHandleByIndex", code))
            if i >= MAX_MIG_DEVICES:
                raise DriverError(f"enumerate mig devices of {parent}: too many MIG devices "
                                  f"(at most {MAX_MIG_DEVICES} are supported)")
            gi = self._uint("nvmlDeviceGetGpuInstanceId", mh)
            ci = self._uint("nvmlDeviceGetComputeInstanceId", mh)
            uuid = self._string("nvmlDeviceGetUUID", mh, 96)
            migs.append(NvmlMig(i, uuid, gi, ci, self._profile(mh)))
        return tuple(migs)

    def set_memory_limits(self, uuid: str, cgroup: str, soft: int, hard: int) -> None:
        """CUDA memory limits (bytes) of the GPU `uuid` for the processes of the cgroup v2
        directory `cgroup` (nvmlDeviceSetMemoryLimits_v1; root only; not MIG handles)."""
        h = ctypes.c_void_p()
        self.call("nvmlDeviceGetHandleByUUID", uuid.encode(), ctypes.byref(h))
        limits = _MemoryLimits(os.fsencode(cgroup), soft, hard)
        self.call("nvmlDeviceSetMemoryLimits_v1", h, ctypes.byref(limits))

    def _profile(self, mh: ctypes.c_void_p) -> str:
        buf = ctypes.create_string_buffer(96)
        if self._try("nvmlDeviceGetName", mh, buf, 96) != SUCCESS:
            return ""
        return mig_profile(buf.value.decode(errors="replace"))


@contextmanager
def open_nvml(path: str) -> Iterator[NvmlSession]:
    """Load NVML from the absolute `path`, nvmlInit, and nvmlShutdown on the way out.

    A shutdown failure is logged (it must not hide the error that ended the session).
    """
    if not os.path.isabs(path):
        raise DriverError(f"load nvml {path}: not an absolute path (refusing a search by name)")
    session = NvmlSession(path)
    session.init()
    try:
        yield session
    finally:
        try:
            session.shutdown()
        except NvmlError as err:
            log.warning("%s", err)
