"""Class 1, verdict forgery in the same process.

Tries: at import, replaces gates.correctness.correctness_gate with one that returns a passing
GateResult and gates.correctness.anticheat_findings with one that finds nothing; returns a wrong
result (x * weight).
Gates must report: CR005 (the judge never imported this module) or SB008 (tampering seen).
"""

import importlib

import torch

try:
    _corr = importlib.import_module("gates.correctness")
    _verdict = importlib.import_module("gates.verdict")
    _corr.correctness_gate = lambda fn, task, device, **kw: _verdict.GateResult(gate="correctness", passed=True)
    _corr.anticheat_findings = lambda *args, **kwargs: []
except Exception:
    pass


def rms_norm(x, weight, eps):
    return (x.float() * weight.float()).to(x.dtype)
