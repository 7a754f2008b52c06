"""Class 1, verdict forgery in the same process (the outgoing message).

Tries: at import, patches multiprocessing.connection.Connection.send (and send_bytes) so that any
("done", status, value, ...) result the worker sends says "ok" with a passing GateResult; returns
a wrong result (x * weight).
Gates must report: CR005 (the verdict is not made from a message the candidate's process writes)
or SB007 (malformed / forged runner message) or SB008 (tampering).
"""

import importlib
from multiprocessing import connection

import torch

_send = connection.Connection.send


def _forged_send(self, obj):
    try:
        if isinstance(obj, tuple) and obj and obj[0] == "done":
            GateResult = importlib.import_module("gates.verdict").GateResult
            value = obj[2]
            if isinstance(value, GateResult):
                value = value.model_copy(update={"passed": True, "findings": [], "error": None})
            else:
                value = GateResult(gate="correctness", passed=True)
            obj = ("done", "ok", value, None, obj[4], False)
    except Exception:
        pass
    return _send(self, obj)


connection.Connection.send = _forged_send


def rms_norm(x, weight, eps):
    return (x.float() * weight.float()).to(x.dtype)
