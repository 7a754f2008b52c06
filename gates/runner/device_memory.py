"""GPU memory two processes share: a CUDA virtual-memory allocation exported as a file
descriptor (`cuMemExportToShareableHandle`, POSIX handle type), sent over the runner's socket
like the host arena's memfd and mapped by the other side. The judge creates it, the runner maps
it; inputs and outputs then move device to device instead of crossing host memory twice each
way. A descriptor needs no shared PID or IPC namespace, so it works across the cage, where
CUDA's legacy IPC handles do not.

Both sides of the boundary use this module: it imports nothing from the judge, and only ctypes
and the CUDA driver library. Where the driver refuses (no virtual-memory management, a
container without the handle type), `SharedDeviceMemory` raises `DeviceMemoryError` and the
caller keeps the host arena.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

_POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_PINNED = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
_ON_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE
_READ_WRITE = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE


OUT_OF_MEMORY = 2  # CUDA_ERROR_OUT_OF_MEMORY


class DeviceMemoryError(RuntimeError):
    """The driver refused a step of sharing device memory (one line, with the CUDA error);
    `code` is the CUDA error (0 where the failure was not the driver's answer)."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _Properties(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _Access(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


@functools.cache
def _driver() -> Any:
    """libcuda's functions this module calls, with their argument types (loaded once: a
    candidate that later replaces ctypes' loader does not reach what the driver calls)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise DeviceMemoryError(f"no CUDA driver library: {exc}") from None
    u64, size, ptr = ctypes.c_ulonglong, ctypes.c_size_t, ctypes.c_void_p
    signatures = {
        "cuInit": [ctypes.c_uint],
        "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
        "cuCtxGetCurrent": [ctypes.POINTER(ptr)],
        "cuCtxSetCurrent": [ptr],
        "cuDevicePrimaryCtxRetain": [ctypes.POINTER(ptr), ctypes.c_int],
        "cuMemGetAllocationGranularity": [ctypes.POINTER(size), ctypes.POINTER(_Properties), ctypes.c_int],
        "cuMemCreate": [ctypes.POINTER(u64), size, ctypes.POINTER(_Properties), u64],
        "cuMemExportToShareableHandle": [ctypes.POINTER(ctypes.c_int), u64, ctypes.c_int, u64],
        "cuMemImportFromShareableHandle": [ctypes.POINTER(u64), ptr, ctypes.c_int],
        "cuMemAddressReserve": [ctypes.POINTER(u64), size, size, u64, u64],
        "cuMemMap": [u64, size, size, u64, u64],
        "cuMemSetAccess": [u64, size, ctypes.POINTER(_Access), size],
        "cuMemUnmap": [u64, size],
        "cuMemAddressFree": [u64, size],
        "cuMemRelease": [u64],
    }
    table = {}
    for name, argtypes in signatures.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise DeviceMemoryError(f"the CUDA driver has no {name}") from None
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
        table[name] = fn
    return table


def _call(name: str, *args: Any) -> None:
    result = _driver()[name](*args)
    if result != 0:
        raise DeviceMemoryError(f"{name} failed with CUDA error {result}", result)


def _properties(device: int) -> _Properties:
    prop = _Properties()
    prop.type = _PINNED
    prop.requestedHandleTypes = _POSIX_FD
    prop.location = _Location(_ON_DEVICE, device)
    return prop


def _use_context(device: int) -> None:
    """Make the device's primary context (the one torch uses) current in this thread."""
    _call("cuInit", 0)
    current = ctypes.c_void_p()
    _call("cuCtxGetCurrent", ctypes.byref(current))
    if current.value:
        return
    handle = ctypes.c_int()
    _call("cuDeviceGet", ctypes.byref(handle), device)
    context = ctypes.c_void_p()
    _call("cuDevicePrimaryCtxRetain", ctypes.byref(context), handle.value)
    _call("cuCtxSetCurrent", context)


def granularity(device: int) -> int:
    _use_context(device)
    out = ctypes.c_size_t()
    _call("cuMemGetAllocationGranularity", ctypes.byref(out), ctypes.byref(_properties(device)), 0)
    return out.value


class _ArrayInterface:
    """What torch.as_tensor reads to view device memory it does not own."""

    def __init__(self, pointer: int, size: int) -> None:
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (pointer, False),
                                         "version": 3, "strides": None}


class SharedDeviceMemory:
    """One process's mapping of a shareable allocation on `device` (an ordinal as torch counts
    them): `create` allocates one, `export` gives a descriptor for another process, `open` maps
    one received. `close` unmaps it (the memory goes once no process maps it)."""

    def __init__(self, handle: int, size: int, device: int) -> None:
        self.handle, self.size, self.device, self.pointer = handle, size, device, 0
        try:
            pointer = ctypes.c_ulonglong()
            _call("cuMemAddressReserve", ctypes.byref(pointer), size, 0, 0, 0)
            self.pointer = pointer.value
            _call("cuMemMap", self.pointer, size, 0, handle, 0)
            access = _Access(_Location(_ON_DEVICE, device), _READ_WRITE)
            _call("cuMemSetAccess", self.pointer, size, ctypes.byref(access), 1)
        except DeviceMemoryError:
            self.close()
            raise

    @classmethod
    def create(cls, size: int, device: int) -> SharedDeviceMemory:
        """At least `size` bytes (rounded up to the driver's granularity)."""
        step = granularity(device)
        size = -(-size // step) * step
        handle = ctypes.c_ulonglong()
        _call("cuMemCreate", ctypes.byref(handle), size, ctypes.byref(_properties(device)), 0)
        return cls(handle.value, size, device)

    @classmethod
    def open(cls, fd: int, size: int, device: int) -> SharedDeviceMemory:
        """Map the allocation behind `fd` (the caller still owns and closes `fd`)."""
        _use_context(device)
        handle = ctypes.c_ulonglong()
        _call("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD)
        return cls(handle.value, size, device)

    def export(self) -> int:
        """A new descriptor for the allocation; the caller closes it once sent."""
        fd = ctypes.c_int(-1)
        _call("cuMemExportToShareableHandle", ctypes.byref(fd), self.handle, _POSIX_FD, 0)
        return fd.value

    def tensor(self, torch: Any) -> Any:
        """The memory as a uint8 tensor on the device (valid until `close`)."""
        return torch.as_tensor(_ArrayInterface(self.pointer, self.size), device=f"cuda:{self.device}")

    def close(self) -> None:
        """Unmap and let go; the caller has synchronised the device (no copy still reads it)."""
        pointer, handle, self.pointer, self.handle = self.pointer, self.handle, 0, 0
        driver = _driver()
        if pointer:
            driver["cuMemUnmap"](pointer, self.size)
            driver["cuMemAddressFree"](pointer, self.size)
        if handle:
            driver["cuMemRelease"](handle)
