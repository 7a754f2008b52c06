"""Runner processes from the outside: what a runner may see, which uid it takes, and how the
judge finds and kills everything a runner started (by uid when it dropped root, else by the
marker in its environment). Standard library only; the judge side of the boundary."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

UID_SLOTS = 32
"""Runner uids a judge process takes from (alive at once: the current runner, the parked ones and
the spares; at most 6 with agentloop's pool, two per op of the decoder with the model check's twin
runs, 18 on the MoE). A uid is handed out again only once the runner that had it was destroyed
(`next_uid`), so two live runners never share one."""


# Where the runner may look ---------------------------------------------------------------
def project_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def keep_paths() -> list[str]:
    """What the runner needs to see: Python's prefixes and import path, without the project."""
    project = project_root()
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    out = set(prefixes)
    for p in sys.path:
        if not p or not os.path.exists(p):
            continue
        real = os.path.realpath(p)
        inside_project = real == project or real.startswith(project + "/")
        if inside_project and not any(real.startswith(x + "/") for x in prefixes):
            continue
        out.add(real)
    exe = os.path.realpath(sys.executable)
    out.add(os.path.dirname(os.path.dirname(exe)))
    return sorted(out)


def hidden_paths(reference_dirs: list[str]) -> list[str]:
    project = project_root()
    parent = os.path.dirname(project)
    home = os.path.expanduser("~")
    out = [project, "/root", "/home", home, "/tmp", "/var/tmp", "/dev/shm", *reference_dirs]
    if parent != "/":
        out.append(parent)
    return sorted({os.path.realpath(p) for p in out if os.path.isdir(p)})


def _uid_range() -> tuple[int, int]:
    """(first uid, how many) the runners may take, inside this process's user namespace map."""
    try:
        spans = [tuple(map(int, ln.split())) for ln in Path("/proc/self/uid_map").read_text().splitlines()]
    except OSError:
        spans = []
    for inside, _, count in spans:
        if count >= 2**24:
            return inside + 1_000_000, 2**22
    best = max(spans, key=lambda s: s[2], default=(0, 0, 65536))
    return best[0] + best[2] // 2, max(1, best[2] // 2 - 1)


_runner_count = [0]
_uids_in_use: set[int] = set()
_uid_lock = threading.Lock()


def runner_uid(judge_pid: int, n: int) -> int:
    """The uid of the judge's `n`th runner."""
    base, span = _uid_range()
    return base + (judge_pid * UID_SLOTS + n % UID_SLOTS) % span


def next_uid() -> int:
    """A uid no live runner of this judge has (a parked runner may outlive many newer ones);
    RuntimeError when all UID_SLOTS are taken. `destroy` gives it back."""
    with _uid_lock:
        for _ in range(UID_SLOTS):
            _runner_count[0] += 1
            uid = runner_uid(os.getpid(), _runner_count[0])
            if uid not in _uids_in_use:
                _uids_in_use.add(uid)
                return uid
    raise RuntimeError(f"all {UID_SLOTS} runner uids of this judge are in use")


# Process bookkeeping ---------------------------------------------------------------------
def pids_of_uid(uid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            for line in Path(f"/proc/{entry}/status").read_text().splitlines():
                if line.startswith("Uid:"):
                    if int(line.split()[1]) == uid:
                        out.append(int(entry))
                    break
        except (OSError, ValueError):
            continue
    return out


def pids_with_marker(marker: str) -> list[int]:
    """Processes whose environment holds AGENTLOOP_RUNNER=<marker...> (the prefix is enough)."""
    needle = f"AGENTLOOP_RUNNER={marker}".encode()
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if needle in Path(f"/proc/{entry}/environ").read_bytes():
                    out.append(int(entry))
            except OSError:
                continue
    return out


def kill_uid(uid: int) -> None:
    """Kill every process of `uid` (kill(-1) from a child that takes that uid)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child only makes system calls, then exits
        try:
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def rss(pid: int) -> int:
    """Private resident memory of a process (RssAnon): shared memory such as the arena, which the
    judge owns, does not count against the runner."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


SIGNAL_MEANING = {
    "SIGSEGV": "segmentation fault (a stack overflow or a bad memory access)", "SIGBUS": "bus error",
    "SIGABRT": "aborted", "SIGFPE": "arithmetic error", "SIGILL": "illegal instruction",
    "SIGKILL": "killed, possibly for running out of memory", "SIGXCPU": "CPU-time limit exceeded",
    "SIGXFSZ": "file-size limit exceeded",
}


def describe_exit(code: int | None, cpu_seconds: float | None = None) -> str:
    """How a process (a runner, a judge worker) ended, in a few words: its signal and what that
    usually means, or its exit status."""
    if code is None:
        return "stopped answering"
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        meaning = SIGNAL_MEANING.get(name, "signal")
        if name == "SIGXCPU" and cpu_seconds:
            meaning = f"exceeded its CPU-time limit of {cpu_seconds:g} s"
        return f"{name} ({meaning})"
    return f"exit status {code}"


def destroy(proc: subprocess.Popen, sock: socket.socket, workdir: str, uid: int, marker: str,
            salvage: list | None = None) -> None:
    """Kill the runner and all it started, run `salvage` (callables that copy what is worth
    keeping out of its work directory, once nothing of it runs), and remove its files."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
        proc.wait(timeout=10)
    except (subprocess.TimeoutExpired, OSError):
        pass
    for _ in range(3):
        pids = pids_of_uid(uid) if uid > 0 else pids_with_marker(marker)
        if not pids:
            break
        if uid > 0:
            kill_uid(uid)
        else:
            for p in pids:
                try:
                    os.kill(p, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        time.sleep(0.05)
    sock.close()
    for fn in salvage or ():
        fn()
    shutil.rmtree(workdir, ignore_errors=True)
    if uid > 0 and not pids_of_uid(uid):  # a uid with survivors is never handed out again
        with _uid_lock:
            _uids_in_use.discard(uid)




def sweep_judge(judge_pid: int) -> None:
    """Kill whatever the runners of a judge process left behind, after that judge was killed
    (its own clean-up never ran)."""
    if os.geteuid() == 0:
        for n in range(UID_SLOTS):
            uid = runner_uid(judge_pid, n)
            if pids_of_uid(uid):
                kill_uid(uid)
        return
    for pid in pids_with_marker(f"{judge_pid}-"):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
