"""The arenas: memory the judge owns and shares with one runner by a file descriptor. Inputs go
in, outputs come back; host memory (a memfd, page-locked on a GPU) or, on a GPU, device memory."""

from __future__ import annotations

import mmap
import os
import weakref

import torch

from gates.runner import wire
from gates.runner.device_memory import DeviceMemoryError, SharedDeviceMemory
from gates.runner.driver import pin, unpin


class HostArena:
    """Shared host memory the judge owns: inputs go in, outputs come back. Grows by replacement.
    A CPU runner's arena; a GPU runner's only where device memory cannot be shared (then
    page-locked, both sides pinning their mapping, so copies to and from the device run at DMA
    speed)."""

    ALIGN = wire.ALIGN
    on_device = False

    def __init__(self, gpu: bool = False) -> None:
        self.size = 0
        self.bytes: torch.Tensor | None = None
        self.fd: int | None = None
        self.gpu = gpu
        self._unpin: weakref.finalize | None = None

    def ensure(self, size: int) -> int | None:
        """Make the arena at least `size` bytes; the new memfd to send, or None if it fits."""
        if size <= self.size:
            return None
        size = max(size, 2 * self.size, 1 << 20)
        fd = os.memfd_create("agentloop-arena", 0)
        os.ftruncate(fd, size)
        self.release()
        self.map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.bytes = torch.frombuffer(self.map, dtype=torch.uint8)
        if self.gpu and pin(torch, self.bytes):
            # Page-locked memory is scarce: unlocked when replaced, when the runner stops, or
            # at the latest when this arena is collected.
            self._unpin = weakref.finalize(self, unpin, torch, self.bytes.data_ptr())
        self.size, self.fd = size, fd
        return fd

    def release(self) -> None:
        if self._unpin is not None:
            self._unpin()
            self._unpin = None

    def view(self, offset: int, dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
        n = dtype.itemsize * numel(shape)
        return self.bytes[offset:offset + n].view(dtype).view(shape)

    def settle(self) -> None:
        """Nothing to wait for: copies between host memory and the arena are done on return."""


class DeviceArena:
    """GPU memory shared with a GPU runner (`gates.runner.device_memory`): inputs and outputs
    move device to device, instead of crossing host memory twice each way (seconds per stage
    for vocabulary-sized tasks). Grows by replacement like the host arena. Each side
    synchronises the device before the other reads what it wrote."""

    on_device = True

    def __init__(self, device: int) -> None:
        self.device = device
        self.size = 0
        self.memory: SharedDeviceMemory | None = None
        self.bytes: torch.Tensor | None = None

    def ensure(self, size: int) -> int | None:
        """As `HostArena.ensure`; raises DeviceMemoryError where the driver refuses."""
        if size <= self.size:
            return None
        memory = SharedDeviceMemory.create(max(size, 2 * self.size, 1 << 21), self.device)
        try:
            view = memory.tensor(torch)
            # The driver may hand back pages this judge used before (a reference's outputs): the
            # runner sees only zeros and what is written for it.
            view.zero_()
            torch.cuda.synchronize(self.device)
            fd = memory.export()
        except (DeviceMemoryError, RuntimeError, TypeError) as exc:
            memory.close()
            raise DeviceMemoryError(f"shared device memory unusable: {exc}",
                                    getattr(exc, "code", 0)) from None
        self.release()
        self.memory, self.size, self.bytes = memory, memory.size, view
        return fd

    def release(self) -> None:
        if self.memory is None:
            return
        memory, self.memory, self.bytes, self.size = self.memory, None, None, 0
        try:
            torch.cuda.synchronize(self.device)  # no copy of the judge's still reads or writes it
        except RuntimeError:  # a broken CUDA context: the worker is replaced; let go all the same
            pass
        memory.close()

    view = HostArena.view

    def settle(self) -> None:
        """Wait until this judge's copies into and out of the arena are done: the runner, another
        process, reads what was written, and may write where was read."""
        torch.cuda.synchronize(self.device)


device_arena_refused: list[str] = []
"""Why this process's driver refused device arenas (then every runner uses a host arena)."""
ARENA_VARIABLE = "AGENTLOOP_ARENA"
"""Set to "host" to keep GPU runners on the host arena (to compare, or where device arenas
misbehave)."""


def new_arena(device: str) -> HostArena | DeviceArena:
    if device == "cpu":
        return HostArena()
    if device_arena_refused or os.environ.get(ARENA_VARIABLE) == "host":
        return HostArena(gpu=True)
    return DeviceArena(torch.cuda.current_device())


def numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


aligned = wire.aligned
