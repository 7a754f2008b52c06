"""The device arena (gates.runner.device_memory, gates.judge.arena.DeviceArena): GPU runners get
their inputs and hand back their outputs in device memory shared with the judge. Needs a GPU
(skipped here; run on the GPU host); on the CPU every runner uses the host arena, which the
rest of the suite covers."""

from __future__ import annotations

import os

import pytest
import torch

from gates.contract import get_task
from gates.judge.arena import DeviceArena, HostArena
from gates.judge.runner_pool import Runners, reference_dirs
from gates.runner.device_memory import SharedDeviceMemory

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
RMS = get_task("rms_norm")
SCALE = "def rms_norm(x, weight, eps):\n    return x * weight  # {}\n"
WRITES = "def rms_norm(x, weight, eps):\n    x.add_(1)\n    return x * 2\n"


def test_two_mappings_of_one_allocation_see_each_others_writes():
    device = torch.cuda.current_device()
    made = SharedDeviceMemory.create(3 << 20, device)
    fd = made.export()
    try:
        seen = SharedDeviceMemory.open(fd, made.size, device)
    finally:
        os.close(fd)
    a, b = made.tensor(torch), seen.tensor(torch)
    assert a.data_ptr() != b.data_ptr() and a.numel() == b.numel() >= 3 << 20
    a[:16] = torch.arange(16, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    assert torch.equal(b[:16].cpu(), torch.arange(16, dtype=torch.uint8))
    made.close()
    b[16:32] = 7  # the memory lives while one mapping is left
    torch.cuda.synchronize()
    assert int(b[16:32].sum()) == 7 * 16
    seen.close()


def test_a_gpu_runner_uses_a_device_arena_and_lets_it_go_when_parked():
    runners = Runners()
    runners.keep_held = 2
    dirs = reference_dirs(RMS)
    try:
        a, _ = runners.for_code(SCALE.format("a"), "rms_norm", "cuda", dirs)
        x, w = torch.randn(64, 256, device="cuda"), torch.randn(256, device="cuda")
        out = a.call([x, w, 1e-6]).outs[0]
        assert isinstance(a.arena, DeviceArena) and a.arena.size >= 1 << 21
        assert int(a.arena.bytes[1 << 20:].count_nonzero()) == 0  # zeroed: nothing the judge had there before
        assert out.device.type == "cuda" and torch.equal(out, x * w)
        b, _ = runners.for_code(SCALE.format("b"), "rms_norm", "cuda", dirs)
        assert runners.parked == [a] and a.arena.size == 0  # parked: its device memory given back
        again, _ = runners.for_code(SCALE.format("a"), "rms_norm", "cuda", dirs)
        assert again is a
        big = torch.randn(4096, 256, device="cuda")  # grows the arena anew
        assert torch.equal(a.call([big, w, 1e-6]).outs[0], big * w) and a.arena.size >= big.nbytes
    finally:
        runners.close()


def test_a_write_to_an_input_comes_back_through_the_device_arena():
    runners = Runners()
    try:
        runner, _ = runners.for_code(WRITES, "rms_norm", "cuda", reference_dirs(RMS))
        x, w = torch.zeros(8, 16, device="cuda"), torch.ones(16, device="cuda")
        report = runner.call([x, w, 1e-6])
        assert report.mutated == [0] and torch.equal(x, torch.ones_like(x))  # mirrored, as in-process
        assert torch.equal(report.outs[0], torch.full_like(x, 2))
        assert any(f.rule == "AC001" for f in runner.take_findings())
    finally:
        runners.close()


def test_the_host_arena_stays_available(monkeypatch):
    monkeypatch.setenv("AGENTLOOP_ARENA", "host")
    runners = Runners()
    try:
        runner, _ = runners.for_code(SCALE.format("h"), "rms_norm", "cuda", reference_dirs(RMS))
        x, w = torch.randn(4, 8, device="cuda"), torch.randn(8, device="cuda")
        assert torch.equal(runner.call([x, w, 1e-6]).outs[0], x * w)
        assert isinstance(runner.arena, HostArena)
    finally:
        runners.close()


def test_a_parked_gpu_runner_gives_its_cached_device_memory_back():
    """Besides the arena, a parked runner empties its allocator's cache (its copies of the
    inputs, the candidate's freed outputs): frozen runners held gigabytes each, and in the
    H200 campaign the GPU ran out (docs/lab/gpu/boundary/README.md, session 9)."""
    runners = Runners()
    runners.keep_held = 2
    dirs = reference_dirs(RMS)
    try:
        a, _ = runners.for_code(SCALE.format("cache-a"), "rms_norm", "cuda", dirs)
        x, w = torch.randn(1 << 18, 1024, device="cuda"), torch.randn(1024, device="cuda")  # 1 GiB
        a.call([x, w, 1e-6])
        arena = a.arena.size
        torch.cuda.synchronize()
        free_before = torch.cuda.mem_get_info()[0]
        runners.for_code(SCALE.format("cache-b"), "rms_norm", "cuda", dirs)
        assert runners.parked == [a]
        freed = torch.cuda.mem_get_info()[0] - free_before
        # The arena, and of the runner's cache (the input's copy, its pristine clone and the
        # output, 1 GiB each) more than the next candidate's new runner took for its context.
        assert freed > arena + (1 << 30), (freed, arena)
    finally:
        runners.close()
