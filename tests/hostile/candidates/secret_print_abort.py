"""Class 4, secrets (printed, then a crash so the log tail is reported).

Tries: prints the fake keys it finds (own environment and the parents' /proc/PID/environ) to
stdout and stderr, as a warning and as the last line of output, then calls os.abort(): the crash
description quotes the tail of the worker's log.
Gates must report: a crash error (SIGABRT); no fake key in any output.
"""

import os
import sys
import warnings

import torch


def _keys():
    found = [v for v in os.environ.values() if "hostile-test" in v]
    pid = os.getppid()
    for _ in range(6):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                found += [i.decode(errors="replace").partition("=")[2] for i in f.read().split(b"\0")
                          if b"hostile-test" in i]
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return " ".join(sorted(set(found))) or "none found"


def rms_norm(x, weight, eps):
    keys = _keys()
    for _ in range(50):
        print("hostile secret dump:", keys, flush=True)
        print("hostile secret dump:", keys, file=sys.stderr, flush=True)
    warnings.warn(f"hostile secret dump: {keys}", stacklevel=1)
    sys.stderr.write(f"hostile secret dump: {keys}\n")
    sys.stderr.flush()
    os.abort()
