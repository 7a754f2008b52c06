"""A call into a caged runner (gates.judge.client.Runner, gates/runner/driver.py): outputs that
fit the room the judge offers after the inputs come back with one round trip, larger ones with
the two-step placing; both report the same checks (inputs written, aliases, late work), and a
reply that lies about where the outputs are, or reports malformed checks, is not trusted."""

from __future__ import annotations

import pytest
import torch

from gates.contract import get_task
from gates.judge import client
from gates.judge.client import CandidateFailure
from gates.judge.runner_pool import Runners, reference_dirs
from gates.runner import wire

RMS = get_task("rms_norm")
BIG = 1 << 22  # floats: 16 MB, more than the arena a small call makes room for

WRITES_AND_ALIASES = ("import torch\n"
                      "def rms_norm(x, weight, eps):\n"
                      "    x.add_(1)\n"
                      "    return x * weight, x, torch.full((SIZE,), 3.0, device=x.device)\n")

LATE = ("import threading, time\nimport torch\n"
        "def _keep_writing(out):\n"  # without a pause: a loaded machine's sleeps can outlast the check
        "    end = time.monotonic() + 0.5\n"
        "    while time.monotonic() < end:\n"
        "        out.add_(1)\n"
        "def rms_norm(x, weight, eps):\n"
        "    out = torch.zeros(SIZE)\n"
        "    threading.Thread(target=_keep_writing, args=(out,), daemon=True).start()\n"
        "    return out\n")

# A runner taken over by its candidate, simulated from inside its process: the driver's own code
# is put back after every call (SB008), so these rewrite the driver's messages on their way out,
# in the socket's class, as a candidate that owned the process could.
TAKE_OVER = ("import json, socket, struct\nimport torch\n"
             "_sendall = socket.socket.sendall\n"
             "def sendall(self, data, *args):\n"
             "    (n,) = struct.unpack('!I', bytes(data[:4]))\n"
             "    header = json.loads(bytes(data[4:4 + n]))\n"
             "    if header.get('op') == 'result' and header.get('outs'):\n"
             "        body = json.dumps(rewrite(header)).encode()\n"
             "        data = struct.pack('!I', len(body)) + body\n"
             "    return _sendall(self, data, *args)\n"
             "socket.socket.sendall = sendall\n")
LIES_ABOUT_PLACEMENT = TAKE_OVER + (
    "def rewrite(header):\n"
    "    return {**header, 'placed': True}\n"
    "def rms_norm(x, weight, eps):\n"
    "    return torch.ones(SIZE)\n")

MALFORMED_REPORT = TAKE_OVER + (
    "def rewrite(header):\n"
    "    return {**header, 'mutated': 5, 'aliases': '0', 'late': {'k': 1}, 'state_changes': 7}\n"
    "def rms_norm(x, weight, eps):\n"
    "    return x * weight\n")


@pytest.fixture
def runners():
    pool = Runners()
    yield pool
    pool.close()


@pytest.fixture
def requests(monkeypatch):
    """The ops of the requests the judge sends, in order."""
    sent: list[str] = []
    send = wire.send

    def counting(sock, header, fds=()):
        sent.append(header.get("op"))
        return send(sock, header, fds)

    monkeypatch.setattr(client.wire, "send", counting)
    return sent


def runner_for(runners: Runners, code: str, size: int, device: str = "cpu"):
    runner, _ = runners.for_code(code.replace("SIZE", str(size)), "rms_norm", device, reference_dirs(RMS))
    runner.wait_ready()
    return runner


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                               reason="needs a GPU"))]


@pytest.mark.parametrize("device", DEVICES)
def test_outputs_that_fit_come_back_with_one_round_trip_and_every_check(runners, requests, device):
    runner = runner_for(runners, WRITES_AND_ALIASES, 8, device)
    x, w = torch.zeros(2, 4, device=device), torch.full((4,), 2.0, device=device)
    requests.clear()
    report = runner.call([x, w, 1e-6])
    assert requests == ["arena", "call"]  # no "place": the outputs went into the room the call offered
    assert torch.equal(report.outs[0], torch.full((2, 4), 2.0, device=device))
    assert torch.equal(report.outs[1], torch.ones(2, 4, device=device))
    assert torch.equal(report.outs[2], torch.full((8,), 3.0, device=device))
    assert report.mutated == [0] and torch.equal(x, torch.ones(2, 4, device=device))  # the write is mirrored
    assert report.aliases == [(1, 0)] and report.late == []
    assert [f.rule for f in runner.take_findings()] == ["AC001"]
    requests.clear()
    again = runner.call([x, w, 1e-6])
    assert torch.equal(again.outs[1], torch.full((2, 4), 2.0, device=device)) and requests == ["call"]


@pytest.mark.parametrize("device", DEVICES)
def test_outputs_that_do_not_fit_are_placed_in_two_steps_then_the_next_call_has_room(runners, requests,
                                                                                      device):
    runner = runner_for(runners, WRITES_AND_ALIASES, BIG, device)
    x, w = torch.zeros(2, 4, device=device), torch.full((4,), 2.0, device=device)
    requests.clear()
    report = runner.call([x, w, 1e-6])
    # The first arena, the call, a larger arena for the outputs, and where they go in it.
    assert requests == ["arena", "call", "arena", "place"] and runner.arena.size >= 4 * BIG
    assert torch.equal(report.outs[0], torch.full((2, 4), 2.0, device=device))
    assert torch.equal(report.outs[1], torch.ones(2, 4, device=device))
    assert torch.equal(report.outs[2], torch.full((BIG,), 3.0, device=device))
    assert report.mutated == [0] and torch.equal(x, torch.ones(2, 4, device=device))  # from the new arena
    assert report.aliases == [(1, 0)] and report.late == []
    requests.clear()
    again = runner.call([x, w, 1e-6])
    assert requests == ["call"] and torch.equal(again.outs[1], torch.full((2, 4), 2.0, device=device))
    assert torch.equal(again.outs[2], torch.full((BIG,), 3.0, device=device)) and again.mutated == [0]


@pytest.mark.parametrize("size", [8, BIG], ids=["one-trip", "two-step"])
def test_work_left_running_after_return_is_found_on_either_path(runners, requests, size):
    runner = runner_for(runners, LATE, size)
    requests.clear()
    report = runner.call([torch.zeros(2, 4), torch.ones(4), 1e-6])
    assert ("place" in requests) == (size == BIG)
    assert report.late == [0]
    assert {"SB004", "SB010"} <= {f.rule for f in runner.take_findings()}


def test_a_runner_that_says_it_placed_outputs_beyond_the_room_offered_is_stopped(runners):
    # Just under the 1 MB arena a small call makes: it would fit from the start of the arena, but
    # not after the inputs, where the room was; the rewritten reply says it was placed.
    runner = runner_for(runners, LIES_ABOUT_PLACEMENT, (1 << 20) // 4 - 32)
    with pytest.raises(CandidateFailure, match="placed outputs where the judge offered no room") as failed:
        runner.call([torch.zeros(2, 4), torch.ones(4), 1e-6])
    assert failed.value.rule == "SB007" and not runner.alive
    assert "SB007" in {f.rule for f in runner.take_findings()}


@pytest.mark.parametrize("placed", ["yes", 1, None])
def test_a_result_whose_placement_claim_is_not_true_or_false_or_was_not_asked_for_is_refused(runners, placed):
    runner = runner_for(runners, MALFORMED_REPORT, 8)
    header = {"t": "tensor", "dtype": "float32", "shape": [4], "strides": [1], "device": "cpu",
              "subclass": None}
    reply = {"op": "result", "error": None, "outs": [header], "placed": True if placed is None else placed}
    with pytest.raises(CandidateFailure) as failed:  # None: placed, where the request offered no room
        runner._receive_outputs(reply, 0, None if placed is None else runner.arena.size)
    assert failed.value.rule == "SB007" and not runner.alive


def test_a_malformed_report_of_checks_is_dropped_not_trusted(runners):
    runner = runner_for(runners, MALFORMED_REPORT, 8)
    x, w = torch.ones(2, 4), torch.full((4,), 2.0)
    report = runner.call([x, w, 1e-6])
    assert torch.equal(report.outs[0], x * w)  # judged from the bytes, whatever the report says
    assert report.mutated == [] and report.aliases == [] and report.late == [] and report.state_changes == []
    assert runner.alive


def test_an_output_the_judge_refuses_from_its_header_is_never_copied(runners):
    """A 4 TiB view of one element fits no room: its header goes first, and the judge refuses it
    (SB007) before the driver makes any copy of it (which would run out of memory)."""
    code = "import torch\ndef rms_norm(x, weight, eps):\n    return torch.zeros(1).expand(2**20, 2**20)\n"
    runner = runner_for(runners, code, 0)
    with pytest.raises(CandidateFailure, match="larger than any task's") as failed:
        runner.call([torch.zeros(2, 4), torch.ones(4), 1e-6])
    assert failed.value.rule == "SB007"


COUNTS = ("import torch\n"
          "CALLS = [0]\n"
          "def rms_norm(x, weight, eps):\n"
          "    CALLS[0] += 1\n"
          "    if bool((x < 0).any()):\n"
          "        raise ValueError('a negative input')\n"
          "    return x * weight, torch.full((SIZE,), float(CALLS[0]), device=x.device)\n")


def lanes_of(values: list[float], w: torch.Tensor) -> list[list]:
    """One call's arguments per value: x of that value, the same weight for all."""
    return [[torch.full((1, 4), v, device=w.device), w, 1e-6] for v in values]


@pytest.mark.parametrize("device", DEVICES)
def test_calls_made_together_are_each_a_call_of_their_own_in_one_request(runners, requests, device):
    runner = runner_for(runners, COUNTS, 8, device)
    w = torch.full((4,), 2.0, device=device)
    runner.call(lanes_of([1.0], w)[0])  # the room a call's outputs take is known from here on
    requests.clear()
    reports = runner.call_lanes(lanes_of([1.0, 2.0, 3.0], w))
    assert requests == ["calls"]
    assert [r.outs[0].tolist() for r in reports] == [[[2.0] * 4], [[4.0] * 4], [[6.0] * 4]]
    assert [r.outs[1][0].item() for r in reports] == [2.0, 3.0, 4.0]  # called in order, once each
    assert all(r.mutated == [] and r.late == [] for r in reports)


def test_calls_after_one_whose_outputs_took_two_steps_are_sent_again(runners, requests):
    runner = runner_for(runners, COUNTS, BIG)
    w = torch.full((4,), 2.0)
    requests.clear()
    reports = runner.call_lanes(lanes_of([1.0, 2.0, 3.0], w))
    # No room was known: the first call's outputs took the two-step placing (which grew the
    # arena), the runner stopped there, and the other two went in a second request.
    assert requests.count("calls") == 2 and requests.index("place") < len(requests) - 1
    assert [r.outs[1][0].item() for r in reports] == [1.0, 2.0, 3.0]
    assert [r.outs[0][0, 0].item() for r in reports] == [2.0, 4.0, 6.0]
    requests.clear()
    assert len(runner.call_lanes(lanes_of([1.0, 2.0], w))) == 2 and requests == ["calls"]


def test_a_call_that_raises_among_calls_made_together_stops_the_ones_after_it(runners):
    runner = runner_for(runners, COUNTS, 8)
    w = torch.full((4,), 2.0)
    with pytest.raises(client.CandidateRaised, match="negative"):
        runner.call_lanes(lanes_of([1.0, -1.0, 2.0], w))
    # The third was never called: this is the runner's third call, and it is in step.
    assert runner.call(lanes_of([5.0], w)[0]).outs[1][0].item() == 3.0 and runner.alive


def test_calls_sent_to_two_runners_at_once_are_read_in_turn(runners):
    other = Runners()  # a pool holds one runner awake at a time
    try:
        first = runner_for(runners, COUNTS, 8)
        second = runner_for(other, COUNTS.replace("x * weight", "x + weight"), 8)
        w = torch.full((4,), 2.0)
        finish_first = first.start_lanes(lanes_of([1.0, 2.0], w))
        finish_second = second.start_lanes(lanes_of([3.0], w))  # sent before the first's replies are read
        assert [r.outs[0][0, 0].item() for r in finish_second()] == [5.0]
        assert [r.outs[0][0, 0].item() for r in finish_first()] == [2.0, 4.0]
        assert first.alive and second.alive
    finally:
        other.close()


def test_a_second_request_before_the_replies_to_calls_made_together_are_read_is_refused(runners):
    """A runner takes one request at a time: another would overwrite the arena that holds the
    inputs of the calls still out (`run_lanes` keeps one request out per runner)."""
    runner = runner_for(runners, COUNTS, 8)
    w = torch.full((4,), 2.0)
    finish = runner.start_lanes(lanes_of([1.0, 2.0], w))
    with pytest.raises(RuntimeError, match="one request at a time"):
        runner.start_lanes(lanes_of([3.0], w))
    with pytest.raises(RuntimeError, match="one request at a time"):
        runner.call(lanes_of([3.0], w)[0])
    assert [r.outs[0][0, 0].item() for r in finish()] == [2.0, 4.0]
    assert runner.call(lanes_of([3.0], w)[0]).outs[0][0, 0].item() == 6.0 and runner.alive
