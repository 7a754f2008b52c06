"""The runner's driver: the loop that holds one candidate and calls it for the judge.

Started by `gates.judge.client.Runner` as `python -I -c BOOT CONFIG FD`; it cages itself
(`gates.runner.cage`), imports torch and triton, installs the audit hook and says "ready".
Then, one request at a time over its socket (`gates.runner.wire`): load the candidate, call
its entry on inputs read from the shared arena, or run the measurement loop on it. For a call
it snapshots the outputs, waits until no work the call started can still run, and checks the
outputs and inputs against what they held; it reports each output's header (dtype, shape,
strides, device, exact type) and what else it saw: inputs the call wrote to, outputs that alias
an input or changed after the call returned, threads left running, torch settings changed,
functions replaced, Triton launches. The outputs go into the arena where the judge's request
offered room for them, with one reply; where they do not fit, the reply carries the headers
only, and the judge says where they go (after growing the arena) before they are copied there.

All of that is a report from a process the candidate controls: the judge trusts none of it
to accept anything. It judges the bytes it finds in the arena; the report can only add
findings.
"""

from __future__ import annotations

import json
import mmap
import os
import socket
import sys
import threading
import time
from itertools import repeat
from operator import is_
from typing import Any

from gates.runner import cage, device_memory, hooks, loader, neutral, timing, wire

CANDIDATE_NAME = "candidate.py"
_MISSING = object()
DTYPE_NAMES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8",
               "bool", "float8_e4m3fn", "float8_e5m2")


def dtype_table(torch: Any) -> dict[str, Any]:
    """Wire name -> torch dtype, for the dtypes this torch has."""
    return {n: getattr(torch, n) for n in DTYPE_NAMES if hasattr(torch, n)}


def pin(torch: Any, host: Any) -> bool:
    """Page-lock a host tensor's memory for the GPU (copies to and from it then go at DMA speed,
    several times faster than from pageable memory); False where CUDA refuses."""
    return torch.cuda.cudart().cudaHostRegister(host.data_ptr(), host.numel() * host.element_size(), 0) == 0


def unpin(torch: Any, pointer: int) -> None:
    torch.cuda.cudart().cudaHostUnregister(pointer)


class Arena:
    """The runner's mapping of the judge's arena, from the descriptor the judge sends: a memfd
    of host memory (page-locked on a GPU), or device memory (`device_memory`)."""

    def __init__(self, torch: Any, fd: int | None = None, size: int = 0, gpu: bool = False,
                 on_device: bool = False) -> None:
        self.size, self.bytes, self.memory, self.pinned = 0, None, None, False
        if fd is None:
            return
        try:
            if on_device:
                self.memory = device_memory.SharedDeviceMemory.open(fd, size, torch.cuda.current_device())
                self.bytes = self.memory.tensor(torch)
            else:
                self.map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                self.bytes = torch.frombuffer(self.map, dtype=torch.uint8)
                self.pinned = gpu and pin(torch, self.bytes)
        finally:
            os.close(fd)
        self.size = size

    @property
    def on_device(self) -> bool:
        return self.memory is not None

    def release(self, torch: Any) -> None:
        """Before the mapping goes (a new arena replaces this one): unlock host pages, or
        unmap device memory once no copy uses it."""
        if self.pinned:
            unpin(torch, self.bytes.data_ptr())
            self.pinned = False
        if self.memory is not None:
            torch.cuda.synchronize()
            self.bytes = None
            self.memory.close()
            self.memory = None

    def view(self, offset: int, dtype: Any, shape: list[int]) -> Any:
        n = _nbytes(dtype, shape)
        if offset < 0 or offset + n > self.size:
            raise ValueError(f"arena slice {offset}+{n} outside {self.size} bytes")
        return self.bytes[offset:offset + n].view(dtype).view(shape)

    def settle(self, torch: Any) -> None:
        """Wait until what the driver copied into a device arena is there for the judge."""
        if self.memory is not None:
            torch.cuda.synchronize()


class Driver:
    def __init__(self, sock: socket.socket, cfg: dict, recorder: hooks.Recorder) -> None:
        import torch
        from torch.autograd.graph import increment_version

        self.increment_version = increment_version  # taken before the candidate can replace it
        self.torch, self.sock, self.cfg, self.recorder = torch, sock, cfg, recorder
        self.device = cfg["device"]
        self.dtypes = dtype_table(torch)
        self.arena = Arena(torch)
        self.late: list[int] = []
        self.slots: dict[int, Any] = {}
        self.placement = Draws(os.urandom)
        """Where each new slot starts in its buffer (`new_slot`): drawn from the OS, which the
        candidate cannot predict, by code of the runner's own (a class of `random` would be the
        candidate's to replace: `random.Random.shuffle = ...` could pin every slot's alignment)."""
        self.alignments: list[int] = []
        self.entry = None
        self.previous: list[tuple[Any, Any]] = []
        self.prepared: timing.Prepared | None = None
        self.probe: _Probe | None = None
        self.launches = [0]
        self.watched = _watched_functions(torch)
        own = _own_functions()
        self.own = [(module, vars(module), attr, original) for (module, attr), original in own.items()]
        """(module, its namespace, name, the function as loaded): a module's namespace is the same
        dict for its whole life, so it is looked up once."""
        self.own_classes = [(cls, tuple(vars(cls)), tuple(vars(cls).values()))
                            for cls in {id(c): c for c in own.values() if isinstance(c, type)}.values()]
        """(class, its attributes' names and values as loaded): a method of the driver replaced on
        its class (`Driver.next_alignment = ...`) changes what the runner does as surely as a
        module's name."""
        # Bound now, on the object: the check runs as loaded even if the class's is replaced.
        self.check_tampering = self.check_tampering
        self.state = loader.torch_global_state()
        _count_launches(self.launches)

    # Messages ---------------------------------------------------------------------------
    def reply(self, header: dict) -> None:
        header["events"] = self.recorder.take()
        wire.send(self.sock, header)

    def receive(self) -> dict:
        while True:
            header, fds = wire.recv(self.sock, max_fds=1)
            if header.get("op") == "arena":
                old, self.arena, error = self.arena, Arena(self.torch), None
                try:
                    old.release(self.torch)
                except Exception:  # noqa: BLE001 - a broken context: the next mapping says so
                    pass
                try:  # the new arena's constructor closes the descriptor
                    self.arena = Arena(self.torch, fds[0] if fds else None, int(header["size"]),
                                       gpu=self.device != "cpu", on_device=bool(header.get("on_device")))
                except Exception as exc:  # noqa: BLE001 - the judge falls back to a host arena
                    error = loader.describe_exception(exc)
                self.reply({"op": "arena", "error": error})
                continue
            for fd in fds:
                os.close(fd)
            return header

    def serve(self) -> None:
        ops = {"load": self.load, "call": self.call, "calls": self.calls, "bench_prepare": self.bench_prepare,
               "bench_reps": self.bench_reps, "bench_samples": self.bench_samples,
               "bench_reveal": self.bench_reveal, "park": self.park,
               "report": lambda m: self.reply({"op": "report"})}
        while True:
            try:
                message = self.receive()
            except wire.WireError:
                return
            if message.get("op") == "stop":
                return
            try:
                ops[message["op"]](message)
            except Exception as exc:  # noqa: BLE001 - an object of the candidate's broke the driver
                if self.out_of_memory(exc):
                    self.reply({"op": "failed", "error": f"out of memory: {loader.describe_exception(exc)}"})
                    continue
                self.recorder.add("SB007", f"the driver could not handle what the candidate returned "
                                           f"({type(exc).__name__})")
                self.reply({"op": "failed", "error": loader.describe_exception(exc)})

    def out_of_memory(self, exc: BaseException) -> bool:
        """Whether the driver's own copies ran out of memory (a GPU shared by several runners
        and judges can be full for a moment): the judge retries such a stage, so it is said in
        the protocol's own terms, not as a finding against the candidate."""
        return isinstance(exc, (MemoryError, self.torch.OutOfMemoryError)) or \
            "can't allocate memory" in str(exc)  # torch's CPU allocator

    def park(self, message: dict) -> None:
        """Before the judge freezes this runner until its candidate's next stage: let go of
        what the last stage left here (the inputs' slots, outputs kept for the reuse check, the
        benchmark's bound call and kept outputs), with `release_arena` the device arena too, and
        give cached device memory back to the GPU. Frozen runners held gigabytes of it each, and
        a GPU shared by a pool's judges and their runners ran out (docs/lab/gpu/boundary)."""
        self.slots.clear()
        self.previous, self.prepared, self.probe = [], None, None
        if message.get("release_arena"):
            old, self.arena = self.arena, Arena(self.torch)
            old.release(self.torch)
        # No gc.collect(): it takes 0.15 s with torch loaded, inside the next stage's time; what
        # the driver held is freed as its references go.
        if self.device != "cpu":
            self.torch.cuda.empty_cache()
        self.reply({"op": "parked"})

    # Loading ----------------------------------------------------------------------------
    def load(self, message: dict) -> None:
        if self.entry is not None:
            self.reply({"op": "loaded", "error": "a runner holds one candidate"})
            return
        folder = os.path.join(self.cfg["workdir"], "candidate")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, CANDIDATE_NAME)
        with open(path, "w") as f:
            f.write(message["code"])
        try:
            _, entry = loader.candidate_entry(path, message["entry"])
            self.entry = neutral.calling(entry)
            changes = loader.load_candidate(path).state_changes
            error = None
        except loader.CandidateError as exc:
            changes, error = [], str(exc).replace(folder + os.sep, "")
        self.check_tampering()
        self.reply({"op": "loaded", "error": error, "state_changes": changes})

    def check_tampering(self) -> None:
        for name, (owner, attr, original) in self.watched.items():
            if getattr(owner, attr, None) is not original:
                self.recorder.add("SB008", f"the candidate replaced {name}")
                setattr(owner, attr, original)  # so the driver's own copies stay honest
        for module, namespace, attr, original in self.own:
            if namespace.get(attr) is not original:
                self.recorder.add("SB008", f"the candidate replaced the runner's {module.__name__}.{attr}")
                setattr(module, attr, original)
        for cls, names, values in self.own_classes:
            now = cls.__dict__
            # Each attribute the very object it was (a missing one is _MISSING): `all`, `map`, `is_`
            # and `repeat` are among the watched functions, put back before this runs.
            if len(now) == len(names) and all(map(is_, map(now.get, names, repeat(_MISSING)), values)):
                continue
            loaded = dict(zip(names, values, strict=True))
            for attr in [a for a in now if a not in loaded]:
                self.recorder.add("SB008", f"the candidate added {cls.__qualname__}.{attr} to the runner")
                type.__delattr__(cls, attr)
            for attr, original in loaded.items():
                if now.get(attr) is not original:
                    self.recorder.add("SB008", f"the candidate replaced the runner's "
                                               f"{cls.__module__}.{cls.__qualname__}.{attr}")
                    type.__setattr__(cls, attr, original)

    # Calls ------------------------------------------------------------------------------
    def tensor_args(self, specs: list[dict]) -> tuple[list[Any], list[tuple[int, Any, Any]]]:
        """The call's arguments, tensors copied from the arena into slots (one per judge
        tensor, kept across calls so identity-based caching behaves as it would in-process),
        and for each tensor the view of the arena that holds its original contents."""
        args, tensors = [], []
        for i, spec in enumerate(specs):
            if spec["t"] != "tensor":
                args.append(spec.get("v"))
                continue
            dtype = self.dtypes[spec["dtype"]]
            view = self.arena.view(int(spec["off"]), dtype, list(spec["shape"]))
            slot = self.slots.get(spec["slot"])
            if slot is None or slot.dtype != dtype or list(slot.shape) != list(spec["shape"]):
                slot = self.new_slot(list(view.shape), dtype)
                self.slots[spec["slot"]] = slot
            slot.copy_(view)
            args.append(slot)
            tensors.append((i, slot, view))
        return args, tensors

    SLOT_ALIGNMENTS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
    """The alignments a new slot's address takes, each in turn in a shuffled order of this
    runner's own (`new_slot`): an address aligned to exactly 16 bytes, to exactly 32, ... and to
    4096 or more. A kernel that picks its reduction from `data_ptr()` (modulo 32, 64, ... 4096)
    meets both sides of its test within one round, rather than whatever a random offset happens
    to give (a test of `% 256` missed one audit in four with random 16-byte steps). Never less
    than 16-byte aligned: Triton compiles a pointer divisible by 16 into another kernel (wider
    loads, another reduction layout), which can change an honest kernel's bits, and a serving
    engine's tensors (the caching allocator's, and its slices of them) are 16-byte aligned.
    Measured on the H200: 1-byte-step offsets made 7 of 16 requests of the invariant corpus set
    nondeterministic in the model check."""

    def next_alignment(self) -> int:
        if not self.alignments:
            self.alignments = list(self.SLOT_ALIGNMENTS)
            self.placement.shuffle(self.alignments)
        return self.alignments.pop()

    def new_slot(self, shape: list[int], dtype: Any) -> Any:
        """A contiguous tensor of `shape` in a buffer of its own, its address aligned to the next
        of `SLOT_ALIGNMENTS` exactly (to 4096 at least for the last), at a random multiple of that
        alignment into the buffer."""
        torch = self.torch
        n = 1
        for d in shape:
            n *= d
        itemsize = dtype.itemsize
        if not n:
            return torch.empty(shape, dtype=dtype, device=self.device)
        top = self.SLOT_ALIGNMENTS[-1]
        align = self.next_alignment()
        spare = (2 * top + align * 4) // itemsize
        base = torch.empty(n + spare, dtype=dtype, device=self.device)
        ptr = base.data_ptr()
        if ptr % self.SLOT_ALIGNMENTS[0] or self.SLOT_ALIGNMENTS[0] % itemsize:
            return base[:n].view(shape)  # an allocator below 16 bytes: its own alignment it is
        # the first address past ptr that is a multiple of align but not of 2 * align (of top for the last)
        period = align if align == top else 2 * align
        target = (-ptr) % period if align == top else (align - ptr % period) % period
        target += period * self.placement.below(2)
        shift = target // itemsize
        return base[shift:shift + n].view(shape)

    def calls(self, message: dict) -> None:
        """Several independent calls in one request (the model check's requests served alone, in
        step): each lane exactly as a `call` of its own, one after the other, each with its own
        reply; after a lane whose reply is not a result placed at once without error (it failed,
        or its outputs took the two-step placing, which may replace the arena the later lanes'
        inputs are in) the rest are not called, and the judge sends them again."""
        for slot in message.get("free", []):
            self.slots.pop(slot, None)
        lanes = message.get("calls")
        if not isinstance(lanes, list) or not lanes or not all(isinstance(lane, dict) for lane in lanes):
            self.reply({"op": "result", "error": "bad call from the judge: no calls", "outs": []})
            return
        for lane in lanes:
            if not self.call(lane):
                return

    def call(self, message: dict) -> bool:
        """One call of the entry, replied to; whether its outputs were placed at once, without error."""
        for slot in message.get("free", []):
            self.slots.pop(slot, None)
        try:
            args, tensors = self.tensor_args(message["args"])
            room = _room(message.get("out"))
            # What each input held before the call: the arena's view of it where that is on the
            # slot's device (it stays as the judge wrote it: outputs go after the inputs; a host
            # mapping lives while viewed, and `deliver` clones device views before the judge may
            # replace the arena), else a clone.
            pristine = [(i, t, v if v.device == t.device else t.clone()) for i, t, v in tensors]
        except (KeyError, ValueError, TypeError) as exc:
            self.reply({"op": "result", "error": f"bad call from the judge: {exc}", "outs": []})
            return False
        except Exception as exc:
            if not self.out_of_memory(exc):
                raise
            self.reply({"op": "result", "error": f"out of memory: the runner could not hold the call's "
                                                  f"inputs: {loader.describe_exception(exc)}", "outs": []})
            return False
        threads = threading.active_count()
        launches = self.launches[0]
        state = loader.torch_global_state()
        limit = sys.getrecursionlimit()
        try:
            result = self.entry(*args)
            error = None
        except BaseException as exc:  # noqa: BLE001 - whatever the candidate raises is the result
            result, error = None, loader.describe_exception(exc)
            if isinstance(exc, (MemoryError, RecursionError)):
                self.recorder.add("SB006", f"the candidate hit a resource limit ({type(exc).__name__})")
        if sys.getrecursionlimit() != limit:
            self.recorder.add("SB006", "the candidate changed the recursion limit")
            sys.setrecursionlimit(limit)
        after = loader.torch_global_state()
        changed = [f"{k}: {state[k]!r} -> {v!r}" for k, v in after.items() if state.get(k) != v]
        if after != self.state:
            loader.restore_torch_global_state(self.state)
        self.check_tampering()
        track = bool(message.get("track"))
        try:
            outs, reply = self.deliver(result, error, extra={
                "state_changes": changed, "launches": self.launches[0] - launches,
                "reused": track and self.outputs_overwritten()}, room=room, pristine=pristine,
                specs=message["args"])
        except Exception as exc:  # noqa: BLE001 - an output object that breaks when looked at
            self.recorder.add("SB007", f"an output could not be read as a tensor ({type(exc).__name__})")
            error = f"an output could not be read: {loader.describe_exception(exc)}"
            self.reply({"op": "result", "error": error, "outs": []})
            return False
        if outs is None:
            return False
        if track:
            try:
                self.previous = [(o, o.clone()) for o in outs if _is_tensor(self.torch, o)]
            except Exception as exc:
                if not self.out_of_memory(exc):
                    raise
                self.reply_placed_out_of_memory(exc, reply["op"])
                return False
        storage = lambda t: t.untyped_storage().data_ptr()
        reply["aliases"] = [[k, i] for k, out in enumerate(outs) if _is_tensor(self.torch, out)
                            for i, t, _ in tensors if storage(out) == storage(t)]
        if threading.active_count() > threads:
            self.recorder.add("SB004", "the candidate left a thread running after its call returned")
        self.reply(reply)
        return reply.get("placed") is True and reply.get("error") is None

    def reply_placed_out_of_memory(self, exc: BaseException, op: str = "placed") -> None:
        """The answer to `place` (or to `call`, where the outputs went at once) when the driver's
        copies ran out of memory: the call failed."""
        self.reply({"op": op, "error": f"out of memory: the runner could not place the outputs: "
                                       f"{loader.describe_exception(exc)}",
                    "outs": [], "mutated": [], "aliases": [], "late": []})

    def outputs_overwritten(self) -> bool:
        return any(_differ(self.torch, self.previous, self.device)[0])

    def header(self, out: Any) -> dict:
        torch = self.torch
        if isinstance(out, torch.Tensor) and out.layout == torch.strided and not out.is_meta and \
                str(out.dtype).removeprefix("torch.") in self.dtypes:
            return {"t": "tensor", "dtype": str(out.dtype).removeprefix("torch."),
                    "shape": list(out.shape), "strides": list(out.stride()), "device": out.device.type,
                    "subclass": None if type(out) is torch.Tensor else type(out).__name__[:80]}
        return {"t": "other", "type": type(out).__name__[:80]}

    def layout(self, headers: list[dict], room: tuple[int, int] | None) -> list[int | None] | None:
        """Where the outputs go when the judge offered room for them (`room`: the first byte and
        the end of it): one after the other from the first byte, each at the arena's alignment,
        as the judge lays them out itself; None when they do not all fit, or when an output is a
        tensor subclass (the judge refuses those from their header, and the driver does not copy
        them)."""
        if room is None:
            return None
        offset, end = room
        offsets: list[int | None] = []
        for h in headers:
            if h["t"] != "tensor":
                offsets.append(None)
                continue
            if h["subclass"] is not None:
                return None
            offsets.append(offset)
            offset += wire.aligned(_nbytes(self.dtypes[h["dtype"]], h["shape"]))
        return offsets if offset <= min(end, self.arena.size) else None

    def deliver(self, result: Any, error: str | None, extra: dict, room: tuple[int, int] | None = None,
                pristine: list = (), specs: list | None = None) -> tuple[list[Any] | None, dict | None]:
        """Put the outputs in the arena and check them and the inputs (`check`): at once where the
        judge offered room (`room`) and they fit, else where the judge says once it has seen their
        headers (it refuses some from the header alone, before any copy is made: a giant view, a
        subclass). The outputs and the reply to complete and send (the call's result with the
        checks, or the answer to `place`); (None, None) when what there was to say was said."""
        self.late = []
        if error is not None:
            self.reply({"op": "result", "error": error, "outs": [], **extra})
            return None, None
        outs = list(result) if isinstance(result, (tuple, list)) else [result]
        headers = [self.header(out) for out in outs]
        offsets = self.layout(headers, room)
        reply = {"op": "result", "error": None, "outs": headers, **extra}
        if offsets is not None:
            try:
                mutated = self.check(outs, headers, offsets, pristine, specs)
            except Exception as exc:
                if not self.out_of_memory(exc):
                    raise
                self.reply_placed_out_of_memory(exc, "result")
                return None, None
            return outs, {**reply, "placed": True, "mutated": mutated, "late": self.late}
        try:
            if self.arena.on_device:  # its views go if the judge replaces the arena to make room
                pristine = [(i, t, original.clone()) for i, t, original in pristine]
        except Exception as exc:
            if not self.out_of_memory(exc):
                raise
            self.reply_placed_out_of_memory(exc, "result")
            return None, None
        self.reply(reply)
        place = self.receive()
        if place.get("op") != "place":
            return None, None
        try:
            mutated = self.check(outs, headers, place["offsets"], pristine, specs)
        except Exception as exc:
            if not self.out_of_memory(exc):
                raise
            self.reply_placed_out_of_memory(exc)
            return None, None
        return outs, {"op": "placed", "mutated": mutated, "late": self.late}

    def check(self, outs: list[Any], headers: list[dict], offsets: list, pristine: list,
              specs: list | None) -> list[int]:
        """Snapshot the outputs as the call returned them, wait until nothing the call started can
        still run (late work would change them after return: `self.late`), check the outputs and
        the inputs (`pristine`) against what they held, and leave the outputs at `offsets` in the
        arena; the inputs the call wrote to."""
        torch = self.torch
        # What each output held when the call returned: its place in the arena itself where that
        # is on the output's device (the check compares there); else a copy on its device (a host
        # copy of a vocabulary-sized output compared on the CPU cost seconds per stage).
        copies = []
        for k, (out, header, off) in enumerate(zip(outs, headers, offsets, strict=True)):
            if header["t"] != "tensor" or header["subclass"] is not None or off is None:
                continue
            out = torch.Tensor.detach(out)
            dst = self.arena.view(int(off), self.dtypes[header["dtype"]], header["shape"])
            if dst.device == out.device:
                dst.copy_(out)
                snap = dst
            else:
                snap = out.clone()
            copies.append((k, out, dst, snap))
        if self.device != "cpu":
            torch.cuda.synchronize()
        else:
            time.sleep(0.001)
        changed, synced = _differ(torch, [(out, snap) for _, out, _, snap in copies] +
                                  [(t, original) for _, t, original in pristine], self.device)
        self.late = [k for (k, *_), late in zip(copies, changed, strict=False) if late]
        mutated = [i for (i, *_), wrote in zip(pristine, changed[len(copies):], strict=True) if wrote]
        self.place(copies, mutated, pristine, specs, settled=synced)
        return mutated

    def place(self, copies: list, mutated: list[int], pristine: list, specs: list | None,
              settled: bool = False) -> None:
        """Copy the outputs' snapshots that are not already in the arena to their places, and the
        inputs the call wrote to into theirs (the judge mirrors such a write into its own tensor,
        from the arena as it is now: placing the outputs may have replaced it); then wait until
        the judge can read it all (`settled`: the device was synchronised after the last copy
        into the arena, and nothing was queued since)."""
        wrote = False
        for _, _, dst, snap in copies:
            if snap is not dst:
                dst.copy_(snap)
                wrote = True
        for i, t, _ in pristine:
            if i in mutated:
                self.arena.view(int(specs[i]["off"]), t.dtype, list(t.shape)).copy_(t)
                wrote = True
        if wrote or not settled:
            self.arena.settle(self.torch)

    # Benchmark --------------------------------------------------------------------------
    def bench_prepare(self, message: dict) -> None:
        self.prepared = None
        try:
            args, _ = self.tensor_args(message["args"])
            measure = timing.Measure(**message["measure"])
            self.probe = _Probe(self.torch)
            entry = self.entry
            tensors, bump = [a for a in args if _is_tensor(self.torch, a)], self.increment_version

            def written() -> None:  # as if the judge had refilled them: new version counters
                for t in tensors:
                    bump(t)

            self.prepared = timing.Prepared(lambda: entry(*args), self.device, measure, keep=True,
                                            between=None if measure.cuda_graph else written,
                                            probe=self.probe.take)
            self.reply({"op": "prepared", "error": None, "label": self.prepared.label})
        except BaseException as exc:  # noqa: BLE001
            self.reply({"op": "prepared", "error": loader.describe_exception(exc)})

    def bench_reps(self, message: dict) -> None:
        try:
            reps = self.prepared.reps_for(float(message["seconds"]), int(message["min"]), int(message["max"]))
            self.reply({"op": "reps", "reps": reps, "error": None})
        except BaseException as exc:  # noqa: BLE001
            self.reply({"op": "reps", "reps": 0, "error": loader.describe_exception(exc)})

    def bench_samples(self, message: dict) -> None:
        try:
            samples = self.prepared.samples(int(message["n"]))
            self.reply({"op": "samples", "samples": samples, "kept": len(self.prepared.kept), "error": None})
        except BaseException as exc:  # noqa: BLE001
            self.reply({"op": "samples", "samples": [], "error": loader.describe_exception(exc)})

    def bench_reveal(self, message: dict) -> None:
        kept = self.prepared.kept if self.prepared else []
        index = int(message["index"])
        if not 0 <= index < len(kept):
            self.reply({"op": "result", "error": f"no timed call {index} kept", "outs": []})
            return
        outs, reply = self.deliver(kept[index], None, extra={}, room=_room(message.get("out")))
        if outs is not None:
            probes = self.prepared.probes
            if index < len(probes):  # as it stood when its timing ended, against as it is now
                self.late += [k for k in self.probe.changed(probes[index], outs) if k not in self.late]
            self.reply({**reply, "mutated": [], "aliases": [], "late": self.late})


class _Probe:
    """A random sample of a timed call's outputs taken as its timing ends: the same elements of
    every call (drawn once), compared at reveal with the output as it is then. Work the call left
    running (a side stream, a thread) shows as a difference (SB010), although by the time the
    judge reads the whole output it has finished and is right."""

    SIZE = 64

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.index: dict[tuple, Any] = {}
        self.generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)

    def where(self, out: Any) -> Any:
        key = (tuple(out.shape), str(out.device))
        if key not in self.index:
            self.index[key] = tuple(self.torch.randint(0, d, (self.SIZE,), generator=self.generator)
                                    .to(out.device) for d in out.shape)
        return self.index[key]

    def take(self, result: Any) -> list[Any]:
        outs = list(result) if isinstance(result, (tuple, list)) else [result]
        return [self.sample(o) for o in outs]

    def sample(self, out: Any) -> Any:
        if not _is_tensor(self.torch, out) or out.dim() == 0 or out.numel() == 0:
            return None
        return _bits(self.torch, self.torch.Tensor.detach(out)[self.where(out)])

    def changed(self, taken: list[Any], result: list[Any]) -> list[int]:
        """The outputs whose sample now differs from the one taken as the call's timing ended."""
        torch = self.torch
        return [k for k, (sample, out) in enumerate(zip(taken, result, strict=False))
                if sample is not None and _is_tensor(torch, out)
                and not torch.equal(sample, self.sample(out).to(sample.device))]


def _nbytes(dtype: Any, shape: list[int]) -> int:
    n = dtype.itemsize
    for d in shape:
        n *= d
    return n


def _room(out: object) -> tuple[int, int] | None:
    """The room the judge offered a call's outputs in the arena: (first byte, end), or None."""
    if isinstance(out, list) and len(out) == 2 and all(type(x) is int for x in out) and 0 <= out[0] <= out[1]:
        return out[0], out[1]
    return None


def _is_tensor(torch: Any, x: Any) -> bool:
    return isinstance(x, torch.Tensor)


def _bits(torch: Any, t: Any) -> Any:
    t = torch.Tensor.detach(t)
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    if t.is_floating_point():
        return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t


def _differ(torch: Any, pairs: list[tuple[Any, Any]], device: str) -> tuple[list[bool], bool]:
    """For each pair of tensors, whether their bits differ (as `not _same_bits`); and whether the
    device was synchronised after everything queued before (so also after the comparisons). On a
    GPU the comparisons are queued and read back with one synchronisation, where each
    `torch.equal` would be one."""
    if not pairs:
        return [], False
    if device == "cpu" or all(a.device.type == "cpu" for a, _ in pairs):
        return [not _same_bits(torch, a, b) for a, b in pairs], False
    flags = []
    for a, b in pairs:
        if a.shape != b.shape or a.dtype != b.dtype:
            flags.append(torch.ones((), dtype=torch.bool, device=device))
            continue
        if a.device != b.device:
            a, b = a.cpu(), b.cpu()
        flags.append(torch.ne(_bits(torch, a), _bits(torch, b)).any().to(device))
    host = torch.empty(len(flags), dtype=torch.bool, pin_memory=True)
    host.copy_(torch.stack(flags), non_blocking=True)
    torch.cuda.synchronize()
    return [bool(x) for x in host.tolist()], True


def _same_bits(torch: Any, a: Any, b: Any) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.device != b.device:
        a, b = a.cpu(), b.cpu()
    return bool(torch.equal(_bits(torch, a), _bits(torch, b)))


def _watched_functions(torch: Any) -> dict[str, tuple[Any, str, Any]]:
    """Functions the driver relies on or the candidate has reason to replace."""
    import builtins

    out = {}
    for owner, prefix, names in (
            (torch, "torch.", ("equal", "ne", "stack", "allclose", "isclose", "empty", "empty_like", "zeros",
                               "cat", "frombuffer", "testing")),
            (torch.Tensor, "torch.Tensor.", ("copy_", "clone", "view", "detach", "cpu", "to", "__eq__",
                                             "any", "tolist", "untyped_storage", "data_ptr", "stride",
                                             "contiguous")),
            (builtins, "builtins.", ("isinstance", "type", "len", "getattr", "open", "__import__",
                                     "print", "zip", "list", "all", "map")),
            (sys.modules[__name__], "gates.runner.driver.", ("is_", "repeat")),
            (torch.cuda, "torch.cuda.", ("synchronize", "current_stream", "set_stream", "stream", "Event",
                                         "Stream")),
            (torch.cuda.Event, "torch.cuda.Event.", ("record", "elapsed_time", "synchronize", "query")),
            (torch.cuda.Stream, "torch.cuda.Stream.", ("synchronize", "wait_stream", "query")),
            (json, "json.", ("dumps", "loads")), (wire, "gates.runner.wire.", ("send", "recv"))):
        for name in names:
            if hasattr(owner, name):
                out[prefix + name] = (owner, name, getattr(owner, name))
    return out


def _own_functions() -> dict[tuple[Any, str], Any]:
    """The functions and classes of the runner's own modules (this package), as loaded."""
    package = __name__.rpartition(".")[0]
    out = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == package or name.startswith(package + ".")):
            continue
        for attr, value in list(vars(module).items()):
            if callable(value) and getattr(value, "__module__", None) == name:
                out[(module, attr)] = value
    return out


class Draws:
    """Uniform draws from `source` (`os.urandom`, taken when the runner starts; a seeded stream's
    `randbytes` in tests)."""

    def __init__(self, source: Any) -> None:
        self.source = source

    def below(self, n: int) -> int:
        """A number in [0, n) (n small: the bias of the modulus is below 2**-50)."""
        return int.from_bytes(self.source(8), "little") % n

    def shuffle(self, items: list) -> None:
        for i in range(len(items) - 1, 0, -1):
            j = self.below(i + 1)
            items[i], items[j] = items[j], items[i]


def _count_launches(counter: list[int]) -> None:
    """Count Triton kernel launches (the AC005 warning), on the classes the candidate's
    kernels will be instances of."""
    for module, name in (("triton.runtime.jit", "JITFunction"), ("triton.runtime.interpreter",
                                                                  "InterpretedFunction")):
        try:
            cls = getattr(__import__(module, fromlist=[name]), name)
        except (ImportError, AttributeError):
            continue
        original = getattr(cls, "run", None)
        if original is None:
            continue

        def counting(self, *args, _original=original, **kwargs):
            if not kwargs.get("warmup"):
                counter[0] += 1
            return _original(self, *args, **kwargs)

        cls.run = counting


def _forget_hidden_paths(hidden: list[str], keep: list[str]) -> None:
    """Drop import-path entries the cage hides (the project the driver was imported from): a
    library's late import would otherwise list them, and be refused as a read outside the work
    directory (SB003) though it never meant to look there."""
    visible = [p for p in sys.path if not hooks._under(os.path.realpath(p or "."), tuple(hidden)) or
               hooks._under(os.path.realpath(p or "."), tuple(keep))]
    for path in set(sys.path) - set(visible):
        sys.path_importer_cache.pop(path, None)
    sys.path[:] = visible


def _warm_triton() -> None:
    """Build Triton's GPU driver module now, while the runner boots in the background (the host
    compiler takes seconds), not inside the candidate's first call; the judge keeps the result
    for the next runners (gates.judge.kernel_cache)."""
    try:
        from triton.runtime.driver import driver

        target = driver.active.get_current_target()
    except Exception:  # noqa: BLE001 - a Triton without this API: the first launch builds it
        return
    # Also what every process's first kernel compile or cache lookup computes once: the hash of
    # Triton itself (it reads the whole libtriton, about 1 s) and the backend's (ptxas --version).
    try:
        from triton.compiler.compiler import make_backend
        from triton.runtime.cache import triton_key

        triton_key()
        make_backend(target).hash()
    except Exception:  # noqa: BLE001 - another Triton's internals: the first compile pays
        pass


def _warm_torch(torch: Any) -> None:
    """Load the device code of what the driver does on every call (copies from and to the host,
    clones, bitwise comparisons) for each dtype, while the runner boots: CUDA loads a kernel on its
    first use, and otherwise each fresh runner paid that inside the candidate's first stage."""
    for dtype in dtype_table(torch).values():
        try:
            host = torch.zeros(4, dtype=dtype)
            dev = host.to("cuda")
            torch.equal(_bits(torch, dev), _bits(torch, dev.clone()))
            _differ(torch, [(dev, dev.clone())], "cuda")
            host.copy_(dev)
        except Exception:  # noqa: BLE001 - a dtype this GPU or torch cannot copy or compare
            continue
    torch.cuda.synchronize()


def main() -> None:
    """The runner process: cage, warm up, serve."""
    fd, cfg = int(sys.argv[1]), json.loads(sys.argv[2])
    sock = socket.socket(fileno=fd)
    try:
        iso = cage.enter(cfg["workdir"], uid=cfg["uid"], hide=cfg["hide"], keep=cfg["keep"],
                         memory_bytes=cfg["memory_bytes"], cpu_seconds=cfg["cpu_seconds"],
                         processes=cfg["processes"], file_bytes=cfg["file_bytes"],
                         open_files=cfg["open_files"])
        os.chdir(cfg["workdir"])
        import faulthandler

        import torch
        import triton  # noqa: F401 - imported before the candidate, not inside its first call

        faulthandler.enable(all_threads=False)
        if cfg["device"] != "cpu":
            torch.zeros(1, device="cuda").add_(1).item()
            _warm_triton()
            _warm_torch(torch)
        recorder = hooks.Recorder()
        driver = Driver(sock, cfg, recorder)
        hooks.install(recorder, workdir=cfg["workdir"], writable=cfg["writable"], hidden=cfg["hide"],
                      keep=cfg["keep"],
                      reference_dirs=cfg["reference_dirs"],
                      candidate_dir=os.path.join(cfg["workdir"], "candidate"), neutral_code=neutral.CODE)
        _forget_hidden_paths(cfg["hide"], cfg["keep"])
    except BaseException as exc:  # noqa: BLE001
        wire.send(sock, {"op": "boot-error", "error": loader.describe_exception(exc)})
        return
    wire.send(sock, {"op": "ready", "pid": os.getpid(), "isolation": iso.as_dict(), "events": []})
    driver.serve()
