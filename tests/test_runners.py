"""A judge's runners (gates.judge.runner_pool.Runners) on the CPU: spares kept booting, taken oldest first
and replaced at once; a candidate's runner is stopped when the next candidate comes."""

from __future__ import annotations

import os

import pytest
import torch
from procs import state

from gates.contract import get_task
from gates.judge.client import Runner
from gates.judge.runner_pool import Runners, reference_dirs
from gates.judge.runner_process import UID_SLOTS

RMS = get_task("rms_norm")
CODE = "def rms_norm(x, weight, eps):\n    return x  # {}\n"


def test_spares_are_taken_oldest_first_and_replaced_at_once():
    runners = Runners()
    runners.keep_spares = 2
    dirs = reference_dirs(RMS)
    try:
        runners.prestart("cpu", dirs)
        first, second = runners.spares
        a, _ = runners.for_code(CODE.format("a"), "rms_norm", "cpu", dirs)
        assert a is first and runners.spares[0] is second and len(runners.spares) == 2
        assert runners.for_code(CODE.format("a"), "rms_norm", "cpu", dirs)[0] is a  # held: no new runner
        b, _ = runners.for_code(CODE.format("b"), "rms_norm", "cpu", dirs)
        assert b is second and not a.alive and len(runners.spares) == 2
        uids = {r.uid for r in [b, *runners.spares]}
        assert len(uids) == 3 or uids == {-1}  # each its own uid when the judge is root
        runners.wait_spare()
        assert runners.spares[0].alive
    finally:
        everyone = [r for r in [runners.current, *runners.spares] if r is not None]
        runners.close()
    assert not any(r.alive for r in everyone) and runners.spares == [] and runners.current is None


def test_a_parked_runner_is_frozen_and_resumed_for_its_candidate():
    runners = Runners()
    runners.keep_held = 2
    dirs = reference_dirs(RMS)
    try:
        a, _ = runners.for_code(CODE.format("a"), "rms_norm", "cpu", dirs)
        b, _ = runners.for_code(CODE.format("b"), "rms_norm", "cpu", dirs)
        assert runners.parked == [a] and state(a.proc.pid) == "T"  # stopped: no thread of it runs
        again, changes = runners.for_code(CODE.format("a"), "rms_norm", "cpu", dirs)
        assert again is a and changes == [] and state(a.proc.pid) != "T" and runners.parked == [b]
        x = torch.ones(2, 4)
        assert torch.equal(a.call([x, torch.ones(4), 1e-6]).outs[0], x)  # same process, candidate loaded
        c, _ = runners.for_code(CODE.format("c"), "rms_norm", "cpu", dirs)
        assert runners.parked == [a] and not b.alive  # one parked at most: the least recent goes
        assert runners.loads == 3
    finally:
        everyone = [r for r in [runners.current, *runners.parked, *runners.spares] if r is not None]
        runners.close()
    assert not any(r.alive for r in everyone)


def test_a_runner_that_outlives_many_newer_ones_keeps_its_uid_to_itself():
    """A parked runner can live while more runners than there are uid slots come and go: none
    of them may get its uid (same uid: the newer candidate could signal or read the older)."""
    if os.geteuid() != 0:
        pytest.skip("runners take uids only when the judge is root")
    old = Runner("cpu")
    try:
        for _ in range(UID_SLOTS + 2):
            newer = Runner("cpu")
            assert newer.uid != old.uid
            newer.stop()
        assert old.alive
    finally:
        old.stop()


def test_a_write_to_an_input_is_mirrored_when_placing_the_outputs_grew_the_arena():
    """The outputs need a larger arena than the inputs did: the judge replaces it between the
    call and the placing, and the write to the input still comes back (from the new arena)."""
    code = "import torch\ndef rms_norm(x, weight, eps):\n    x.add_(1)\n    return torch.zeros(1 << 22)\n"
    runners = Runners()
    try:
        runner, _ = runners.for_code(code, "rms_norm", "cpu", reference_dirs(RMS))
        x = torch.zeros(2, 4)
        report = runner.call([x, torch.ones(4), 1e-6])
        assert runner.arena.size >= 4 << 22 and report.outs[0].numel() == 1 << 22  # grew for the output
        assert report.mutated == [0] and torch.equal(x, torch.ones(2, 4))
    finally:
        runners.close()


def test_a_parked_runner_lets_go_of_its_last_stage_s_memory():
    """Parking drops the runner's copies of the last stage's inputs: frozen runners held
    gigabytes each on the H200, and the GPU the pool shares ran out (docs/lab/gpu/boundary)."""
    from gates.judge.runner_process import rss

    runners = Runners()
    runners.keep_held = 2
    dirs = reference_dirs(RMS)
    try:
        a, _ = runners.for_code(CODE.format("a"), "rms_norm", "cpu", dirs)
        x = torch.ones(1 << 26)  # 256 MB: the runner keeps its own copy of each input
        a.call([x, torch.ones(4), 1e-6])
        held = rss(a.proc.pid)
        runners.for_code(CODE.format("b"), "rms_norm", "cpu", dirs)
        assert runners.parked == [a] and state(a.proc.pid) == "T"
        assert held - rss(a.proc.pid) > 200 << 20
        again, _ = runners.for_code(CODE.format("a"), "rms_norm", "cpu", dirs)
        assert again is a and torch.equal(a.call([x, torch.ones(4), 1e-6]).outs[0], x)  # copies anew
    finally:
        runners.close()


def test_a_runner_out_of_memory_in_its_own_copies_answers_in_the_protocol():
    """The driver's own copies running out of memory fail the call in the protocol's terms: not
    a broken protocol (SB007), and nothing to blame the candidate for; the pool runs such a stage
    again (agentloop.evaluation.pool). The runner is stopped all the same, and the candidate's next stage
    gets a fresh one."""
    from gates.judge.client import CandidateFailure

    # On its second call the candidate lowers its address-space limit: the driver's copy of
    # the next new input (256 MB) no longer fits (the arena had grown in the first call).
    code = ("import resource\n"
            "calls = []\n"
            "def rms_norm(x, weight, eps):\n"
            "    calls.append(1)\n"
            "    if len(calls) == 2:\n"
            "        size = int(open('/proc/self/status').read().split('VmSize:')[1].split()[0]) * 1024\n"
            "        hard = resource.getrlimit(resource.RLIMIT_AS)[1]\n"
            "        resource.setrlimit(resource.RLIMIT_AS, (size + (64 << 20), hard))\n"
            "    return x[:4].clone()\n")
    runners = Runners()
    try:
        runner, _ = runners.for_code(code, "rms_norm", "cpu", reference_dirs(RMS))
        first = torch.ones(1 << 26)
        runner.call([first, torch.ones(4), 1e-6])
        runner.call([first, torch.ones(4), 1e-6])
        with pytest.raises(CandidateFailure, match="out of memory: the runner could not hold"):
            runner.call([torch.zeros(1 << 26), torch.ones(4), 1e-6])
        with pytest.raises(CandidateFailure, match="the runner was stopped: it ran out of memory"):
            runner.call([first, torch.ones(4), 1e-6])
        assert not runner.alive and runner.take_findings() == []
        again, _ = runners.for_code(code, "rms_norm", "cpu", reference_dirs(RMS))
        assert again is not runner
        assert torch.equal(again.call([first, torch.ones(4), 1e-6]).outs[0], first[:4])
    finally:
        runners.close()
