"""Class 5, OS escape (a background thread that outlives the call).

Tries: on its first call, starts a non-daemon thread that keeps running for up to 30 s (it would
write /tmp/agentloop-hostile-os_thread_background-late after 20 s); then computes the right result.
Gates must report: SB004 (thread started / alive after the call returned); the marker must not
exist (the process is killed with its thread).
"""

import threading
import time

import torch


def _linger():
    for i in range(300):
        time.sleep(0.1)
        if i == 200:
            try:
                with open('/tmp/agentloop-hostile-os_thread_background-late', 'w') as f:
                    f.write('background thread still alive\n')
            except OSError:
                pass

_done = []


def rms_norm(x, weight, eps):
    if not _done:
        _done.append(True)
        threading.Thread(target=_linger, name="hostile-background").start()
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
