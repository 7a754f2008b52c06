"""The runner's audit hook: the in-process line behind the OS cage (`gates.runner.cage`).

Installed before the candidate is loaded, it refuses what a candidate must not do (SPEC.md §2)
and records each attempt as a finding the judge passes on: sockets and name lookups (SB001),
processes (SB002), files outside the work directory or inside the project (SB003, AC003 for
the task's reference), ctypes (which would step around this hook), gc walks and new audit
hooks from candidate code (SB008), and frames taken by candidate code (SB008: `sys._getframe`,
`inspect`'s and `traceback`'s stacks, a traceback's or a generator's frame, trace and profile
functions), through which it could tell the judge's callers from a serving engine's.
Python cannot make an in-process hook tamper-proof; the cage is what holds when it is beaten.
"""

from __future__ import annotations

import inspect
import os
import sys
import sysconfig
import threading
import traceback

_NETWORK = {"socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg",
            "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo"}
_PROCESS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
            "os.forkpty", "os.kill", "os.killpg", "pty.spawn"}
_PATHS = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.symlink",
          "os.link", "os.truncate", "shutil.rmtree", "shutil.copyfile", "shutil.move", "os.utime"}
_LISTING = {"os.listdir", "os.scandir", "glob.glob"}
_INTROSPECTION = {"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.addaudithook"}
_FRAMES = {"sys._getframe", "sys._getframemodulename", "sys._current_frames", "sys.settrace",
           "sys.setprofile", "sys.monitoring.register_callback"}
_FRAME_ATTRIBUTES = {"tb_frame", "gi_frame", "cr_frame", "ag_frame"}
_WATCHED = _NETWORK | _PROCESS | _PATHS | _LISTING | _INTROSPECTION | _FRAMES | {"open", "object.__getattr__"}
MAX_EVENTS = 20


class Refused(PermissionError):
    """What the candidate tried is not allowed in an evaluation."""


class Recorder:
    """The findings the hook made, in order, without repeats."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def add(self, rule: str, message: str) -> None:
        with self._lock:
            if (rule, message) not in self.events and len(self.events) < MAX_EVENTS:
                self.events.append((rule, message))

    def take(self) -> list[list[str]]:
        with self._lock:
            out, self.events = [list(e) for e in self.events], []
        return out


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def install(recorder: Recorder, *, workdir: str, writable: list[str], hidden: list[str], keep: list[str],
            reference_dirs: list[str], candidate_dir: str, neutral_code: object = None) -> None:
    """Install the hook. Its state is bound into the closure now; nothing it uses is looked up
    later in a module the candidate could patch."""
    stdlib = sysconfig.get_paths()["stdlib"]
    here = os.path.dirname(os.path.abspath(__file__))
    trusted = tuple(sorted({os.path.realpath(p) for p in keep} | {here}))
    writable = (os.path.realpath(workdir), "/dev/null", *(os.path.realpath(w) for w in writable))
    hidden_roots = tuple(os.path.realpath(h) for h in hidden)
    keep_roots = tuple(os.path.realpath(k) for k in keep)
    references = tuple(os.path.realpath(r) for r in reference_dirs)
    candidate_root = os.path.realpath(candidate_dir)
    own = f"/proc/{os.getpid()}/"
    getframe, realpath, fspath, local = sys._getframe, os.path.realpath, os.fspath, threading.local()
    add = recorder.add
    # Stdlib modules whose functions hand the frames they take to their caller.
    handing = {inspect.__file__, traceback.__file__}
    verdicts: dict[object, bool | None] = {}

    def untrusted_code(code: object) -> bool | None:
        """True for the candidate's code (or code with no file, which only the candidate makes
        here), False for trusted code, None for the standard library's (look further out)."""
        if code in verdicts:
            return verdicts[code]
        name = code.co_filename  # type: ignore[attr-defined]
        if code is neutral_code:
            verdict: bool | None = False
        elif name.startswith(stdlib) and "site-packages" not in name:
            verdict = None
        elif name.startswith("<"):
            verdict = True
        else:
            real = realpath(name)
            verdict = real.startswith(candidate_root) or not _under(real, trusted)
        verdicts[code] = verdict
        return verdict

    def caller_untrusted() -> bool:
        """Whether the innermost frame outside the standard library is the candidate's."""
        frame = getframe(2)
        while frame is not None:
            verdict = untrusted_code(frame.f_code)
            if verdict is not None:
                return verdict
            frame = frame.f_back
        return False

    def frame_taker_untrusted() -> bool:
        """Whether the code that takes a frame is the candidate's, directly or through `inspect`
        or `traceback`. The standard library's own uses (`collections.namedtuple`, `enum`,
        `typing`, `logging` looking up their caller's module) and torch's and Triton's keep
        theirs: they do not hand the judge's frames to the candidate."""
        frame = getframe(2)
        while frame is not None and frame.f_code.co_filename in handing:
            frame = frame.f_back
        return frame is not None and bool(untrusted_code(frame.f_code))

    def path_of(arg: object) -> str | None:
        try:
            if isinstance(arg, int):
                return None
            return realpath(fspath(arg) if not isinstance(arg, bytes) else arg.decode(errors="replace"))
        except (TypeError, ValueError):
            return None

    def readable(path: str) -> tuple[str, str] | None:
        if path.startswith("/proc/") and not path.startswith(("/proc/self/", own)) and \
                path.split("/")[2].isdigit():
            return "SB003", f"the candidate tried to read another process's {path}"
        if _under(path, references):
            return "AC003", f"the candidate tried to read the task's reference files ({path})"
        visible = keep_roots + (here,) + writable
        if _under(path, hidden_roots) and not _under(path, visible):
            return "SB003", f"the candidate tried to read {path}, outside its work directory"
        return None

    def hook(event: str, args: tuple) -> None:
        if (event not in _WATCHED and not event.startswith("ctypes.")) or getattr(local, "busy", False):
            return
        local.busy = True
        try:
            problem = None
            if event in _NETWORK:
                problem = "SB001", f"network access is disabled in evaluations ({event})"
            elif event in _PROCESS:
                if caller_untrusted():
                    problem = "SB002", f"starting or signalling processes is not allowed ({event})"
            elif event in _FRAMES or (event == "object.__getattr__" and len(args) > 1 and
                                      args[1] in _FRAME_ATTRIBUTES):
                if frame_taker_untrusted():
                    what = event if event in _FRAMES else f"the {args[1]} attribute"
                    problem = "SB008", f"the candidate looked at the call stack ({what}), which " \
                                       "evaluations refuse"
            elif event in _INTROSPECTION or event.startswith("ctypes."):
                if caller_untrusted():
                    problem = "SB008", f"the candidate called {event}, which evaluations refuse"
            elif event == "open":
                path = path_of(args[0])
                mode, flags = args[1] if len(args) > 1 else None, args[2] if len(args) > 2 else 0
                writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                    (isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))
                if path and writing and not _under(path, writable):
                    problem = "SB003", f"the candidate tried to write {path}, outside its work directory"
                elif path:
                    problem = readable(path)
            elif event in _PATHS:
                for arg in args[:2]:
                    path = path_of(arg)
                    if path and not _under(path, writable):
                        problem = "SB003", f"the candidate tried to change {path} ({event})"
                        break
            elif event in _LISTING:
                path = path_of(args[0]) if args and args[0] is not None else None
                problem = readable(path) if path else None
            if problem:
                add(*problem)
                raise Refused(problem[1])
        finally:
            local.busy = False

    sys.addaudithook(hook)
