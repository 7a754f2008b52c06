"""Offline providers: `replay` answers from a task's candidate corpus; `replay:RUN_DIR` replays a run.

`replay` plays an LLM that knows a handful of kernels, the corpus files
`<tasks dir>/<task>/candidates/*.py`. Like an LLM it sees only the conversation and those
sources; it never reads the corpus manifest (the labels). What it reads in the conversation:

- the task: a line `task: <name>` in the prompt (any system or user message; by convention the
  first user message). Prompt templates must include it.
- what it already proposed or was shown: a corpus source that appears in any message is not
  proposed again while others are left.
- feedback: every user message after its first answer, plus, in any message, the text after a
  heading or label line containing "Feedback" or "Guidance" (`## Feedback`, `BI guidance:`).
  Where that text names a batch-invariance hazard (atomics, autotune, heuristics, split
  reductions, vendor matmuls, batch-wide values, padded lengths) it prefers sources that do not
  show it; where it speaks of batch invariance in general ("bitwise", "invariant", "BI001"...) it
  prefers sources that show fewer hazards. The prose claims only what the chosen source shows.
  Ties are broken by a generator seeded by what is stable across runs: the seed, the task, the
  cell and role (the loop's request meta), the turn (the answers earlier in the conversation) and
  the verdicts the request states on earlier candidates (`stated_verdicts`). Never by the rest
  of the text: prompts carry measured speedups and times, which differ from run to run, so a
  campaign on `replay` repeats its candidates whatever its timings.

Its answer is prose and one fenced ```python block holding a corpus source verbatim.

Asked for a review instead (a request that offers both `verdict: approve` and `verdict: revise`,
as the team reviewer's prompt does), it reviews the request's last ```python block: where the
prompt speaks of batch invariance and the draft shows a hazard, it answers `verdict: revise` and
names each hazard and what to do instead; otherwise `verdict: approve`. It cannot judge
correctness or speed, and says so. It reports zero tokens and zero cost.
"""

from __future__ import annotations

import ast
import hashlib
import json
import random
import re
import threading
import time
from collections import defaultdict, deque
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ConfigDict

from agentloop.providers.base import (
    Completion,
    Message,
    Provider,
    ProviderError,
    ProviderOptions,
    request_hash,
    request_meta,
)
from agentloop.providers.extract import code_blocks
from agentloop.providers.record import ExchangeRecord, read_exchanges

_TASK_LINE = re.compile(r"^[ \t>*_-]*task[*_]*[ \t]*:[ \t]*`?([A-Za-z0-9_.-]+)`?[ \t]*$",
                        re.MULTILINE | re.IGNORECASE)
# A heading with the word, or a line whose first few words end in it ("Feedback:", "BI guidance").
_FEEDBACK_HEAD = re.compile(
    r"^[ \t]*(?:#+[^\n]*|[*_]*(?:[\w-]+[ \t]+){0,3}?)\b(?:feedback|guidance)\b[^\n]*$", re.MULTILINE | re.I)
# Bare "batch" is not a cue: performance feedback speaks of batch sizes too.
_GENERAL_BI = re.compile(r"bitwise|invarian|\bBI\d{3}\b|determinis|batch[- ]dependen|depends on the batch"
                         r"|differs? (?:between|across|with) (?:the )?batch", re.IGNORECASE)
_REVIEW_ASK = re.compile(r"verdict:\s*approve.*verdict:\s*revise|verdict:\s*revise.*verdict:\s*approve",
                         re.IGNORECASE | re.DOTALL)
_BATCH_NAMES = r"(?:T|M|B|N_ROWS|n_rows|num_tokens|num_seqs|batch|batch_size|bs|x\.shape\[0\])"
# Verdicts as the prompt templates (prompts/_outcome.j2, Candidate.summary) state them: a
# "## Feedback on candidate 3" heading and its first line, or "candidate 3 (accepted, 1.2x
# speedup)" and "Candidate 3: rejected by the static stage" in lists.
_FEEDBACK_VERDICT = re.compile(r"^#+[ \t]*Feedback on candidate[ \t]+(\d+)[ \t]*\n\s*"
                               r"(Accepted|Rejected by the ([\w-]+) stage|Your answer held no code)",
                               re.MULTILINE | re.IGNORECASE)
_SUMMARY_VERDICT = re.compile(
    r"\bcandidate[ \t]+(\d+)(?:[ \t]*:[ \t]*|[ \t]+\()"
    r"(accepted|rejected by the ([\w-]+) stage|rejected: no code|not evaluated yet)", re.IGNORECASE)


class Hazard(NamedTuple):
    """A batch-invariance hazard: how feedback names it and how a source shows it."""

    name: str
    cue: re.Pattern[str]
    sign: re.Pattern[str]
    avoided: str
    """Prose for a source that does not show it."""


def _re(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags | re.MULTILINE)


HAZARDS = [
    Hazard("atomics", _re(r"atomic", re.I), _re(r"\btl\.atomic_\w+|\.atomic_\w+\("),
           "accumulates without atomics"),
    Hazard("autotune", _re(r"autotun", re.I), _re(r"@triton\.autotune"), "is not autotuned"),
    Hazard("heuristics", _re(r"heuristic", re.I), _re(r"@triton\.heuristics"),
           "uses no @triton.heuristics"),
    Hazard("split", _re(r"split|partial sum|reduction order", re.I),
           _re(rf"\b(?:SPLIT\w*|split_k|split_kv|num_splits|NUM_SPLITS|n_splits?)\b"
               rf"|\b(?:if|while)\b[^\n]*\b{_BATCH_NAMES}\b\s*(?:[<>]=?|==|!=|\*|//|%)"),
           "keeps one reduction order and tiling whatever the batch size"),
    Hazard("vendor_op", _re(r"cublas|vendor|torch\.(?:matmul|mm|bmm)", re.I),
           _re(r"torch\.(?:matmul|mm|bmm|addmm|baddbmm|einsum)\(|\bF\.linear\(|functional\.linear\("
               r"|[\w)\]]\s@\s[\w(]"),
           "calls no vendor matmul"),
    Hazard("batch_global", _re(r"whole batch|batch-wide|other rows|across rows|across the batch", re.I),
           _re(r"\.(?:amax|max|min|sum|mean|norm)\(\s*\)"), "computes nothing over the whole batch"),
    Hazard("padded_length", _re(r"padded|seq_lens", re.I),
           _re(r"range\([^)\n]*\b(?:L|max_len|max_seq_len|padded_len)\b"),
           "bounds its loops by each sequence's own length"),
]


def find_task(messages: list[Message]) -> str:
    """The task named by a `task: <name>` line of the prompt."""
    for m in messages:
        if m.role != "assistant":
            found = _TASK_LINE.search(m.content)
            if found:
                return found.group(1)
    raise ProviderError("replay: the prompt has no line 'task: <name>'; "
                        "the prompt template must name the task")


def feedback_text(messages: list[Message]) -> str:
    """What replay reads as feedback and guidance (see the module docstring)."""
    parts: list[str] = []
    answered = False
    for m in messages:
        if m.role == "assistant":
            answered = True
        elif answered and m.role == "user":
            parts.append(m.content)
        else:
            head = _FEEDBACK_HEAD.search(m.content)
            if head:
                parts.append(m.content[head.start():])
    return "\n".join(parts)


Verdicts = tuple[tuple[int, str], ...]


def _verdict(said: str, stage: str | None) -> str:
    said = said.lower()
    if stage:
        return f"rejected by {stage.lower()}"
    if said.startswith(("your answer", "rejected: no code")):
        return "rejected by extract"
    return "pending" if said.startswith("not evaluated") else "accepted"


def stated_verdicts(messages: list[Message]) -> Verdicts:
    """The verdicts on earlier candidates that a request states (its prompts and feedback, not
    the answers), as (candidate number, "accepted" | "rejected by <stage>" | "pending") sorted:
    what a request says about earlier outcomes without its measured numbers."""
    found: set[tuple[int, str]] = set()
    for m in messages:
        if m.role == "assistant":
            continue
        for f in _FEEDBACK_VERDICT.finditer(m.content):
            found.add((int(f.group(1)), _verdict(f.group(2), f.group(3))))
        for f in _SUMMARY_VERDICT.finditer(m.content):
            found.add((int(f.group(1)), _verdict(f.group(2), f.group(3))))
    return tuple(sorted(found))


def verdicts_line(verdicts: Verdicts) -> str:
    """Verdicts in words, for messages."""
    return "; ".join(f"candidate {n} {v}" for n, v in verdicts) or "no verdicts"


def _normal(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").split("\n")).strip()


def _describe(source: str) -> str:
    """One sentence on what a source defines, when it parses."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ""
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    kernels = [f.name for f in funcs if any("jit" in ast.unparse(d) for d in f.decorator_list)]
    hosts = [f.name for f in funcs if f.name not in kernels and not f.name.startswith("_")]
    if not hosts:
        return ""
    if not kernels:
        return f" `{hosts[-1]}` is written in plain PyTorch."
    names = ", ".join(f"`{k}`" for k in kernels)
    return f" `{hosts[-1]}` launches {len(kernels)} Triton kernel{'s' * (len(kernels) > 1)} ({names})."


class ReplayOptions(ProviderOptions):
    tasks_dir: str | None = None
    """Where `<task>/candidates/*.py` live; default the suite's tasks directory."""


class ReplayProvider(Provider):
    """`replay`: an offline LLM that proposes corpus candidates (see the module docstring)."""

    name = "replay"
    Options = ReplayOptions

    def candidates(self, task: str) -> dict[str, str]:
        """The corpus sources of a task by file name: `*.py` only, never the manifest."""
        from gates.contract import tasks_dir

        root = Path(self.options.tasks_dir) if self.options.tasks_dir else tasks_dir()
        directory = root / task / "candidates"
        files = sorted(directory.glob("*.py"))
        if not files:
            raise ProviderError(f"replay: no candidate sources for task {task!r} in {directory}")
        return {p.name: p.read_text(encoding="utf-8") for p in files}

    @staticmethod
    def choice_key(messages: list[Message], seed: int | None, task: str) -> str:
        """What breaks ties between equally good sources: the seed, the task, the cell and role
        of the loop's request meta (empty outside a loop), the turn in the conversation and the
        verdicts the request states; nothing measured (see the module docstring)."""
        meta = request_meta.get() or {}
        turn = sum(m.role == "assistant" for m in messages)
        return json.dumps([seed or 0, task, str(meta.get("cell", "")), str(meta.get("role", "")), turn,
                           stated_verdicts(messages)])

    def choose(self, messages: list[Message], seed: int | None) -> tuple[str, str]:
        """(prose, source) of the answer to a conversation."""
        task = find_task(messages)
        sources = self.candidates(task)
        conversation = "\n".join(_normal(m.content) for m in messages)
        seen = {f for f, src in sources.items() if _normal(src) in conversation}
        unseen = [f for f in sources if f not in seen] or list(sources)
        feedback = feedback_text(messages)
        named = {h.name for h in HAZARDS if h.cue.search(feedback)}
        general = bool(_GENERAL_BI.search(feedback))

        def shows(src: str) -> set[str]:
            return {h.name for h in HAZARDS if h.sign.search(src)}

        def penalty(f: str) -> int:
            signs = shows(sources[f])
            return 2 * len(signs & named) + (len(signs) if general else 0)

        best = min(penalty(f) for f in unseen)
        digest = hashlib.sha256(self.choice_key(messages, seed, task).encode()).hexdigest()
        chosen = random.Random(int(digest[:16], 16)).choice([f for f in unseen if penalty(f) == best])
        source = sources[chosen]

        answered = any(m.role == "assistant" for m in messages)
        prose = (f"Thanks for the feedback. Here is a revised kernel for `{task}`." if answered
                 else f"Here is a kernel for `{task}`.")
        prose += _describe(source)
        # Claims in the prose cover the hazards named, or in general terms those shown so far.
        worried = named | (set().union(*(shows(sources[f]) for f in seen)) if general else set())
        avoided = [h.avoided for h in HAZARDS if h.name in worried and h.name not in shows(source)]
        if avoided and best == 0:
            prose += " This version " + "; it ".join(avoided) + "."
        return prose, source

    def complete(self, messages: list[Message], *, seed: int | None = None) -> Completion:
        start = time.perf_counter()
        asked = messages[-1].content if messages else ""
        if _REVIEW_ASK.search(asked):
            text = review(messages)
        else:
            prose, source = self.choose(messages, seed)
            text = f"{prose}\n\n```python\n{source.rstrip()}\n```\n"
        return Completion(text=text, latency_s=time.perf_counter() - start, model="corpus",
                          provider=self.name, cost_usd=0.0)


def review(messages: list[Message]) -> str:
    """A reviewer's answer on the last ```python block of the request (see the module docstring)."""
    blocks = [b.code for b in code_blocks(messages[-1].content) if b.is_python]
    if not blocks:
        return "verdict: revise\n- There is no draft to review: give the kernel in one ```python block."
    draft = blocks[-1]
    prompt = "\n".join(m.content for m in messages if m.role != "assistant")
    hazards = [h for h in HAZARDS if h.sign.search(draft)] if _GENERAL_BI.search(prompt) else []
    if not hazards:
        return ("verdict: approve\nI see nothing in the draft that the task forbids; I cannot check its "
                "numbers or its speed, the evaluation will.")
    lines = [f"- It shows a batch-invariance hazard ({h.name}): make it so that it {h.avoided}."
             for h in hazards]
    return "verdict: revise\n" + "\n".join(lines)


class RunReplayOptions(ProviderOptions):
    """None of its own: the recorded run's provider options (a timeout, a temperature) are
    accepted and ignored, so its campaign file replays as it is."""

    model_config = ConfigDict(extra="ignore")


class Divergence(NamedTuple):
    """Where a replayed loop first left the record: a request that states other verdicts on
    earlier candidates than the recorded request of its turn did."""

    turn: int
    """The role's request number in the loop (1 = its first request)."""
    role: str
    recorded: str
    """The verdicts the recorded request stated (`verdicts_line`)."""
    asked: str
    """The verdicts the request of this run states."""


class RunReplayProvider(Provider):
    """`replay:RUN_DIR`: the answers recorded in RUN_DIR/exchanges.jsonl, turn by turn.

    Within a campaign (the loop says who asks: cell, task, role and turn), a request gets the
    answer recorded for the same turn of the same loop: same style, mode and task (the cell's
    provider is not compared: the recorded run used another one), same role, among the role's
    recorded answers from its turn on (the loop's `turn`: the role's answers before the request's
    round, across resumed runs too, `AgentLLM.turn`) not given yet: the one recorded with the same
    seed first (a round's requests are asked in parallel), then one whose request stated the same
    verdicts on earlier candidates (`stated_verdicts`), then the earliest. The request's text is
    not compared: prompts carry measured speedups and times, so a replay, on this machine or
    another, asks other words and still gets the recorded answers, its candidates in order. Where
    a request states other verdicts than the recorded one (a candidate accepted there is rejected
    here), the loop has left the record: its first divergence is kept (`divergences`,
    `divergence_lines`) and the recorded answers are given from there on. Outside a campaign (no
    loop meta) a request is matched by its hash, identical requests in record order. A turn that
    the record does not hold is an error.
    """

    name = "replay"
    Options = RunReplayOptions

    def __init__(self, model: str = "", **options: Any):
        super().__init__(model, **options)
        self._answers: dict[str, deque[str]] = defaultdict(deque)
        self._turns: dict[tuple[str, str, str, str], list[ExchangeRecord]] = defaultdict(list)
        self._verdicts: dict[int, Verdicts] = {}
        for rec in read_exchanges(model):
            if rec.text is None:
                continue
            self._answers[rec.request_hash].append(rec.text)
            key = self._turn_key(rec.meta)
            if key is not None:
                self._turns[key].append(rec)
                self._verdicts[rec.n] = stated_verdicts(rec.messages)
        self._taken: set[int] = set()
        self.divergences: dict[str, Divergence] = {}
        """First divergence per loop ("style/mode|task")."""
        self.matched = 0
        """Requests whose hash equals the recorded one (the same words, numbers included)."""
        self.agreed = 0
        """Requests that state the same verdicts as the recorded one."""
        self._lock = threading.Lock()

    @staticmethod
    def _turn_key(meta: dict[str, Any] | None) -> tuple[str, str, str, str] | None:
        cell, task, role = (meta or {}).get("cell"), (meta or {}).get("task"), (meta or {}).get("role")
        if not (isinstance(cell, str) and cell.count("/") >= 2 and task and role):
            return None
        style, mode, _ = cell.split("/", 2)
        return style, mode, str(task), str(role)

    def complete(self, messages: list[Message], *, seed: int | None = None) -> Completion:
        start = time.perf_counter()
        digest = request_hash(messages)
        meta = request_meta.get() or {}
        key = self._turn_key(meta)
        turn = meta.get("turn") if isinstance(meta.get("turn"), int) else None
        with self._lock:
            if key is None:
                text = self._by_hash(digest)
            else:
                text = self._by_turn(key, messages, digest, seed, turn)
        return Completion(text=text, latency_s=time.perf_counter() - start, model=self.model,
                          provider=self.name, cost_usd=0.0)

    def _by_hash(self, digest: str) -> str:
        queue = self._answers.get(digest)
        if not queue:
            used = "all its recorded answers were used" if queue is not None else "never recorded"
            raise ProviderError(f"{self.spec}: request {digest[:12]} is not in the record ({used}); "
                                "this run asked what the recorded run did not")
        return queue.popleft()

    def _by_turn(self, key: tuple[str, str, str, str], messages: list[Message], digest: str,
                 seed: int | None, turn: int | None) -> str:
        style, mode, task, role = key
        loop = f"{style}/{mode}|{task}"
        records = self._turns.get(key, [])
        untaken = [(i, r) for i, r in enumerate(records) if r.n not in self._taken]
        left = [(i, r) for i, r in untaken if turn is None or i >= turn] or untaken
        if not left:
            raise ProviderError(f"{self.spec}: loop {loop} asks its {role} for answer {len(records) + 1}, "
                                f"but the record holds {len(records)}; replay the campaign as it was "
                                "recorded (its budget, styles and modes)")
        verdicts = stated_verdicts(messages)
        i, rec = min(left, key=lambda ir: (ir[1].seed != seed, self._verdicts[ir[1].n] != verdicts, ir[0]))
        self._taken.add(rec.n)
        self.matched += rec.request_hash == digest
        if self._verdicts[rec.n] == verdicts:
            self.agreed += 1
        elif loop not in self.divergences:
            self.divergences[loop] = Divergence(i + 1, role, verdicts_line(self._verdicts[rec.n]),
                                                verdicts_line(verdicts))
        return rec.text or ""

    def divergence_lines(self) -> list[str]:
        """One line per loop that left the record (its verdicts differ), and where."""
        return [f"replay: {loop} diverged from the record at its {d.role} request {d.turn}: it states "
                f"{d.asked}, the record {d.recorded}; the recorded answers were given from there on"
                for loop, d in sorted(self.divergences.items())]


def replay_provider(model: str = "", **options: Any) -> Provider:
    """`replay` (or `replay:corpus`) answers from the corpus; `replay:RUN_DIR` replays a run."""
    if model in ("", "corpus"):
        return ReplayProvider("", **options)
    return RunReplayProvider(model, **options)
