"""The client of a caged runner: the runner process per candidate, and calls into it.

The judge (a sandbox worker that never imports candidate code) starts a `RunnerProcess`
(`python -I` running `gates.runner.driver`, which cages itself), hands it the candidate's code
and calls the entry through `RemoteEntry`, which looks like the entry function to the gates:
tensors in, a tuple of tensors out. Inputs travel through an arena the judge owns and shares
with the runner by a file descriptor (host memory in a memfd; on a GPU, device memory); outputs
come back as bytes the judge copies out of the arena into tensors it makes itself, after
checking each header (dtype, shape, strides, device, exact type). Nothing from
the runner is unpickled or called. What the runner reports besides its outputs can only add
findings (`Runner.take_findings`).

The judge watches the runner from outside: a deadline per job, resident memory, the size of
its output (only the tail is kept), and at the end every process it left behind (found by its
uid when it dropped root, else by a marker in its environment) is killed and reported.
"""


from __future__ import annotations

import collections
import functools
import hashlib
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from gates.judge import kernel_cache
from gates.judge.arena import HostArena, aligned, device_arena_refused, new_arena, numel
from gates.judge.environment import runner_environ
from gates.judge.runner_process import (
    describe_exit,
    destroy,
    hidden_paths,
    keep_paths,
    next_uid,
    pids_of_uid,
    pids_with_marker,
    rss,
)
from gates.runner import wire
from gates.runner.device_memory import OUT_OF_MEMORY, DeviceMemoryError
from gates.runner.driver import dtype_table
from gates.runner.loader import CandidateError
from gates.verdict import Finding

BOOT = ("import json, sys; sys.path[:] = json.loads(sys.argv[2])['sys_path']; "
        "from gates.runner.driver import main; main()")
LOG_TAIL = 16 * 1024
LOG_LIMIT = 64 * 2**20
"""Bytes of stdout/stderr a runner may write before it is stopped (SB006)."""
MAX_OUTPUT_BYTES = 32 * 2**30
DEFAULT_MEMORY = 4 * 2**30
"""Host memory a runner may add to what it holds once started (the task shapes need far less)."""
MAX_DIMS = 8
OUTPUT_ROOM_LIMIT = 4 * 2**30
"""At most this much room for outputs is kept in the arena ahead of a call (from the last call's
outputs); larger outputs take the two-step placing."""
RULE = re.compile(r"^(SB0\d\d|AC00\d)$")
HINTS = {
    "SB001": "Evaluations have no network: compute everything from the inputs.",
    "SB002": "Do not start, fork or signal processes; launch kernels from the calling thread.",
    "SB003": "Read and write nothing outside the call: no files, no project sources.",
    "SB004": "Finish all work before returning; start no threads.",
    "SB005": "Start no process that outlives the call.",
    "SB006": "Stay within the memory, CPU, output and recursion limits of an evaluation.",
    "SB007": "Return plain torch.Tensor outputs (no subclasses or wrappers).",
    "SB008": "Do not patch torch, builtins or the harness, and do not use ctypes or gc introspection.",
    "SB009": "Compute every call honestly: timed calls are checked like any other.",
    "SB010": "Synchronise side streams and threads before returning; outputs must be final on return.",
    "AC003": "Implement the operator yourself; do not read, import or copy the task's reference.",
}
_deadline: list[float | None] = [None, None]
"""[monotonic time at which calls give up, the job's time-out in seconds (for the message)]."""
SHARED_DIR_VARIABLE = "AGENTLOOP_RUNNER_SHARED_DIR"
"""A directory the user may give runners to write to (tests, debugging); its path reaches the
runner in the same variable. Set by whoever starts agentloop, never by a candidate."""


class CandidateFailure(Exception):
    """The candidate could not be called (crash, limit, timeout, protocol): one line, with the
    finding rule it stands for where there is one."""

    def __init__(self, message: str, rule: str | None = None) -> None:
        super().__init__(message)
        self.described = message
        self.rule = rule


_RAN_OUT = "ran out of memory"
"""Why a runner was stopped after its driver reported running out of memory (no finding)."""


def _failure(runner: Runner, message: str, rule: str | None = None) -> CandidateFailure:
    """A failure whose rule also becomes one of the runner's findings (so the gate's result
    names it even where the gate turns the exception into an error line)."""
    if rule:
        finding = sandbox_finding(rule, message)
        if finding not in runner.findings:
            runner.findings.append(finding)
    return CandidateFailure(message, rule)


class CandidateRaised(CandidateFailure):
    """The candidate's entry raised; `described` is the runner's one-line description."""


def set_deadline(seconds: float | None, timeout: float | None = None) -> None:
    """Calls into runners give up (and kill the runner) `seconds` from now; None: no deadline.
    The sandbox worker sets it from each job's time-out (`timeout`, which the message names)."""
    _deadline[0] = None if seconds is None else time.monotonic() + seconds
    _deadline[1] = timeout if timeout is not None else seconds


def sandbox_finding(rule: str, message: str) -> Finding:
    return Finding(rule=rule, severity="error", message=message, hint=HINTS.get(rule, ""))

def _foreign(type_name: object) -> object:
    """A stand-in for an output that is not a tensor: an object of a judge-made class whose name
    says what the candidate returned (for the gates' messages)."""
    name = type_name if isinstance(type_name, str) and type_name.isidentifier() else "object"
    return type(name[:80], (), {})()



@dataclass
class CallReport:
    """One call of the candidate, as the judge reconstructed it."""

    outs: tuple
    mutated: list[int] = field(default_factory=list)
    aliases: list[tuple[int, int]] = field(default_factory=list)
    late: list[int] = field(default_factory=list)
    reused: bool = False
    launches: int = 0
    state_changes: list[str] = field(default_factory=list)


class Runner:
    """One caged runner process holding (at most) one candidate. Start it early: it boots in
    the background, and `wait_ready` is the first thing that waits."""

    def __init__(self, device: str, *, memory_bytes: int | None = None, reference_dirs: list[str] = (),
                 cpu_seconds: int = 3600, start_timeout: float = 300.0) -> None:
        self.device = device
        self.code_hash: str | None = None
        self.memory_bytes = memory_bytes or min(DEFAULT_MEMORY, os.sysconf("SC_PAGE_SIZE") *
                                                os.sysconf("SC_PHYS_PAGES") // 4)
        self.start_timeout = start_timeout
        self.workdir = tempfile.mkdtemp(prefix="runner-")
        os.chmod(self.workdir, 0o700)
        self.uid = next_uid() if os.geteuid() == 0 else -1
        self.marker = f"{os.getpid()}-{os.urandom(8).hex()}"
        self.findings: list[Finding] = []
        self.isolation: dict[str, Any] = {}
        self.arena = new_arena(device)
        self._unsettled = False
        """Copies of this judge's out of the arena may still be queued on the device (`_request`)."""
        self._out_room = 0
        """Bytes the last call's outputs took: the room the next call's arena keeps for its outputs."""
        self._lane_room = 0
        self._lanes_out = False
        """A `start_lanes` request is out and its replies not yet read: the arena holds its inputs
        and will hold its outputs, so no other request may be sent before."""
        """The most bytes one call's outputs took (up to OUTPUT_ROOM_LIMIT): the room each call of a
        `call_lanes` request is offered."""
        self._slots: dict[int, tuple[int, weakref.ref]] = {}
        self._freed: list[int] = []
        self._next_slot = 0
        self._dtypes = dtype_table(torch)
        self._names = {v: k for k, v in self._dtypes.items()}
        self._tail: collections.deque[bytes] = collections.deque()
        self._tail_bytes = 0
        self._logged = 0
        self._stopped_for: str | None = None
        self._ready = False
        self._baseline_rss = 0
        hide = hidden_paths(list(reference_dirs))
        shared = os.environ.get(SHARED_DIR_VARIABLE)
        keep = keep_paths() + ([os.path.realpath(shared)] if shared else [])
        config = {"sys_path": [os.path.abspath(p) if p in ("", ".") else p for p in sys.path],
                  "workdir": self.workdir, "device": "cpu" if device == "cpu" else "cuda",
                  "uid": self.uid, "hide": hide, "keep": keep,
                  "writable": [os.path.realpath(shared)] if shared else [],
                  "reference_dirs": [os.path.realpath(r) for r in reference_dirs],
                  "memory_bytes": self.memory_bytes if device == "cpu" else None,
                  "cpu_seconds": cpu_seconds, "processes": 512, "file_bytes": 1 << 30, "open_files": 1024}
        # What earlier runners compiled while booting (gates.judge.kernel_cache); the cage hands the
        # work directory to the runner's uid.
        kernel_cache.restore(kernel_cache.BOOT, self.workdir, -1)
        parent, child = socket.socketpair()
        env = runner_environ(os.environ, self.workdir, device)
        env["AGENTLOOP_RUNNER"] = self.marker
        if shared:
            env[SHARED_DIR_VARIABLE] = shared
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-B", "-c", BOOT, str(child.fileno()), json.dumps(config)],
            pass_fds=(child.fileno(),), cwd=self.workdir, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        child.close()
        self.sock = parent
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        self._salvage: list = []
        self._finalizer = weakref.finalize(self, destroy, self.proc, self.sock, self.workdir, self.uid,
                                           self.marker, self._salvage)

    # Output of the runner ----------------------------------------------------------------
    def _drain(self) -> None:
        stream = self.proc.stdout
        while True:
            chunk = stream.read1(1 << 16) if hasattr(stream, "read1") else stream.read(1 << 16)
            if not chunk:
                return
            self._logged += len(chunk)
            self._tail.append(chunk)
            self._tail_bytes += len(chunk)
            while self._tail_bytes - len(self._tail[0]) >= LOG_TAIL:
                self._tail_bytes -= len(self._tail.popleft())
            if self._logged > LOG_LIMIT and self._stopped_for is None:
                self._stop_for(f"wrote more than {LOG_LIMIT // 2**20} MB to stdout/stderr", "SB006")

    def log_tail(self) -> str:
        return b"".join(self._tail)[-LOG_TAIL:].decode(errors="replace")

    def _stop_for(self, why: str, rule: str | None) -> None:
        self._stopped_for = why
        if rule and why != "ran past the job's time-out":  # a time-out is the stage's error
            self.findings.append(sandbox_finding(rule, f"the runner was stopped: it {why}"))
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    # Requests ------------------------------------------------------------------------------
    def _wait(self) -> dict:
        while True:
            ready, _, _ = select.select([self.sock], [], [], 0.2)
            if ready:
                try:
                    header, _ = wire.recv(self.sock)
                except OSError:  # a reset connection: the runner is gone or going
                    raise self._death("closed") from None
                except wire.WireError as exc:
                    if str(exc) != "connection closed":
                        self._stop_for("broke the message format", "SB007")
                        raise _failure(self, f"the runner broke the message format: {str(exc)[:100]}",
                                       "SB007") from None
                    raise self._death(str(exc)) from None
                self._events(header.get("events"))
                return header
            deadline = _deadline[0]
            if deadline is not None and time.monotonic() > deadline:
                self._stop_for("ran past the job's time-out", "SB006")
                raise _failure(self, f"timed out after {_deadline[1]:g} s")
            if self.proc.poll() is not None:
                raise self._death("exited")
            if rss(self.proc.pid) - self._baseline_rss > self.memory_bytes:
                self._stop_for(f"used more than {self.memory_bytes / 2**30:.1f} GB of memory", "SB006")
                raise _failure(self, f"out of memory: the candidate used more than "
                                       f"{self.memory_bytes / 2**30:.1f} GB", "SB006")

    def _death(self, what: str) -> CandidateFailure:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        if self._stopped_for:
            rule = None if self._stopped_for == _RAN_OUT else "SB006"
            return _failure(self, f"the runner was stopped: it {self._stopped_for}", rule)
        how = describe_exit(code)
        lines = re.findall(r'File "[^"]*candidate\.py", line (\d+)', self.log_tail())
        rule = "SB006" if code is not None and -code in (signal.SIGXCPU, signal.SIGXFSZ) else None
        text = f"the candidate's process died: {how}" + (f" at candidate.py line {lines[0]}" if lines else "")
        if "MemoryError" in self.log_tail() or "Cannot allocate memory" in self.log_tail():
            text, rule = f"out of memory: {text}", "SB006"
        return _failure(self, text, rule)

    def _request(self, header: dict, expect: str, fds: tuple[int, ...] = ()) -> dict:
        self._send(header, fds)
        return self._reply(header["op"], expect)

    def _send(self, header: dict, fds: tuple[int, ...] = ()) -> None:
        self._settle()  # the judge's last copies out of the arena are done before the runner may write it
        try:
            wire.send(self.sock, header, fds)
        except (OSError, wire.WireError):
            raise self._death("closed") from None

    def _reply(self, asked: str, expect: str) -> dict:
        """The runner's next message, which must be the `expect` answer to an `asked` request."""
        reply = self._wait()
        if reply.get("op") == "failed" and str(reply.get("error")).startswith("out of memory"):
            raise self._out_of_memory(str(reply["error"]))
        if reply.get("op") != expect:
            self._stop_for("sent a message the judge did not ask for", "SB007")
            raise _failure(self, f"the runner answered {str(reply.get('op'))[:40]!r} to a "
                                   f"{asked!r} request", "SB007")
        return reply

    def _out_of_memory(self, said: str) -> CandidateFailure:
        """The driver's own copies found the memory full: the call failed, nobody's fault, and
        the stage is retried (agentloop.evaluation.pool). The runner is stopped all the same (no finding):
        its process is the candidate's, and a runner kept after a reply it may have forged could
        answer the next request with a stale one."""
        self._stop_for(_RAN_OUT, None)
        return CandidateFailure(said[:500])

    def _settle(self) -> None:
        if self._unsettled:
            self.arena.settle()
            self._unsettled = False

    def _grow(self, size: int) -> None:
        if size > self.arena.size:
            self._settle()  # before the arena those copies read from can go
        try:
            fd = self.arena.ensure(size)
        except DeviceMemoryError as exc:
            # The GPU full for now: this runner takes a host arena. Anything else: this driver
            # shares no device memory, and every later runner of this judge takes one too.
            if exc.code != OUT_OF_MEMORY:
                device_arena_refused.append(str(exc))
            self.arena = HostArena(gpu=True)
            fd = self.arena.ensure(size)
        if fd is None:
            return
        try:
            reply = self._request({"op": "arena", "size": self.arena.size, "on_device": self.arena.on_device},
                                  "arena", (fd,))
        finally:
            os.close(fd)
        if reply.get("error") is None:
            return
        if not self.arena.on_device:
            raise _failure(self, f"the runner could not map the arena: {str(reply['error'])[:200]}")
        # This runner could not map device memory (its candidate may have broken ctypes): this
        # runner alone goes on with a host arena.
        self.arena.release()
        self.arena = HostArena(gpu=True)
        self._grow(size)

    def park(self) -> None:
        """Before the runner is frozen until its candidate's next stage: it lets go of what the
        last stage left (its copies of the inputs, kept outputs) and of a device arena, and
        gives its cached device memory back (GPU memory is scarcer than the time to allocate it
        again; the arena is made anew by the next call). Within seconds, not the next
        candidate's time-out: the runner is idle."""
        if not self.alive:
            return
        saved = list(_deadline)
        set_deadline(min(5.0, saved[0] - time.monotonic()) if saved[0] is not None else 5.0)
        try:
            self._request({"op": "park", "release_arena": self.arena.on_device}, "parked")
        finally:
            _deadline[:] = saved
        if self.arena.on_device:
            self.arena.release()

    def _events(self, events: object) -> None:
        if not isinstance(events, list):
            return
        for event in events[:20]:
            if isinstance(event, list) and len(event) == 2 and all(isinstance(x, str) for x in event) \
                    and RULE.match(event[0]):
                finding = sandbox_finding(event[0], event[1][:300])
                if finding not in self.findings:
                    self.findings.append(finding)

    def take_findings(self) -> list[Finding]:
        out, self.findings = self.findings, []
        return out

    def wait_ready(self) -> None:
        if self._ready:
            return
        give_up = time.monotonic() + self.start_timeout
        while not select.select([self.sock], [], [], 0.2)[0]:
            if time.monotonic() > give_up:
                raise _failure(self, f"the runner did not start within {self.start_timeout:g} s")
            if _deadline[0] is not None and time.monotonic() > _deadline[0]:
                raise _failure(self, f"timed out after {_deadline[1]:g} s (the runner was still starting)")
        try:
            header, _ = wire.recv(self.sock)
        except (OSError, wire.WireError):
            raise _failure(self, f"the runner failed to start: {describe_exit(self.proc.wait())}: "
                                   f"{self.log_tail()[-300:]}") from None
        if header.get("op") != "ready":
            raise _failure(self, f"the runner failed to start: {str(header.get('error'))[:300]}")
        self.isolation = header.get("isolation") if isinstance(header.get("isolation"), dict) else {}
        self._baseline_rss = rss(self.proc.pid)
        self._ready = True

    def load(self, code: str, entry: str) -> list[str]:
        """Load the candidate; the torch settings its import changed. CandidateError when it does
        not import or has no entry function."""
        self.wait_ready()
        kernel_cache.keep_boot(self.workdir, self.uid)  # before any candidate code has run here
        self.code_hash = hashlib.sha256(code.encode()).hexdigest()
        # Kernels this code compiled in earlier runners come back, and what it compiles here is
        # kept when this runner stops (gates.judge.kernel_cache).
        kernel_cache.restore(self.code_hash, self.workdir, self.uid)
        self._salvage[:] = [functools.partial(kernel_cache.keep, self.code_hash, self.workdir, self.uid)]
        reply = self._request({"op": "load", "code": code, "entry": entry}, "loaded")
        if reply.get("error"):
            raise CandidateError(str(reply["error"])[:500])
        changes = reply.get("state_changes")
        return [str(c)[:200] for c in changes] if isinstance(changes, list) else []

    # Arguments and outputs -----------------------------------------------------------------
    def _slot(self, t: torch.Tensor) -> int:
        known = self._slots.get(id(t))
        if known is not None and known[1]() is t:
            return known[0]
        self._next_slot += 1
        slot, key = self._next_slot, id(t)
        self._slots[key] = (slot, weakref.ref(t))
        weakref.finalize(t, self._release, key, slot)
        return slot

    def _release(self, key: int, slot: int) -> None:
        known = self._slots.get(key)
        if known is not None and known[0] == slot:
            del self._slots[key]
        self._freed.append(slot)

    def _encode(self, args: list[Any], room: int = 0) -> tuple[list[dict], int]:
        """Copy the tensors of `args` into the arena, one after the other from its start, with
        at least `room` bytes left after them (for the outputs); their specs, and where they end."""
        lanes, end = self._encode_lanes([args], room)
        return lanes[0], end

    def _encode_lanes(self, lanes: list[list[Any]], room: int = 0) -> tuple[list[list[dict]], int]:
        """`_encode` for the argument lists of several calls at once: a tensor passed to several
        of them (a weight) goes into the arena once, and every call's spec points at it."""
        if self._lanes_out:
            raise RuntimeError("a runner takes one request at a time: the replies to its last "
                               "start_lanes are not read yet")
        offsets: dict[int, int] = {}
        tensors, offset = [], 0
        for args in lanes:
            for a in args:
                if isinstance(a, torch.Tensor) and id(a) not in offsets:
                    offsets[id(a)] = offset
                    tensors.append((a, offset))
                    offset += aligned(a.numel() * a.element_size())
        self._grow(offset + room)
        for t, off in tensors:
            self.arena.view(off, t.dtype, list(t.shape)).copy_(t)
        specs = []
        for args in lanes:
            lane = []
            for a in args:
                if isinstance(a, torch.Tensor):
                    lane.append({"t": "tensor", "slot": self._slot(a), "off": offsets[id(a)],
                                 "dtype": self._names[a.dtype], "shape": list(a.shape)})
                elif a is None or isinstance(a, (bool, int, float, str)):
                    lane.append({"t": "value", "v": a})
                else:
                    raise TypeError(f"cannot pass a {type(a).__name__} to a candidate")
            specs.append(lane)
        self.arena.settle()
        self._unsettled = False
        return specs, offset

    def _receive_outputs(self, reply: dict, start: int, end: int | None = None) -> tuple[tuple, dict]:
        """The outputs of a `result` reply, laid out from `start` (what the judge computes from
        the headers, never an offset the runner names). Where the request offered the outputs room
        up to `end` and the runner says it placed them (`placed`), the reply carries the rest of the
        call's report too; a claim that does not fit the room offered breaks the protocol (SB007).
        Otherwise the judge grows the arena as they need and says where they go (`place`)."""
        if str(reply.get("error")).startswith("out of memory"):  # the driver's, not the candidate's
            raise self._out_of_memory(str(reply["error"]))
        if reply.get("error") is not None:
            raise CandidateRaised(str(reply["error"])[:500])
        headers = reply.get("outs")
        if not isinstance(headers, list) or not headers or len(headers) > 16:
            self._stop_for("sent a malformed result", "SB007")
            raise _failure(self, "the runner sent a malformed result", "SB007")
        offsets, specs, offset = [], [], start
        for h in headers:
            spec = self._output_spec(h)
            specs.append(spec)
            if spec is None:
                offsets.append(None)
                continue
            offsets.append(offset)
            offset += aligned(spec[2])
        self._out_room = min(offset - start, OUTPUT_ROOM_LIMIT)
        self._lane_room = max(self._lane_room, self._out_room)
        claim = reply.get("placed", False)
        if claim is True:
            if end is None or offset > min(end, self.arena.size):
                self._stop_for("said it placed outputs where the judge offered no room", "SB007")
                raise _failure(self, "the runner said it placed outputs where the judge offered no room",
                               "SB007")
            placed = reply
        elif claim is False:
            self._grow(offset)
            placed = self._request({"op": "place", "offsets": offsets}, "placed")
            if placed.get("error") is not None:  # the runner ran out of memory placing them
                raise self._out_of_memory(str(placed["error"]))
        else:
            self._stop_for("sent a malformed result", "SB007")
            raise _failure(self, "the runner sent a malformed result", "SB007")
        outs = []
        for h, spec, off in zip(headers, specs, offsets, strict=True):
            if spec is None:
                outs.append(_foreign(h.get("type") if isinstance(h, dict) else None))
                continue
            dtype, shape, _ = spec
            view = self.arena.view(off, dtype, shape)
            # A copy, on the device the runner reported: what is compared is the judge's own
            # memory, not the arena.
            outs.append(view.to(self.device if h["device"] == "cuda" else "cpu", copy=True))
        # The copies out of a device arena are queued on this judge's stream, which orders them
        # before any use of the outputs here; the wait for them before the runner may write the
        # arena again comes with the next request (`_request`).
        self._unsettled = True
        return tuple(outs), placed

    def _output_spec(self, h: object) -> tuple[torch.dtype, list[int], int] | None:
        if not isinstance(h, dict) or h.get("t") not in ("tensor", "other"):
            self._stop_for("sent a malformed output header", "SB007")
            raise _failure(self, "the runner sent a malformed output header", "SB007")
        if h["t"] == "other":
            return None
        dtype, shape, strides = self._dtypes.get(h.get("dtype")), h.get("shape"), h.get("strides")
        ok = dtype is not None and isinstance(shape, list) and len(shape) <= MAX_DIMS and \
            all(type(d) is int and 0 <= d < 2**40 for d in shape) and isinstance(strides, list) and \
            len(strides) == len(shape) and all(type(s) is int for s in strides) and \
            h.get("device") in ("cpu", "cuda")
        if not ok:
            self._stop_for("sent an output header that does not describe a tensor", "SB007")
            raise _failure(self, "the runner sent an output header that does not describe a tensor",
                                   "SB007")
        if h.get("subclass") is not None:
            raise _failure(self, f"an output is a torch.Tensor subclass ({str(h['subclass'])[:60]}), "
                                   "not a plain torch.Tensor", "SB007")
        nbytes = numel(shape) * dtype.itemsize
        if nbytes > MAX_OUTPUT_BYTES:
            raise _failure(self, f"an output of {nbytes / 2**30:.1f} GB is larger than any task's",
                           "SB007")
        return dtype, shape, nbytes

    def call(self, args: list[Any], *, track: bool = False) -> CallReport:
        """Call the entry on `args` (the judge's tensors; a write the candidate makes to one is
        mirrored into it, as it would be in-process). Raises CandidateRaised when the entry
        raised, CandidateFailure when the runner died, hung or broke the protocol."""
        free, self._freed = self._freed, []
        specs, end = self._encode(args, self._out_room)
        room = self.arena.size
        # The outputs may go at once after the inputs, in what is left of the arena ("out": where
        # that starts and ends): one round trip where they fit (`_receive_outputs`).
        reply = self._request({"op": "call", "args": specs, "free": free, "track": track,
                               "out": [end, room]}, "result")
        outs, placed = self._receive_outputs(reply, end, room)
        return self._report(args, specs, outs, reply, placed)

    def call_lanes(self, lanes: list[list[Any]], *, track: bool = False) -> list[CallReport]:
        """Several independent calls of the entry, in order, as `call` would make each one (the
        runner calls them one after the other with every check of a call), with one request for
        as many as go through at once: the model check serves its requests alone in step, and
        one request per call cost most of its time in round trips. The first failure raises as
        `call`'s does; the calls after it are not made."""
        return self.start_lanes(lanes, track=track)()

    def start_lanes(self, lanes: list[list[Any]], *, track: bool = False) -> Callable[[], list[CallReport]]:
        """`call_lanes` in two halves: the request is sent now, and the function returned reads
        the replies (and makes the calls that did not go through at once): the judge can have
        requests out to several runners at once and read them in turn."""
        sent = self._send_lanes(lanes, track)
        self._lanes_out = True

        def finish() -> list[CallReport]:
            try:
                reports = self._read_lanes(*sent)
            finally:
                self._lanes_out = False
            while len(reports) < len(lanes):
                reports += self._read_lanes(*self._send_lanes(lanes[len(reports):], track))
            return reports

        return finish

    def _send_lanes(self, lanes: list[list[Any]], track: bool) -> tuple:
        """One `calls` request, sent; what `_read_lanes` needs to read its replies."""
        free, self._freed = self._freed, []
        room = aligned(min(self._lane_room, OUTPUT_ROOM_LIMIT // len(lanes)))
        specs, end = self._encode_lanes(lanes, room * len(lanes))
        bounds = [[end + k * room, end + (k + 1) * room] for k in range(len(lanes))]
        bounds[-1][1] = self.arena.size
        self._send({"op": "calls", "free": free, "calls": [
            {"args": lane, "track": track, "out": out} for lane, out in zip(specs, bounds, strict=True)]})
        return lanes, specs, bounds

    def _read_lanes(self, lanes: list[list[Any]], specs: list[list[dict]], bounds: list[list[int]]
                    ) -> list[CallReport]:
        """The reports of the calls the runner made for one `calls` request (it stops after a call
        whose outputs took the two-step placing, which may have replaced the arena, or failed)."""
        reports = []
        for args, lane, (start, stop) in zip(lanes, specs, bounds, strict=True):
            reply = self._reply("calls", "result")
            outs, placed = self._receive_outputs(reply, start, stop)
            reports.append(self._report(args, lane, outs, reply, placed))
            if reply.get("placed") is not True:
                break
        return reports

    def _report(self, args: list[Any], specs: list[dict], outs: tuple, reply: dict,
                placed: dict) -> CallReport:
        """What a call's replies say, checked as data; a write to an input mirrored into it."""
        report = CallReport(outs=outs, launches=_int(reply.get("launches")),
                            reused=reply.get("reused") is True,
                            state_changes=[str(c)[:200] for c in _list(reply.get("state_changes"))][:10])
        report.mutated = [i for i in _list(placed.get("mutated")) if type(i) is int and 0 <= i < len(args)]
        if report.mutated:
            finding = Finding(rule="AC001", severity="error", message=f"the candidate wrote to its input "
                              f"{report.mutated[0]} (argument position) in a call",
                              hint="Treat inputs as read-only: write results into freshly allocated outputs.")
            if not any(f.rule == "AC001" for f in self.findings):
                self.findings.append(finding)
        for i in report.mutated:
            if isinstance(args[i], torch.Tensor):
                spec = specs[i]
                args[i].copy_(self.arena.view(spec["off"], args[i].dtype, list(args[i].shape)))
        report.aliases = [(a[0], a[1]) for a in _list(placed.get("aliases"))
                          if isinstance(a, list) and len(a) == 2 and all(type(x) is int for x in a)]
        report.late = [k for k in _list(placed.get("late")) if type(k) is int]
        if report.late:
            self.findings.append(sandbox_finding(
                "SB010", f"output {report.late[0]} changed after the call returned (work left running on a "
                         "side stream or thread)"))
        return report

    # Benchmark -----------------------------------------------------------------------------
    def bench_prepare(self, args: list[Any], measure: dict) -> str:
        """Bind the entry to `args` in the runner and warm it up; the clock label."""
        specs, _ = self._encode(args)
        reply = self._request({"op": "bench_prepare", "args": specs, "measure": measure}, "prepared")
        if reply.get("error") is not None:
            raise CandidateRaised(str(reply["error"])[:500])
        return str(reply.get("label"))[:20]

    def bench_reps(self, seconds: float, min_reps: int, max_reps: int) -> int:
        reply = self._request({"op": "bench_reps", "seconds": seconds, "min": min_reps, "max": max_reps},
                              "reps")
        if reply.get("error") is not None:
            raise CandidateRaised(str(reply["error"])[:500])
        return max(min_reps, min(max_reps, _int(reply.get("reps"))))

    def bench_samples(self, n: int) -> tuple[list[float], float, int]:
        """`n` timed calls: their milliseconds as the runner reports them, the judge's own
        wall-clock seconds around the request, and how many of the last calls kept their outputs
        (all on a CPU; the last chunk on a GPU), one of which `bench_reveal` can show."""
        start = time.perf_counter()
        reply = self._request({"op": "bench_samples", "n": n}, "samples")
        wall = time.perf_counter() - start
        if reply.get("error") is not None:
            raise CandidateRaised(str(reply["error"])[:500])
        samples = reply.get("samples")
        if not isinstance(samples, list) or len(samples) != n or \
                not all(isinstance(s, (int, float)) and s == s and s >= 0 for s in samples):
            raise _failure(self, "the runner reported malformed timings", "SB009")
        kept = reply.get("kept")
        if type(kept) is not int or not 1 <= kept <= n:
            raise _failure(self, "the runner reported malformed timings", "SB009")
        return [float(s) for s in samples], wall, kept

    def bench_reveal(self, index: int) -> tuple:
        """The outputs of kept timed call `index` (chosen after the calls ran)."""
        room = self.arena.size
        reply = self._request({"op": "bench_reveal", "index": index, "out": [0, room]}, "result")
        outs, placed = self._receive_outputs(reply, 0, room)
        late = [k for k in _list(placed.get("late")) if type(k) is int]
        if late:
            self.findings.append(sandbox_finding(
                "SB010", f"output {late[0]} of a timed call changed after it returned (work left running "
                         "on a side stream or thread)"))
        return outs

    # Ending --------------------------------------------------------------------------------
    def leftovers(self) -> list[int]:
        """Processes the runner left besides itself (it started them; the hook should have
        refused)."""
        pids = pids_of_uid(self.uid) if self.uid > 0 else pids_with_marker(self.marker)
        return [p for p in pids if p != self.proc.pid]

    def check_leftovers(self) -> None:
        extra = self.leftovers()
        if extra:
            self.findings.append(sandbox_finding(
                "SB005", f"the candidate left {len(extra)} process(es) running (killed)"))
            for p in extra:
                try:
                    os.kill(p, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def pause(self) -> bool:
        """Freeze the runner (SIGSTOP to its process group) while other candidates run: none
        of its threads can run or touch the device meanwhile. False if it is not alive."""
        if not self.alive:
            return False
        try:
            os.killpg(self.proc.pid, signal.SIGSTOP)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def resume(self) -> bool:
        """Let a paused runner go on; False if it died meanwhile."""
        try:
            os.killpg(self.proc.pid, signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            return False
        return self.alive

    def stop(self) -> None:
        """Kill the runner and everything it started, and remove its files."""
        self._finalizer()
        self.arena.release()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None and self._stopped_for is None


def _int(x: object) -> int:
    return x if type(x) is int else 0


def _list(x: object) -> list:
    """A list the runner reported, or nothing: its items are checked where they are used."""
    return x if isinstance(x, list) else []


class RemoteEntry:
    """The candidate's entry as the gates see it: call it with tensors, get a tuple back."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.last: CallReport | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> tuple:
        # Keyword arguments come from `make_inputs`, in the entry's parameter order.
        self.last = self.runner.call([*args, *kwargs.values()])
        return self.last.outs
