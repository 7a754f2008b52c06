"""Durability: a campaign killed with SIGKILL resumes with `--resume`, losing no result and
asking the LLM nothing it had already answered."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from loop_fakes import REAL_CORPUS, ScriptedProvider, loop_context
from procs import children

from agentloop.campaign.run import LatestCheckpoints, checkpointer, run_loop_graph, thread_id
from agentloop.campaign.status import run_status
from agentloop.evaluation.stages import StageOutcome
from agentloop.loop.cell import Budget, Cell
from agentloop.loop.graph import build_graph
from agentloop.loop.llm import AgentLLM
from agentloop.loop.state import Candidate, Usage
from agentloop.providers import ExchangeRecorder, Message, request_hash
from agentloop.results.store import Store

KERNELS = [(REAL_CORPUS / "rms_norm" / "candidates" / f).read_text()
           for f in ("rows.py", "split_by_batch.py", "forgets_weight.py")]


class LLMServer:
    """An OpenAI-compatible server on loopback playing a team: the reviewer approves, the planner
    plans, the coder answers with a corpus kernel chosen by the request. It counts the answers it
    gives per request and leaves request number `hold` unanswered until released."""

    def __init__(self, hold: int | None = None) -> None:
        self.hold = hold
        self.answered: Counter[str] = Counter()
        self.received = 0
        self.holding = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                messages = [Message(role=m["role"], content=m["content"]) for m in body["messages"]]
                with server._lock:
                    server.received += 1
                    number = server.received
                if number == server.hold:
                    server.holding.set()
                    server.release.wait(120)
                    return
                reply = json.dumps({
                    "id": f"c{number}", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": server.answer(messages)}}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)
                with server._lock:
                    server.answered[request_hash(messages)] += 1

            def log_message(self, *args):
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    @staticmethod
    def answer(messages: list[Message]) -> str:
        system = messages[0].content
        if "reviewer" in system:
            return "verdict: approve\nNo problems found."
        if "planner" in system:
            return "- one program per row, the whole row in one block"
        pick = int(hashlib.sha256(messages[-1].content.encode()).hexdigest(), 16) % len(KERNELS)
        return f"Here is the kernel.\n```python\n{KERNELS[pick]}```\n"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}/v1"

    def close(self) -> None:
        self.release.set()
        self.http.shutdown()
        self.http.server_close()


def _agentloop(args: list[str], server: LLMServer, log: Path) -> subprocess.Popen:
    env = {**os.environ, "OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "test-key", "TRITON_INTERPRET": "1"}
    return subprocess.Popen([sys.executable, "-m", "agentloop.cli", "run", *args], env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT)


def _cached_stages(out: Path) -> int:
    store = Store(out / "results.sqlite")
    try:
        return sum(len(json.loads(r["result"])) for r in store.query("SELECT result FROM evaluations"))
    finally:
        store.close()


@pytest.mark.timeout(900)
def test_sigkill_then_resume_repeats_no_answered_call_and_loses_nothing(tmp_path):
    # Two loops one after the other (team, 2 candidates of 3 calls each: planner, coder,
    # reviewer). Request 11 is the second loop's second coder call: when it arrives, the first
    # loop has finished, the second has a concluded candidate, and the planner's answer (10) is
    # stored but not yet checkpointed (its node is still waiting for 11). Then SIGKILL.
    campaign = tmp_path / "campaign.yaml"
    campaign.write_text(yaml.safe_dump({
        "name": "resume", "tasks": ["rms_norm"], "styles": ["team"], "modes": ["baseline", "bi-aware"],
        "model": "openai:fake", "budget": {"iterations": 2}, "device": "cpu", "parallel": 1,
        "eval": {"stage_timeout_s": {"compile": 60, "dynamic": 120, "correctness": 120, "benchmark": 120}}}))
    out = tmp_path / "run"
    server = LLMServer(hold=11)
    workers: set[int] = set()
    try:
        first = _agentloop([str(campaign), "--out", str(out)], server, tmp_path / "first.log")
        while not server.holding.wait(0.2):
            workers.update(children(first.pid))
            assert first.poll() is None, (tmp_path / "first.log").read_text()
        workers.update(children(first.pid))
        first.send_signal(signal.SIGKILL)
        first.wait()
        server.release.set()

        store = Store(out / "results.sqlite")
        before = {r["cell"]: r for r in store.task_results()}
        assert list(before) == ["team/baseline/openai:fake"]  # the first loop only
        candidates_before = {(c["cell"], c["iteration"]): c["id"] for c in store.candidates()}
        second = "team/bi-aware/openai:fake"
        assert (second, 1) in candidates_before and (second, 2) not in candidates_before
        stored = store.query("SELECT COUNT(*) AS n FROM exchanges WHERE cell = ?", second)[0]["n"]
        saver = checkpointer(out / "checkpoints.sqlite")
        cell = Cell(style="team", mode="bi-aware", provider="openai:fake")
        config = {"configurable": {"thread_id": thread_id(cell, "rms_norm")}}
        answered = build_graph(saver).get_state(config).values["answered"]
        saver.conn.close()
        assert (stored, len(answered)) == (4, 3)  # the planner's answer is only in the store
        cached = _cached_stages(out)
        store.close()

        resumed = _agentloop([str(campaign), "--out", str(out), "--resume"], server, tmp_path / "second.log")
        assert resumed.wait(600) == 0, (tmp_path / "second.log").read_text()
    finally:
        server.close()
        for pid in workers:  # the killed run's workers exit on their own once idle; make sure
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    output = (tmp_path / "second.log").read_text()
    store = Store(out / "results.sqlite")
    results = {r["cell"]: r for r in store.task_results()}
    assert sorted(results) == ["team/baseline/openai:fake", second]
    first_loop = "team/baseline/openai:fake"
    assert results[first_loop]["finished_at"] == before[first_loop]["finished_at"]
    assert "1 of 2 loops run" in output
    # No lost result: every candidate once, those recorded before the kill untouched.
    after = {(c["cell"], c["iteration"]): c["id"] for c in store.candidates()}
    assert sorted(after) == sorted((c, i) for c in results for i in (1, 2))
    assert all(after[k] == v for k, v in candidates_before.items())
    # No answered request asked again: the server answered each request exactly as often as the
    # run used it, and every exchange is in both records.
    rows = store.query("SELECT request_hash FROM exchanges")
    assert Counter(r["request_hash"] for r in rows) == server.answered
    lines = (out / "exchanges.jsonl").read_text().splitlines()
    assert len(lines) == len(rows) == sum(r["llm_calls"] for r in results.values()) == 12
    assert sum(server.answered.values()) == 12
    # No evaluation repeated: the resumed run evaluated only stages that were not cached.
    evaluated = int(re.search(r"(\d+) stages evaluated", output).group(1))
    assert evaluated == _cached_stages(out) - cached
    store.close()


def test_a_request_answered_before_a_crash_is_taken_from_the_store(tmp_path):
    store = Store(tmp_path / "results.sqlite")
    llm = ScriptedProvider(lambda m: f"answer to {m[-1].content}")
    messages = [Message(role="user", content="task: rms_norm\nq")]
    first = AgentLLM({"coder": llm}, store, ExchangeRecorder(tmp_path), cell="c", task="t", answered=[],
                     usage=Usage())
    first.ask("coder", messages, seed=1)
    first.ask("coder", messages, seed=2)
    assert len(llm.requests) == 2
    # A node re-run after a crash: its checkpoint had used one of the two answers.
    again = AgentLLM({"coder": llm}, store, ExchangeRecorder(tmp_path), cell="c", task="t",
                     answered=[request_hash(messages)], usage=Usage())
    again.ask("coder", messages, seed=2)
    assert len(llm.requests) == 2 and again.reused == 1
    again.ask("coder", messages, seed=3)  # a third identical request is new: asked
    assert len(llm.requests) == 3
    assert len((tmp_path / "exchanges.jsonl").read_text().splitlines()) == 3


def test_a_loop_that_failed_mid_node_resumes_from_its_checkpoint(tmp_path):
    good = KERNELS[0]
    calls = {"n": 0}

    def flaky(messages):
        calls["n"] += 1
        if calls["n"] == 3:
            from agentloop.providers import ProviderError

            raise ProviderError("scripted: server gone")
        return f"```python\n{good}```"

    llm = ScriptedProvider(flaky)
    ctx = loop_context(tmp_path, style="refine", budget=Budget(iterations=3), providers={"coder": llm})
    saver = checkpointer(tmp_path / "checkpoints.sqlite")
    graph = build_graph(saver)
    with pytest.raises(Exception, match="server gone"):
        run_loop_graph(graph, ctx)
    assert not ctx.store.task_results()
    # The checkpoint gives back the state's models, not bare dicts.
    saved = graph.get_state({"configurable": {"thread_id": thread_id(ctx.cell, "rms_norm")}}).values
    assert isinstance(saved["candidates"][1], Candidate) and isinstance(saved["usage"], Usage)
    assert isinstance(saved["candidates"][1].stages["benchmark"], StageOutcome)
    state = run_loop_graph(graph, ctx)  # the same loop, continued
    # Only the latest checkpoints are kept (one per node would grow with the loop's length squared).
    kept = saver.conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0]
    saver.conn.close()
    assert 1 <= kept <= LatestCheckpoints.keep
    assert [c.number for c in state.candidates] == [1, 2, 3]
    assert len(llm.requests) == 4  # two answered, one failed, then the third asked again
    assert [r["iteration"] for r in ctx.store.candidates()] == [1, 2, 3]
    assert ctx.store.task_results()[0]["llm_calls"] == 3


def test_a_loop_killed_between_a_nodes_writes_and_the_next_checkpoint_goes_on(tmp_path):
    """A kill after a node's writes were saved and before the checkpoint that follows them: the
    loop's snapshot then has no `next` node, only a task whose writes wait to be applied; the loop
    is not finished, and a resume runs it to its end."""
    ctx = loop_context(tmp_path, budget=Budget(iterations=1))
    saver = checkpointer(tmp_path / "checkpoints.sqlite")
    graph = build_graph(saver)
    put, puts = saver.put, []

    def killed_at_the_third(*args):
        puts.append(1)
        if len(puts) == 3:  # a node's writes are saved, the checkpoint after them is not
            raise RuntimeError("killed")
        return put(*args)

    saver.put = killed_at_the_third
    with pytest.raises(RuntimeError, match="killed"):
        run_loop_graph(graph, ctx)
    snapshot = graph.get_state({"configurable": {"thread_id": thread_id(ctx.cell, "rms_norm")}})
    assert not snapshot.next and snapshot.tasks and snapshot.tasks[0].result is not None
    # `agentloop status` shows the loop at that node, not as started without a checkpoint
    (tmp_path / "campaign.yaml").write_text(yaml.safe_dump(
        {"name": "killed", "tasks": ["rms_norm"], "styles": ["refine"], "modes": ["bi-aware"],
         "model": "replay"}))
    [loop] = run_status(tmp_path).loops
    assert loop.state == f"at {snapshot.tasks[0].name}", loop.state
    saver.put = put
    state = run_loop_graph(graph, ctx)
    saver.conn.close()
    assert state.stop_reason is not None and len(ctx.store.task_results()) == 1
    assert len(ctx.store.candidates()) == 1
