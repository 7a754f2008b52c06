"""`replay` (answers from a fixture corpus, reading the conversation and never the manifest) and
`replay:RUN_DIR` (exact replay of a recorded run), plus the recorder's resume behaviour."""

from __future__ import annotations

import builtins
import io
import os
from pathlib import Path

import pytest

from agentloop.providers import ExchangeRecorder, Message, ProviderError, get_provider, read_exchanges
from agentloop.providers.extract import extract_code

TASKS = Path(__file__).parent / "fixtures" / "providers" / "tasks"
CORPUS = {p.name: p.read_text() for p in (TASKS / "rms_norm" / "candidates").glob("*.py")}
PROMPT = "Write a fast Triton kernel.\n\ntask: rms_norm\n\nThe entry function is rms_norm(x, weight, eps)."


def _replay():
    return get_provider("replay", tasks_dir=str(TASKS))


def _which(text: str) -> str:
    """The corpus file whose source the answer carries (the answer must carry exactly one)."""
    code = extract_code(text, "rms_norm")
    assert code is not None, text
    names = [name for name, src in CORPUS.items() if src.strip() == code.strip()]
    assert len(names) == 1, text
    return names[0]


def _conversation(*turns: str) -> list[Message]:
    """A user prompt, then alternating assistant answers and user feedback."""
    roles = ["user", "assistant"]
    return [Message(role=roles[i % 2], content=t) for i, t in enumerate((PROMPT, *turns))]


def test_answer_is_prose_and_one_corpus_source():
    completion = _replay().complete(_conversation(), seed=0)
    assert completion.text.startswith("Here is a kernel for `rms_norm`.")
    assert completion.text.count("```python") == 1
    _which(completion.text)
    assert (completion.provider, completion.input_tokens, completion.output_tokens) == ("replay", 0, 0)


def test_deterministic_for_a_seed_and_the_seed_matters():
    first = [_replay().complete(_conversation(), seed=s).text for s in range(16)]
    again = [_replay().complete(_conversation(), seed=s).text for s in range(16)]
    assert first == again
    assert len({_which(t) for t in first}) > 1


def test_never_opens_the_manifest(monkeypatch):
    opened: list[str] = []
    real_open, real_os_open = builtins.open, os.open

    def spy_open(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    def spy_os_open(path, *args, **kwargs):
        opened.append(str(path))
        return real_os_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(io, "open", spy_open)
    monkeypatch.setattr(os, "open", spy_os_open)
    assert (TASKS / "rms_norm" / "candidates" / "manifest.yaml").is_file()  # there to be read, if it were
    provider = _replay()
    for seed in range(4):
        provider.complete(_conversation(), seed=seed)
    assert any(p.endswith(".py") for p in opened), "the spy saw no reads at all"
    assert not [p for p in opened if "manifest" in p]


def test_does_not_repropose_what_the_conversation_holds():
    provider, turns, chosen = _replay(), [], []
    for i in range(len(CORPUS)):
        answer = provider.complete(_conversation(*turns), seed=7).text
        chosen.append(_which(answer))
        turns += [answer, f"Candidate {i} ran correctly but slowly. Try something else."]
    assert sorted(chosen) == sorted(CORPUS)
    # With every source already in the conversation it still answers.
    _which(provider.complete(_conversation(*turns), seed=7).text)


def test_sources_shown_in_the_prompt_are_not_proposed():
    shown = "Earlier attempts:\n```python\n" + CORPUS["row_per_program.py"] + "```\n"
    messages = [Message(role="user", content=PROMPT + "\n\n" + shown)]
    assert {_which(_replay().complete(messages, seed=s).text) for s in range(12)} <= set(CORPUS) - {
        "row_per_program.py"}


def test_batch_invariance_feedback_steers_away_from_the_named_mechanism():
    answer = "Here it is.\n```python\n" + CORPUS["split_row_small_batch.py"] + "```"
    feedback = ("Rejected by the dynamic gate (BI002): row 3 is not bitwise identical between batch size 1 "
                "and batch size 64. The row reduction is split differently for small batches.")
    picks = {s: _replay().complete(_conversation(answer, feedback), seed=s).text for s in range(10)}
    # The only fixture source showing none of the hazards.
    assert {_which(t) for t in picks.values()} == {"row_per_program.py"}
    assert "revised" in picks[0] and "whatever the batch size" in picks[0]


def test_guidance_heading_is_read_and_names_one_hazard():
    guided = PROMPT + "\n\n## Guidance\nDo not accumulate partial sums with atomics.\n"
    picks = {_which(_replay().complete([Message(role="user", content=guided)], seed=s).text)
             for s in range(16)}
    assert "atomic_sumsq.py" not in picks and len(picks) > 1
    plain = {_which(_replay().complete(_conversation(), seed=s).text) for s in range(16)}
    assert "atomic_sumsq.py" in plain  # without the guidance it is a candidate like any other


def _review_request(draft: str, bi_aware: bool) -> list[Message]:
    guidance = "\n\n## Batch-invariance guidance\nThe kernel must be batch invariant, bitwise.\n"
    ask = (f"## Draft to review\n```python\n{draft}```\n\nStart your answer with one line, "
           "`verdict: approve` when the draft can be evaluated as it is or `verdict: revise` "
           "when it must change.")
    guidance = guidance if bi_aware else ""
    return [Message(role="system", content="You are the reviewer."),
            Message(role="user", content=PROMPT + guidance + "\n\n" + ask)]


def test_review_requests_get_a_verdict_from_the_hazards_the_draft_shows():
    from agentloop.loop.styles.team import review_verdict

    replay = _replay()
    atomic = replay.complete(_review_request(CORPUS["atomic_sumsq.py"], bi_aware=True), seed=0).text
    assert review_verdict(atomic) == "revise" and "atomics" in atomic and "```" not in atomic
    clean = replay.complete(_review_request(CORPUS["row_per_program.py"], bi_aware=True), seed=0).text
    assert review_verdict(clean) == "approve"
    # Without batch-invariance guidance in the prompt the hazard is none of its business.
    baseline = replay.complete(_review_request(CORPUS["atomic_sumsq.py"], bi_aware=False), seed=0).text
    assert review_verdict(baseline) == "approve"
    # The coder asked to revise after that review steers away from the named hazard.
    revision = _conversation("Here it is.\n```python\n" + CORPUS["atomic_sumsq.py"] + "```", atomic)
    picks = {_which(replay.complete(revision, seed=s).text) for s in range(10)}
    assert "atomic_sumsq.py" not in picks


def test_prompt_without_task_line_is_a_one_line_error():
    with pytest.raises(ProviderError, match="task: <name>") as info:
        _replay().complete([Message(role="user", content="Write a kernel.")])
    assert "\n" not in str(info.value)


def test_unknown_task_names_the_directory():
    with pytest.raises(ProviderError, match="no candidate sources for task 'nope'"):
        _replay().complete([Message(role="user", content="task: nope")])


# replay:RUN_DIR --------------------------------------------------------------------------------

def _record_run(run_dir: Path) -> list[tuple[list[Message], int, str]]:
    """A small recorded run: three exchanges, two of them the same request with other seeds."""
    provider = ExchangeRecorder(run_dir).wrap(_replay(), task="rms_norm")
    calls = []
    for messages, seed in [(_conversation(), 0), (_conversation(), 1), (_conversation("x", "slow"), 2)]:
        calls.append((messages, seed, provider.complete(messages, seed=seed).text))
    return calls


def test_run_replay_is_exact_and_in_order(tmp_path):
    calls = _record_run(tmp_path / "run")
    assert len(read_exchanges(tmp_path / "run")) == 3
    replay = get_provider(f"replay:{tmp_path / 'run'}")
    # Seeds are not part of the match: identical requests get the recorded answers in order.
    for messages, _, text in calls:
        assert replay.complete(messages, seed=99).text == text
    with pytest.raises(ProviderError, match="all its recorded answers were used"):
        replay.complete(calls[0][0])
    with pytest.raises(ProviderError, match="never recorded") as info:
        replay.complete(_conversation("y", "unheard of"))
    assert "\n" not in str(info.value)


def test_run_replay_needs_a_record(tmp_path):
    with pytest.raises(ProviderError, match="no exchange record"):
        get_provider(f"replay:{tmp_path}")


class _MustNotBeCalled:
    name, model, spec = "replay", "", "replay"

    def complete(self, messages, *, seed=None):
        raise AssertionError("the recorded answer should have been reused")


def test_recorder_reuse_answers_a_resumed_run_from_the_record(tmp_path):
    calls = _record_run(tmp_path / "run")
    recorder = ExchangeRecorder(tmp_path / "run")
    resumed = recorder.wrap(_MustNotBeCalled(), reuse=True)
    for messages, seed, text in calls:
        assert resumed.complete(messages, seed=seed).text == text
    fresh = recorder.wrap(_replay(), reuse=True)
    fresh.complete(_conversation(), seed=5)  # a new request reaches the provider and is recorded
    records = read_exchanges(tmp_path / "run")
    assert [r.n for r in records] == [0, 1, 2, 3] and records[3].seed == 5


def test_a_line_cut_short_by_a_kill_is_skipped(tmp_path):
    _record_run(tmp_path / "run")
    path = tmp_path / "run" / "exchanges.jsonl"
    path.write_text(path.read_text() + '{"n": 3, "time": "2')
    assert len(read_exchanges(tmp_path / "run")) == 3
    ExchangeRecorder(tmp_path / "run").wrap(_replay()).complete(_conversation(), seed=4)
    records = read_exchanges(tmp_path / "run")
    assert [r.n for r in records] == [0, 1, 2, 3]


def test_performance_feedback_about_batch_sizes_does_not_steer():
    answer = "Here it is.\n```python\n" + CORPUS["row_per_program.py"] + "```"
    feedback = "Correct. Speedup 0.8x at batch size 256 and 1.1x at batch size 1; make it faster."
    picks = {_which(_replay().complete(_conversation(answer, feedback), seed=s).text) for s in range(16)}
    assert picks == set(CORPUS) - {"row_per_program.py"}


# Stable choices: what replay reads and what it never does --------------------------------------

def _feedback(number: int, **outcome) -> str:
    from agentloop.loop.prompts import Prompts

    variables = {"number": number, "status": "accepted", "stage": None, "details": "", "error": None,
                 "speedup": 1.0, "shapes": [], "best": None, "warnings": "", "production": None, **outcome}
    return Prompts().turn("feedback", "bi-aware", **variables).content


def _candidate(number: int, speedup: float | None = None, rejected_by: str | None = None):
    from agentloop.evaluation.benchmark import BenchmarkResult
    from agentloop.evaluation.stages import StageOutcome
    from agentloop.loop.state import Candidate

    bench = BenchmarkResult(task="rms_norm", dtype="bfloat16", device="cpu", speedup=speedup or 0.0,
                            correct=True)
    stages = {"benchmark": StageOutcome(stage="benchmark", passed=True, benchmark=bench)} if speedup else {}
    code = f"def rms_norm(x, weight, eps):  # {number}\n    return x\n"
    return Candidate(number=number, round=number, seed=number, answer=code, code=code, stages=stages,
                     status="rejected" if rejected_by else "accepted", rejected_by=rejected_by)


def test_stated_verdicts_are_read_from_the_templates_wording_without_numbers():
    from agentloop.loop.prompts import Prompts, task_brief
    from agentloop.loop.styles.base import shown
    from agentloop.providers.replay import stated_verdicts
    from gates.contract import get_task

    fast = _feedback(1, speedup=1.234, best={"number": 1, "speedup": 1.234})
    slow = _feedback(1, speedup=0.5, best={"number": 1, "speedup": 0.5})
    rejected = _feedback(2, status="rejected", stage="dynamic", details="row 3 differs at batch 8")
    answer = "Here it is.\n```python\n" + CORPUS["row_per_program.py"] + "```"
    one, two = _conversation(answer, fast, answer, rejected), _conversation(answer, slow, answer, rejected)
    assert one != two and stated_verdicts(one) == stated_verdicts(two) == (
        (1, "accepted"), (2, "rejected by dynamic"))
    # Lists and parents state verdicts as Candidate.summary() words them (evolve's prompt here).
    parent, other = _candidate(1, speedup=1.5), _candidate(2, rejected_by="compile")
    evolve = Prompts().messages("evolve", "bi-aware", **task_brief(get_task("rms_norm"), "cpu"),
                                parent=shown(parent), inspirations=[shown(other)])
    assert stated_verdicts(evolve) == ((1, "accepted"), (2, "rejected by compile"))


def test_choices_do_not_depend_on_measured_numbers_but_on_verdicts_and_who_asks():
    from agentloop.providers.base import request_meta

    answer = "Here it is.\n```python\n" + CORPUS["row_per_program.py"] + "```"
    replay = _replay()

    def picks(feedback: str, meta: dict | None = None) -> list[str]:
        token = request_meta.set(meta)
        try:
            return [_which(replay.complete(_conversation(answer, feedback), seed=s).text) for s in range(16)]
        finally:
            request_meta.reset(token)

    fast, slow = _feedback(1, speedup=1.234), _feedback(1, speedup=0.5)
    assert fast != slow and picks(fast) == picks(slow)
    # The verdict, and the loop (cell, role) that asks, are inputs of the choice.
    assert picks(_feedback(1, status="rejected", stage="compile", error="SyntaxError")) != picks(fast)
    assert picks(fast, {"cell": "refine/bi-aware/replay", "role": "coder"}) != picks(fast)
