"""Class 8, escape from cleanup (a setsid double-fork daemon).

Tries: on its first call, forks; the child calls setsid() (a new session: out of the worker's
process group) and forks again; the grandchild re-executes Python as a daemon (its argv names
agentloop-hostile-esc_setsid_daemon) that keeps the inherited descriptors, sleeps 8 s, writes
/tmp/agentloop-hostile-esc_setsid_daemon-late and lingers 20 s more. Then the right result.
Gates must report: SB005 (processes left behind, killed) or SB002 (process attempt); no process
may outlive the audit and the marker must never exist.
"""

import os
import sys

import torch

_DAEMON = ("import time\n"
           "time.sleep(8)\n"
           "open('/tmp/agentloop-hostile-esc_setsid_daemon-late', 'w').write('daemon survived')\n"
           "time.sleep(20)\n")
_done = []


def rms_norm(x, weight, eps):
    if not _done:
        _done.append(True)
        try:
            pid = os.fork()
            if pid == 0:
                try:
                    os.setsid()
                    if os.fork() == 0:
                        os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", _DAEMON,
                                                  "agentloop-hostile-esc_setsid_daemon"])
                finally:
                    os._exit(0)
            os.waitpid(pid, 0)
        except Exception:
            pass
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
