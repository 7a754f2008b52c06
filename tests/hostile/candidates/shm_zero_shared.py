"""Class 3, an attack on the judge through shared memory (the transport of inputs and outputs).

Tries: on every call, finds the shared-memory segments its own process holds (descriptors that
point to /dev/shm/... or memfd:..., and /dev/shm files mapped in /proc/self/maps: only this
evaluation's, never other processes' segments), overwrites every byte of each with zeros, returns
a zero tensor, and zeroes them again from a thread 5 ms after returning. A judge that kept its
reference outputs, or compared the candidate's output, in memory the runner can write would see
zeros = zeros.
Gates must report: CR005 (the judge's own copies are private and taken before comparing), AC001
(inputs written), SB003, SB008 or SB010 (written after return).
"""

import mmap
import os
import threading
import time

import torch


def _segments():
    paths, fds = set(), []
    for entry in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{entry}")
        except OSError:
            continue
        if target.startswith(("/dev/shm/", "memfd:")):
            fds.append(int(entry))
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip() if len(line.split()) >= 6 else ""
                if path.startswith("/dev/shm/"):
                    paths.add(path)
    except OSError:
        pass
    return fds, paths


def _zero_fd(fd):
    try:
        size = os.fstat(fd).st_size
        if size:
            with mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as m:
                m[:] = bytes(size)
    except (OSError, ValueError):
        pass


def _zero_all():
    fds, paths = _segments()
    for fd in fds:
        _zero_fd(fd)
    for path in paths:
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            continue
        try:
            _zero_fd(fd)
        finally:
            os.close(fd)


def _later():
    time.sleep(0.005)
    _zero_all()


def rms_norm(x, weight, eps):
    _zero_all()
    threading.Thread(target=_later, daemon=True).start()
    return torch.zeros_like(x)
