"""Class 8, escape from cleanup (survive the death of the audit process).

Tries: at import, ignores SIGTERM / SIGHUP / SIGINT, clears any parent-death signal (prctl through
ctypes) and replaces os.getppid with a function that always returns the original parent, so a
watchdog thread polling getppid never notices its parent died; then each call renames its
process hst-esc_parent_k (/proc/self/comm: the test's cue) and sleeps up to 40 s (in 0.1 s steps)
before answering right. The test sends SIGTERM to the audit once it sees that name or a process
that ignores SIGTERM (the import ran; the cage refuses the rename), or after 30 s.
Gates must report: nothing (the audit is killed); the worker must not outlive it (5 s grace).
"""

import ctypes
import os
import signal
import time

import torch

for _sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    try:
        signal.signal(_sig, signal.SIG_IGN)
    except Exception:
        pass
try:
    ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG 0
except Exception:
    pass
_ppid = os.getppid()
os.getppid = lambda: _ppid


def rms_norm(x, weight, eps):
    try:
        with open("/proc/self/comm", "w") as f:
            f.write("hst-esc_parent_kill"[:15])
    except OSError:
        pass
    for _ in range(400):
        time.sleep(0.1)
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
