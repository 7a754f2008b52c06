"""Class 8, escape from cleanup (the worker re-executes itself into something else).

Tries: on its first call, replaces its own process image (os.execv, keeping every inherited
descriptor) with a Python that sleeps 30 s (argv names agentloop-hostile-esc_reexec), so the
parent's channel stays open with no driver behind it.
Gates must report: SB002 (exec attempt) or a gate error (timed out / runner died); nothing may
outlive the audit.
"""

import os
import sys

import torch


def rms_norm(x, weight, eps):
    os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", "import time; time.sleep(30)",
                              "agentloop-hostile-esc_reexec"])
