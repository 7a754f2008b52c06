"""The three agent styles: what each asks the LLM, and that all of them go through the same graph."""

from __future__ import annotations

import pytest
from loop_fakes import ScriptedProvider, loop_context

from agentloop.campaign.run import checkpointer, run_loop_graph, thread_id
from agentloop.evaluation.stages import STAGES, StageOutcome
from agentloop.loop.cell import Budget
from agentloop.loop.graph import build_graph
from agentloop.loop.llm import AgentLLM
from agentloop.loop.prompts import Prompts, task_brief, without_code
from agentloop.loop.state import Candidate, LoopState, Usage
from agentloop.loop.styles import (
    EvolveSettings,
    EvolveStyle,
    Proposing,
    RefineSettings,
    RefineStyle,
    TeamStyle,
)
from agentloop.loop.styles.team import TeamSettings, review_verdict
from agentloop.providers import ExchangeRecorder
from agentloop.results.store import Store
from gates.contract import get_task

TASK = get_task("rms_norm")
KERNEL = "```python\nimport torch\n\ndef rms_norm(x, weight, eps):\n    return x\n```\n"


def _llm(tmp_path, providers) -> AgentLLM:
    store = Store(tmp_path / "results.sqlite")
    return AgentLLM(providers, store, ExchangeRecorder(tmp_path), cell="c", task="rms_norm", answered=[],
                    usage=Usage())


def _proposing(state, llm, mode="bi-aware", n=1) -> Proposing:
    return Proposing(state=state, task=TASK, mode=mode, prompts=Prompts(), brief=task_brief(TASK, "cpu"),
                     llm=llm, seeds=[100 + i for i in range(n)])


def _candidate(number, status="accepted", speedup=None, rejected_by=None, bi=True, code=None):
    stages = {s: StageOutcome(stage=s, passed=bi) for s in ("static", "dynamic")}
    if speedup is not None:
        from agentloop.evaluation.benchmark import BenchmarkResult

        stages["benchmark"] = StageOutcome(stage="benchmark", passed=True, benchmark=BenchmarkResult(
            task="rms_norm", dtype="bfloat16", device="cpu", speedup=speedup, correct=True))
    code = code or f"def rms_norm(x, weight, eps):  # kernel {number}\n    return x\n"
    answer = f"answer {number}\n```python\n{code}```"
    return Candidate(number=number, round=number, seed=number, answer=answer,
                     code=code, code_hash=f"h{number}", stages=stages, status=status, rejected_by=rejected_by,
                     feedback=f"## Feedback on candidate {number}\nnote {number}")


def test_refine_continues_one_conversation_with_feedback(tmp_path):
    llm = ScriptedProvider(lambda m: KERNEL)
    state = LoopState(task="rms_norm", candidates=[_candidate(1, speedup=1.2), _candidate(2, "rejected",
                                                                                         rejected_by="compile")])
    style = RefineStyle(RefineSettings(history=8))
    [proposal] = style.propose(_proposing(state, _llm(tmp_path, {"coder": llm})))
    messages = llm.requests[0]
    assert [m.role for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "task: rms_norm" in messages[1].content
    assert messages[2].content == state.candidates[0].answer and messages[5].content.endswith("note 2")
    assert proposal.parent == 2 and proposal.seed == 100
    short = ScriptedProvider(lambda m: KERNEL)
    RefineStyle(RefineSettings(history=1)).propose(_proposing(state, _llm(tmp_path / "s", {"coder": short})))
    assert len(short.requests[0]) == 4


def test_evolve_drafts_first_then_children_of_elites_with_diverse_inspirations(tmp_path):
    llm = ScriptedProvider(lambda m: KERNEL)
    style = EvolveStyle(EvolveSettings(per_round=3, elites=2, inspirations=2))
    drafts = style.propose(_proposing(LoopState(task="rms_norm"), _llm(tmp_path, {"coder": llm}), n=3))
    assert [p.seed for p in drafts] == [100, 101, 102] and all(p.parent is None for p in drafts)
    state = LoopState(task="rms_norm", candidates=[
        _candidate(1, speedup=1.1), _candidate(2, speedup=2.0), _candidate(3, speedup=1.5),
        _candidate(4, "rejected", rejected_by="dynamic", bi=False),
        _candidate(5, "rejected", rejected_by="compile")])
    llm = ScriptedProvider(lambda m: KERNEL)
    children = style.propose(_proposing(state, _llm(tmp_path / "2", {"coder": llm}), n=3))
    # Parents are the elites (2.0x, then 1.5x) in turn; inspirations cover other outcomes first.
    assert [c.parent for c in children] == [2, 3, 2]
    assert children[0].inspirations == [4, 5]
    prompt = {m.content for r in llm.requests for m in r if "## Parent" in m.content}
    assert len(prompt) == 2 and all("## Inspirations" in p for p in prompt)
    # In bi-aware mode a BI failure is never an elite, however fast.
    state.candidates[0] = _candidate(1, speedup=9.0, bi=False)
    ranked = style.population(_proposing(state, None))
    assert ranked[0].number == 2 and ranked[-1].number != 1


def test_team_plans_codes_reviews_and_revises_each_role_on_its_own_model(tmp_path):
    planner = ScriptedProvider(lambda m: "- one program per row\n```python\nprint('sketch')\n```\n")
    coder = ScriptedProvider(lambda m: KERNEL)
    reviewer = ScriptedProvider(lambda m: "verdict: revise\nThe weight is never applied.")
    llm = _llm(tmp_path, {"planner": planner, "coder": coder, "reviewer": reviewer})
    [proposal] = TeamStyle().propose(_proposing(LoopState(task="rms_norm"), llm))
    assert (len(planner.requests), len(coder.requests), len(reviewer.requests)) == (1, 2, 1)
    coder_prompt = coder.requests[0][-1].content
    assert "one program per row" in coder_prompt and "print('sketch')" not in coder_prompt
    assert "The weight is never applied" in coder.requests[1][-1].content
    assert proposal.notes["verdict"] == "revise" and "plan" in proposal.notes
    rows = llm.store.query("SELECT role FROM exchanges ORDER BY id")
    assert [r["role"] for r in rows] == ["planner", "coder", "reviewer", "coder"]

    approving = ScriptedProvider(lambda m: "Verdict: approve\nLooks right.")
    llm = _llm(tmp_path / "2", {"planner": planner, "coder": coder, "reviewer": approving})
    TeamStyle().propose(_proposing(LoopState(task="rms_norm"), llm))
    assert llm.usage.llm_calls == 3


def test_team_shows_the_planner_and_the_coder_why_the_last_kernel_was_rejected(tmp_path):
    planner, coder = ScriptedProvider(lambda m: "- tile it"), ScriptedProvider(lambda m: KERNEL)
    approve = ScriptedProvider(lambda m: "verdict: approve")
    rejected = _candidate(2, "rejected", rejected_by="dynamic", bi=False,
                          code="def rms_norm(x, weight, eps):  # two\n")
    state = LoopState(task="rms_norm", candidates=[_candidate(1, speedup=1.5), rejected])
    llm = _llm(tmp_path, {"planner": planner, "coder": coder, "reviewer": approve})
    TeamStyle().propose(_proposing(state, llm))
    plan_prompt, code_prompt = planner.requests[0][-1].content, coder.requests[0][-1].content
    assert "rejected by the dynamic stage" in plan_prompt and "note 2" in plan_prompt
    assert "# two" not in plan_prompt  # the planner gets the verdict, not the code
    assert "## Latest attempts" in code_prompt and "# two" in code_prompt and "note 2" in code_prompt
    # the best kernel is shown once, as the kernel to beat
    assert code_prompt.count("# kernel 1") == 1 and "### Candidate 1" not in code_prompt
    # the coder sees the last `attempts` candidates
    state = LoopState(task="rms_norm", candidates=[rejected, _candidate(3, speedup=2.0),
                                                   _candidate(4, "rejected", rejected_by="compile")])
    coder = ScriptedProvider(lambda m: KERNEL)
    llm = _llm(tmp_path / "2", {"planner": planner, "coder": coder, "reviewer": approve})
    TeamStyle(TeamSettings(attempts=1)).propose(_proposing(state, llm))
    shown_to_coder = coder.requests[0][-1].content
    assert "### Candidate 4" in shown_to_coder and "# two" not in shown_to_coder


def test_review_helpers():
    assert review_verdict("**Verdict:** approve\nfine") == "approve"
    assert review_verdict("looks wrong") == "revise"
    text = "Plan:\n```python\nx = 1\n```\nthen\n~~~\ny\n"
    prose = without_code(text, "(left out)")
    assert "x = 1" not in prose and "y" not in prose and "then" in prose and prose.count("(left out)") == 2


@pytest.mark.parametrize("style", ["refine", "evolve", "team"])
def test_every_style_goes_through_the_same_nodes(tmp_path, style):
    ctx = loop_context(tmp_path, style=style, budget=Budget(iterations=3))
    saver = checkpointer(tmp_path / "checkpoints.sqlite", keep=None)  # the whole history
    graph = build_graph(saver)
    state = run_loop_graph(graph, ctx)
    config = {"configurable": {"thread_id": thread_id(ctx.cell, "rms_norm")}}
    steps = [s.next[0] for s in reversed(list(graph.get_state_history(config))) if s.next]
    saver.conn.close()
    assert steps[:2] == ["__start__", "generate"] and steps[-1] == "finish"
    # Every round runs the stages in pipeline order until its candidates are concluded.
    order = ["generate", "compile", "static_gate", "dynamic_gate", "correctness", "benchmark"]
    rounds = " ".join(steps[1:-1]).split("generate")
    for r in filter(str.strip, rounds):
        names = ["generate"] + r.split()
        assert names == order[:len(names)]
    assert len(state.candidates) == 3
    assert (state.final is not None) == any(c.status == "accepted" for c in state.candidates)
    for c in state.candidates:
        assert list(c.stages) == list(STAGES[:len(c.stages)])


def test_the_final_kernel_ignores_speed_differences_timing_noise_makes():
    from agentloop.loop.state import speedup_tolerance

    kernels = [_candidate(1, speedup=1.00), _candidate(2, speedup=1.50), _candidate(3, speedup=1.52),
               _candidate(4, speedup=1.40, bi=False)]
    on_gpu = LoopState(task="rms_norm", candidates=kernels, tolerance=speedup_tolerance("cuda"))
    assert on_gpu.best(bi_aware=True).number == 2  # within 3 % of the fastest, and earlier
    assert LoopState(task="rms_norm", candidates=kernels[:2] + [_candidate(3, speedup=1.60)],
                     tolerance=speedup_tolerance("cuda")).best(bi_aware=True).number == 3
    on_cpu = LoopState(task="rms_norm", candidates=kernels, tolerance=speedup_tolerance("cpu"))
    assert on_cpu.best(bi_aware=True).number == 1  # the interpreter's timings say nothing
    assert on_cpu.best(bi_aware=False).number == 1
