"""The `openevolve` style and the gates as OpenEvolve's evaluator: the real OpenEvolve package, on
rms_norm on the CPU, with the replay provider through the loopback endpoint.

- the campaign of all four styles, both modes (tasks/campaigns/frameworks.yaml) runs offline: the
  openevolve cells' candidates are in results.sqlite with every gate's verdict, their LLM answers in
  the exchanges, and summary.json has their cells;
- a hostile candidate that OpenEvolve gets from its model is contained as in every style: judged
  in the caged worker pool, its marker file never written, no key in any verdict or artifact;
- the evaluator's metrics and artifacts (the feedback our styles show their LLM)."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pytest
import yaml

pytest.importorskip("openevolve")

from agentloop.campaign import file as campaign_file  # noqa: E402
from agentloop.frameworks.openevolve_evaluator import Gates  # noqa: E402
from agentloop.loop.styles import OpenEvolveSettings  # noqa: E402
from agentloop.providers import Completion  # noqa: E402
from agentloop.results.store import Store  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "tests" / "hostile" / "candidates"
MARKER = Path("/tmp/agentloop-hostile-os_write_tmp")


@pytest.fixture
def campaign_with_openevolve(monkeypatch):
    """Triton's interpreter for the OpenEvolve driver's process too."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def test_the_frameworks_campaign_runs_every_style_offline(tmp_path, campaign_with_openevolve):
    from agentloop.campaign.run import run_campaign
    from agentloop.results.report import write_reports

    raw = yaml.safe_load((ROOT / "tasks" / "campaigns" / "frameworks.yaml").read_text())
    assert raw["styles"] == ["refine", "evolve", "team", "openevolve"] and raw["model"] == "replay"
    campaign = campaign_file.parse_campaign(raw)
    out = tmp_path / "run"
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
    assert (out / "openevolve").is_dir()


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
    assert full.artifacts["feedback"].startswith("## Feedback on candidate")
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
