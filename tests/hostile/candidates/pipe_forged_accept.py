"""Class 3, an attack on the parent through the result channel (a well-formed forged result).

Tries: on its first call, writes a genuine pickled ("done", "ok", GateResult(passed=True), ...)
message (the old worker protocol) to every socket / pipe descriptor it holds, before the real
result, then returns a wrong result (x * weight). Whatever the parent reads first is a pass.
Gates must report: CR005 (the verdict comes from the judge's own comparison) or SB007 (forged
runner message).
"""

import importlib
import os
import pickle
import struct

import torch


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
        try:
            value = importlib.import_module("gates.verdict").GateResult(gate="correctness", passed=True)
        except Exception:
            value = {"gate": "correctness", "passed": True, "findings": []}
        payload = pickle.dumps(("done", "ok", value, None, 0.01, False))
        for fd in _channels():
            try:
                os.write(fd, struct.pack("!i", len(payload)) + payload)
            except OSError:
                pass
    return (x.float() * weight.float()).to(x.dtype)
