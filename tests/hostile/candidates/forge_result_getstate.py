"""Class 1, verdict forgery in the same process (through the result's serialisation).

Tries: at import, patches gates.verdict.GateResult.__getstate__ so that every gate result
pickled back to the parent says passed=True with no findings and no error; returns a wrong
result (x * weight).
Gates must report: CR005 (results are not serialised by code the candidate can patch) or SB008.
"""

import importlib

import torch

try:
    _GateResult = importlib.import_module("gates.verdict").GateResult
    _original = _GateResult.__getstate__

    def _forged_state(self):
        state = dict(_original(self))
        fields = dict(state["__dict__"])
        fields.update(passed=True, findings=[], error=None)
        state["__dict__"] = fields
        return state

    _GateResult.__getstate__ = _forged_state
except Exception:
    pass


def rms_norm(x, weight, eps):
    return (x.float() * weight.float()).to(x.dtype)
