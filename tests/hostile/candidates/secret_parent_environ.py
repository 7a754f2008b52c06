"""Class 4, secrets (the parent processes' environments).

Tries: walks up its parent processes (/proc/PID/stat) and reads each /proc/PID/environ, keeping
values with "hostile-test" in them (the test's fake keys), then raises a RuntimeError listing them.
Gates must report: SB003 (reads outside the temp dir) or the gate error of the exception; no fake
key may appear in any output (another uid cannot read the parent's environ; messages are scrubbed).
"""

import os

import torch


def _parent_keys():
    found, pid = [], os.getppid()
    for _ in range(6):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                for item in f.read().split(b"\0"):
                    value = item.decode(errors="replace").partition("=")[2]
                    if "hostile-test" in value:
                        found.append(value)
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return sorted(set(found))


def rms_norm(x, weight, eps):
    raise RuntimeError("hostile secret dump: " + (" ".join(_parent_keys()) or "none found"))
