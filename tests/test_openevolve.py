"""The `openevolve` style and the gates as OpenEvolve's evaluator: the real OpenEvolve package, on
rms_norm on the CPU, with the replay provider through the loopback endpoint.

- the campaign of all four styles, both modes (tasks/campaigns/frameworks.yaml) runs offline: the
  openevolve cells' candidates are in results.sqlite with every gate's verdict, their LLM answers in
  the exchanges, and summary.json has their cells;
- a hostile candidate that OpenEvolve gets from its model is contained as in every style: judged
  in the caged worker pool, its marker file never written, no key in any verdict or artifact;
- the evaluator's metrics and artifacts (the feedback our styles show their LLM), which names no
  candidate number (OpenEvolve's programs have none of ours);
- Ctrl-C: a real `agentloop run` gets SIGINT once the openevolve loop's first candidate is in
  results.sqlite, exits 130 within 2 s leaving no OpenEvolve process nor its endpoint, and
  `--resume` continues OpenEvolve from its checkpoint to the budget, no candidate lost or doubled;
- OpenEvolve's own failure ends its loop with the reason while the campaign's other loop goes on."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytest.importorskip("openevolve")

from agentloop.campaign import file as campaign_file  # noqa: E402
from agentloop.frameworks.openevolve_evaluator import FEEDBACK_HEADING, Gates  # noqa: E402
from agentloop.loop.styles import OpenEvolveSettings  # noqa: E402
from agentloop.providers import Completion  # noqa: E402
from agentloop.results.store import Store  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "tests" / "hostile" / "candidates"
MARKER = Path("/tmp/agentloop-hostile-os_write_tmp")
DRIVER = "agentloop.frameworks.openevolve_run"


@pytest.fixture
def campaign_with_openevolve(monkeypatch):
    """Triton's interpreter for the OpenEvolve driver's process too."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def test_the_frameworks_campaign_runs_every_style_offline(tmp_path, monkeypatch, campaign_with_openevolve):
    from agentloop.campaign.run import run_campaign
    from agentloop.results.report import write_reports

    raw = yaml.safe_load((ROOT / "tasks" / "campaigns" / "frameworks.yaml").read_text())
    assert raw["styles"] == ["refine", "evolve", "team", "openevolve"] and raw["model"] == "replay"
    campaign = campaign_file.parse_campaign(raw)
    monkeypatch.chdir(tmp_path)
    out = Path("run")  # relative, as `--out runs/x` gives it (OpenEvolve's process has a cwd of its own)
    run_campaign(campaign, out)
    write_reports(out)  # what `agentloop run` does after the loops

    store = Store(out / "results.sqlite")
    cell = "openevolve/bi-aware/replay"
    rows = store.candidates(cell, "rms_norm")
    assert len(rows) == campaign.budget.iterations
    for row in rows + store.candidates("openevolve/baseline/replay", "rms_norm"):
        stages = [g["gate"] for g in store.gate_results(row["id"])]
        assert stages and stages[0] == "compile", row
        if row["status"] == "accepted":
            assert stages == ["compile", "static", "dynamic", "correctness", "benchmark"]
    # Every program came from an LLM answer the loop recorded.
    exchanges = store.query("SELECT COUNT(*) AS n FROM exchanges WHERE cell = ?", cell)[0]["n"]
    assert exchanges >= len(rows)
    summary = json.loads((out / "summary.json").read_text())
    cells = {(c["style"], c["mode"]): c for c in summary["cells"]}
    assert set(cells) == {(s, m) for s in raw["styles"] for m in raw["modes"]}
    for mode in raw["modes"]:
        assert {"bi_pass_rate", "geomean_speedup"} <= set(cells[("openevolve", mode)])
    # The feedback OpenEvolve got back for each of its programs (its trace keeps their artifacts)
    # names no candidate number: the same text for every program would say "candidate 1".
    feedbacks = [json.loads(line)["artifacts"]["feedback"]
                 for trace in (out / "openevolve").glob("*/evolution_trace.jsonl")
                 for line in trace.read_text().splitlines()]
    programs = [r for m in raw["modes"] for r in store.candidates(f"openevolve/{m}/replay", "rms_norm")
                if r["code"]]
    assert feedbacks and len(feedbacks) == len(programs)
    for text in feedbacks:
        assert text.startswith(FEEDBACK_HEADING + "\n") and not re.search(r"candidate \d", text), text
    _no_openevolve_left()


def test_a_hostile_candidate_from_openevolve_is_contained(tmp_path, monkeypatch):
    """OpenEvolve's model answers an OS escape (a marker file in /tmp) then a key thief; both are
    judged caged and rejected, nothing is written, no key comes back."""
    from agentloop.frameworks import openevolve_run

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    key = f"sk-hostile-test-{secrets.token_hex(8)}"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    MARKER.unlink(missing_ok=True)
    answers = [(HOSTILE / "os_write_tmp.py").read_text(), (HOSTILE / "secret_env_exception.py").read_text()]
    asked = []

    def complete(messages, seed):
        asked.append(messages)
        code = answers[min(len(asked), len(answers)) - 1]
        return Completion(text=f"```python\n{code}```\n", model="hostile", provider="test")

    gates = Gates("rms_norm", "bi-aware", "cpu", out=tmp_path / "gates")
    judged = {}

    def stage(body):
        outcome = gates.stage(body["code"], body["stage"])
        judged.setdefault(body["code"], []).append(outcome)
        return {"outcome": outcome.model_dump(mode="json")}

    class Link:  # the style's side of the driver's pipes, in this process
        def ask(self, request):
            if request["kind"] == "llm":
                from agentloop.providers import Message
                c = complete([Message.model_validate(m) for m in request["messages"]], request["seed"])
                return {"completion": c.model_dump()}
            return stage(request)

    job = {"iterations": 2, "seed": 0, "model": "hostile", "output_dir": str(tmp_path / "oe"),
           "initial_program": str(ROOT / "tasks" / "rms_norm" / "reference.py"),
           "system_message": "task: rms_norm\nWrite the kernel.",
           "settings": OpenEvolveSettings(islands=1).model_dump(),
           "gates": {**gates.config(), "out": str(tmp_path / "gates")}}
    result = openevolve_run.run(job, Link())
    try:
        assert not MARKER.exists(), "the candidate wrote outside its directory"
    finally:
        MARKER.unlink(missing_ok=True)
    programs = {p["iteration"]: p for p in result["programs"]}
    assert set(programs) >= {0, 1, 2}, result
    for i in (1, 2):
        assert programs[i]["metrics"]["combined_score"] == 0.0, programs[i]
    verdicts = {c: [o.model_dump(mode="json") for o in v] for c, v in judged.items()}
    text = json.dumps(result) + json.dumps(verdicts)
    assert key not in text and key.split("-")[-1] not in text
    # Judged in the caged pool, like every style's candidates.
    escape = judged[next(c for c in judged if "agentloop-hostile-os_write_tmp" in c)]
    assert any(not o.passed for o in escape)
    assert gates._local().pool.isolation()


def test_the_evaluator_scores_and_feeds_back_like_the_styles(tmp_path):
    os.environ.setdefault("TRITON_INTERPRET", "1")
    gates = Gates("rms_norm", "baseline", "cpu", out=tmp_path)
    path = tmp_path / "reference_copy.py"
    path.write_text((ROOT / "tasks" / "rms_norm" / "reference.py").read_text())
    first = gates.evaluate_stage1(str(path))
    assert first.metrics["combined_score"] == 1.0 and "feedback" not in first.artifacts
    full = gates.evaluate(str(path))  # the reference itself: anti-cheat rejects it
    assert full.metrics["combined_score"] == 0.0 and full.metrics["correct"] == 0.0
    assert full.artifacts["rejected_by"] == "correctness"
    assert full.artifacts["feedback"].startswith(FEEDBACK_HEADING + "\nRejected by the correctness stage.")
    assert not re.search(r"candidate \d", full.artifacts["feedback"])  # no number of a loop's
    assert "AC003" in full.artifacts["feedback"]


def test_the_evaluator_file_is_written_with_its_config(tmp_path):
    from agentloop.frameworks.openevolve_evaluator import write_evaluator

    path = write_evaluator(tmp_path, "softmax", "baseline", "cpu", out=tmp_path / "g")
    config = json.loads((tmp_path / "agentloop_gates.json").read_text())
    assert config["task"] == "softmax" and config["mode"] == "baseline"
    assert "evaluate_stage3" in path.read_text()


def test_without_the_extra_the_style_says_how_to_install_it(monkeypatch):
    import importlib.util

    from agentloop.loop.styles import openevolve

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "openevolve" else real(n, *a))
    assert openevolve.missing_extra() == ("the openevolve style needs OpenEvolve: "
                                          "pip install 'agentloop[openevolve]'")
    with pytest.raises(RuntimeError, match=r"pip install 'agentloop\[openevolve\]'"):
        openevolve.OpenEvolveStyle()


def _children(pid: int) -> list[int]:
    """Child processes started by any of its threads (the style starts OpenEvolve from a loop's)."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def _descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        for c in _children(todo.pop()):
            if c not in found:
                found.add(c)
                todo.append(c)
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _no_openevolve_left(job: Path | None = None, within_s: float = 20.0) -> None:
    """No OpenEvolve driver (or worker, a fork of it) is left: of this process's runs, or of the
    job's, whoever started it."""

    def drivers() -> list[int]:
        pids = _descendants(os.getpid()) if job is None else \
            [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]
        return [p for p in pids if DRIVER in _cmdline(p) and (job is None or str(job) in _cmdline(p))]

    deadline = time.monotonic() + within_s
    while True:
        left = drivers()
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, [_cmdline(p) for p in left]


def _candidates(db: Path) -> list[tuple]:
    if not db.is_file():
        return []
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return conn.execute("SELECT cell, iteration, id, status, code FROM candidates").fetchall()
    except sqlite3.OperationalError:  # the table is not created yet
        return []


@pytest.mark.timeout(400)
def test_sigint_stops_an_openevolve_loop_and_resume_finishes_it(tmp_path):
    from procs import parent, state

    from agentloop.loop.styles.openevolve import JOURNAL_FILE, read_journal
    from agentloop.providers.extract import extract_code

    campaign = tmp_path / "campaign.yaml"
    campaign.write_text(yaml.safe_dump({
        "name": "stop-openevolve", "tasks": ["rms_norm"], "styles": ["openevolve"], "modes": ["bi-aware"],
        "model": "replay", "budget": {"iterations": 2}, "device": "cpu", "seed": 0,
        "openevolve": {"islands": 1},
        "eval": {"stage_timeout_s": {"compile": 60, "dynamic": 120, "correctness": 120, "benchmark": 120}}}))
    out, db = tmp_path / "run", tmp_path / "run" / "results.sqlite"
    env = {**os.environ, "TRITON_INTERPRET": "1"}

    def start(args: list[str], log: Path) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "agentloop.cli", *args], env=env, stdout=log.open("w"),
                                stderr=subprocess.STDOUT)

    first = tmp_path / "first.log"
    proc = start(["run", str(campaign), "--out", str(out)], first)
    below: set[int] = set()
    deadline = time.monotonic() + 300
    while not _candidates(db):  # OpenEvolve's first iteration is in the store: stop it now
        assert proc.poll() is None, first.read_text()
        assert time.monotonic() < deadline, first.read_text()
        below |= _descendants(proc.pid)
        time.sleep(0.1)
    below |= _descendants(proc.pid)
    drivers = [p for p in below if DRIVER in _cmdline(p) and state(p) != "Z" and parent(p) == proc.pid]
    assert len(drivers) == 1, "OpenEvolve was not running when its loop's first candidate was recorded"
    assert _descendants(drivers[0]), "OpenEvolve's worker process"
    work = next((out / "openevolve").iterdir())
    port = int(re.search(r"OpenEvolve's endpoint is http://127\.0\.0\.1:(\d+)/v1",
                         (work / "openevolve.log").read_text()).group(1))

    began = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    seconds = time.monotonic() - began
    output = first.read_text()
    assert code == 130, output  # as every style's run
    assert seconds < 2.0, f"stopped {seconds:.2f} s after SIGINT"
    assert "stopped by SIGINT" in output and "Traceback" not in output, output
    assert f"continue with: agentloop run --resume --out {out}" in output
    # Nothing is left: no OpenEvolve driver, worker or campaign worker, and no endpoint on its port.
    gone_by = time.monotonic() + 5
    while any(state(p) != "Z" for p in below) and time.monotonic() < gone_by:
        time.sleep(0.1)
    assert not [(p, _cmdline(p)) for p in below if state(p) != "Z"]
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect(("127.0.0.1", port))
    kept = _candidates(db)
    assert kept and f"{len(kept)} candidates recorded" in output
    made = {r.get("iteration") for r in read_journal(work / JOURNAL_FILE)}

    second = tmp_path / "second.log"
    resumed = start(["run", "--resume", "--out", str(out)], second)
    assert resumed.wait(300) == 0, second.read_text()
    rows = _candidates(db)
    assert set(kept) <= set(rows)  # what was kept stays as it was
    cell = "openevolve/bi-aware/replay"
    assert sorted((c, i) for c, i, *_ in rows) == [(cell, 1), (cell, 2)]  # none lost, none twice
    if 2 not in made:  # OpenEvolve was stopped inside iteration 2: it went on from its checkpoint 1
        assert "OpenEvolve continues from its checkpoint 1" in (work / "openevolve.log").read_text()
    # Candidate k is OpenEvolve's iteration k, each iteration once in its journal.
    journal = [r for r in read_journal(work / JOURNAL_FILE) if r.get("iteration", 0) > 0]
    assert sorted(r["iteration"] for r in journal) == [1, 2]
    for r in journal:
        code = next(row[4] for row in rows if row[1] == r["iteration"])
        assert code == extract_code(f"`````python\n{r['code']}\n`````\n", "rms_norm")
    _no_openevolve_left(work / "job.json")  # the resumed run's OpenEvolve ended with it


@pytest.mark.timeout(300)
def test_openevolve_failing_ends_its_loop_with_the_reason_and_the_campaign_goes_on(tmp_path, monkeypatch):
    """OpenEvolve raises in its controller (a feature dimension its evaluator never returns: it
    fails on the initial program); its loop ends saying so, the refine loop beside it finishes."""
    import io

    from rich.console import Console

    from agentloop.campaign.run import run_campaign

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    unknown = {"database": {"feature_dimensions": ["complexity", "latency_ms"]}}
    campaign = campaign_file.parse_campaign({
        "name": "oe-fails", "tasks": ["rms_norm"], "styles": ["refine", "openevolve"], "modes": ["bi-aware"],
        "model": "replay", "budget": {"iterations": 1}, "device": "cpu", "seed": 0,
        "openevolve": {"islands": 1, "config": unknown},
        "eval": {"stage_timeout_s": {"compile": 60, "dynamic": 120, "correctness": 120, "benchmark": 120}}})
    out, shown = tmp_path / "run", io.StringIO()
    outcome = run_campaign(campaign, out, console=Console(file=shown, width=400))
    assert outcome.loops == outcome.ran == 2
    store = Store(out / "results.sqlite")
    for style in ("refine", "openevolve"):
        assert store.finished(f"{style}/bi-aware/replay", "rms_norm"), style
    assert len(store.candidates("refine/bi-aware/replay", "rms_norm")) == 1
    assert store.candidates("openevolve/bi-aware/replay", "rms_norm") == []
    lines = shown.getvalue().splitlines()
    ended = next(ln for ln in lines if ln.startswith("openevolve/bi-aware/replay|rms_norm: "))
    assert "0 candidates, no correct kernel (OpenEvolve ended after 0 iterations: ValueError: Feature " \
           "dimension 'latency_ms' specified in config but not found in program metrics" in ended, ended
    assert any(ln.startswith("refine/bi-aware/replay|rms_norm: 1 candidate") for ln in lines), lines
    _no_openevolve_left()


def test_a_restarted_journal_agrees_with_openevolves_last_checkpoint(tmp_path):
    """Before OpenEvolve continues from checkpoint N, the journal holds iterations 1..N once each:
    a line past the checkpoint (a kill's) is dropped, a checkpointed iteration missing its line
    gets it from the checkpoint's programs; without a checkpoint it starts empty."""
    from agentloop.loop.styles.openevolve import JOURNAL_FILE, LOST, prepare_journal, read_journal

    programs = tmp_path / "checkpoints" / "checkpoint_3" / "programs"
    programs.mkdir(parents=True)
    (programs.parent / "metadata.json").write_text("{}")
    for pid, i, extra in (("p0", 0, {}), ("p2", 2, {}), ("m1", 1, {"metadata": {"migrant": True}})):
        (programs / f"{pid}.json").write_text(json.dumps(
            {"id": pid, "code": f"# {pid}", "parent_id": "p0", "iteration_found": i, "metrics": {"x": 1},
             **extra}))
    journal = tmp_path / JOURNAL_FILE
    lines = [{"iteration": 0, "id": "p0"}, {"iteration": 1, "id": "p1", "code": "# p1"},
             {"migrant": "m1", "of": "p1"}, {"iteration": 1, "id": "again"}, {"iteration": 4, "error": "x"}]
    journal.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"iteration": 5, "co')
    assert prepare_journal(tmp_path) == 3
    kept = read_journal(journal)
    assert kept == [{"iteration": 0, "id": "p0"}, {"iteration": 1, "id": "p1", "code": "# p1"},
                    {"migrant": "m1", "of": "p1"},
                    {"iteration": 2, "id": "p2", "parent_id": "p0", "code": "# p2", "metrics": {"x": 1}},
                    {"iteration": 3, "error": LOST}]
    before = journal.read_text()
    assert prepare_journal(tmp_path) == 3 and journal.read_text() == before  # idempotent
    journal.write_text("".join(json.dumps(r) + "\n" for r in kept[1:]))  # the initial's line lost too
    assert prepare_journal(tmp_path) == 3 and read_journal(journal)[0] == {"iteration": 0, "id": "p0"}
    (programs.parent / "metadata.json").unlink()  # no usable checkpoint: OpenEvolve starts afresh
    assert prepare_journal(tmp_path) == 0 and read_journal(journal) == []
