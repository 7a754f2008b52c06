"""Serving N requests two ways with the same decoder step: each request alone, and under
continuous batching.

A request's steps are its positions: prompt tokens first (one per step, see decoder.py), then
its generated tokens; the step at the last prompt token emits the first of `new_tokens` greedy
tokens. Every request runs to exactly `new_tokens` (no stop token), so which request is at which
position in which batch — the plan — is fixed before any kernel runs and does not depend on the
values the kernels compute; the test and the divergence report can reason about it.

Continuous batching: the reported requests arrive one step apart, filler requests (short, never
reported) arrive at seeded random steps, finished requests leave, so the batch size and its
padded KV length change from step to step; each step's rows are in a seeded random order.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from agentloop.model.config import ModelConfig, ModelInputError
from agentloop.model.decoder import Calls, Decoder, OpCall, RequestCache, Row, drive
from agentloop.model.kernel_sets import channel, start_lanes


class Request(BaseModel):
    model_config = ConfigDict(frozen=True)
    id: int
    prompt: list[int]
    new_tokens: int
    arrival: int
    """The continuous-batching step at which it joins."""
    reported: bool = True
    """False for filler requests, which only shape the batches."""

    @property
    def steps(self) -> int:
        return len(self.prompt) - 1 + self.new_tokens


class PlannedRow(BaseModel):
    model_config = ConfigDict(frozen=True)
    request: int
    position: int


class PlannedStep(BaseModel):
    model_config = ConfigDict(frozen=True)
    step: int
    rows: list[PlannedRow]

    @property
    def kv_len(self) -> int:
        return max(r.position for r in self.rows) + 1


class RequestResult(BaseModel):
    """What a schedule produced for one request."""

    tokens: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    """float32 values (exact as Python floats)."""

    def bits(self) -> list[int]:
        return torch.tensor(self.logprobs, dtype=torch.float32).view(torch.int32).tolist()

    def same_tokens(self, other: RequestResult) -> bool:
        return self.tokens == other.tokens

    def same_logprobs(self, other: RequestResult) -> bool:
        return self.bits() == other.bits()


def make_requests(config: ModelConfig, requests: int, new_tokens: int, seed: int,
                  fillers: int | None = None, prompt_lens: tuple[int, int] = (2, 12)) -> list[Request]:
    """`requests` reported requests with seeded prompts of lengths in `prompt_lens`, arriving a
    step apart, and `fillers` (default: as many) filler requests with prompts of 1 to the longest
    length and 1 to `new_tokens` tokens, arriving at random steps over the same span."""
    if requests < 1 or new_tokens < 1:
        raise ModelInputError(f"requests ({requests}) and new_tokens ({new_tokens}) must be at least 1")
    lo, hi = prompt_lens
    if not 1 <= lo <= hi:
        raise ModelInputError(f"prompt lengths {lo}..{hi}: give 1 <= shortest <= longest")
    rng = random.Random(seed)
    vocab = config.vocab_size

    def prompt(n: int) -> list[int]:
        return [rng.randrange(vocab) for _ in range(n)]

    out = [Request(id=i, prompt=prompt(rng.randint(lo, hi)), new_tokens=new_tokens, arrival=i)
           for i in range(requests)]
    span = requests + new_tokens
    for j in range(requests if fillers is None else fillers):
        out.append(Request(id=requests + j, prompt=prompt(rng.randint(1, hi)),
                           new_tokens=rng.randint(1, new_tokens), arrival=rng.randrange(span),
                           reported=False))
    return check_requests(config, out)


def check_requests(config: ModelConfig, requests: list[Request]) -> list[Request]:
    """The requests, if the model can serve them (ModelInputError, one line, if not)."""
    ids = [r.id for r in requests]
    if len(set(ids)) != len(ids):
        raise ModelInputError("two requests share an id; give each request its own id")
    if not any(r.reported for r in requests):
        raise ModelInputError("no reported request: mark at least one request reported")
    for r in requests:
        if not r.prompt or r.new_tokens < 1:
            raise ModelInputError(f"request {r.id}: needs a prompt and at least one new token")
        if any(not 0 <= t < config.vocab_size for t in r.prompt):
            raise ModelInputError(f"request {r.id}: prompt token outside the vocabulary "
                                  f"(0..{config.vocab_size - 1})")
        if len(r.prompt) + r.new_tokens > config.max_position_embeddings:
            raise ModelInputError(f"request {r.id}: {len(r.prompt)} prompt + {r.new_tokens} new tokens "
                                  f"exceed max_position_embeddings {config.max_position_embeddings}; "
                                  f"ask for fewer")
    return requests


def batched_plan(requests: list[Request], seed: int) -> list[PlannedStep]:
    """The continuous-batching schedule: per step, the (request, position) rows in batch order."""
    rng = random.Random(seed + 1)
    progress = {r.id: 0 for r in requests}
    plan: list[PlannedStep] = []
    step = 0
    while any(progress[r.id] < r.steps for r in requests):
        active = [r for r in requests if r.arrival <= step and progress[r.id] < r.steps]
        if active:
            rows = [PlannedRow(request=r.id, position=progress[r.id]) for r in active]
            rng.shuffle(rows)
            plan.append(PlannedStep(step=step, rows=rows))
            for r in active:
                progress[r.id] += 1
        step += 1
    return plan


def alone_plan(requests: list[Request]) -> list[PlannedStep]:
    """Each reported request alone, one after another: batches of one row."""
    plan, step = [], 0
    for r in requests:
        if r.reported:
            for p in range(r.steps):
                plan.append(PlannedStep(step=step, rows=[PlannedRow(request=r.id, position=p)]))
                step += 1
    return plan


def serve_plan(decoder: Decoder, requests: list[Request], plan: list[PlannedStep],
               device: str) -> Calls:
    """A plan's steps as op calls (`decoder.drive` or `run_lanes` makes them); its value is each
    request's tokens and logprobs."""
    by_id = {r.id: r for r in requests}
    results = {r.id: RequestResult() for r in requests}
    caches: dict[int, RequestCache] = {}
    cfg = decoder.config
    for planned in plan:
        rows = []
        for pr in planned.rows:
            req = by_id[pr.request]
            if pr.request not in caches:
                caches[pr.request] = RequestCache.empty(cfg, len(req.prompt) + req.new_tokens, device)
            p = pr.position
            token = req.prompt[p] if p < len(req.prompt) else results[req.id].tokens[p - len(req.prompt)]
            rows.append(Row(request=req.id, position=p, token=token, cache=caches[req.id],
                            emits=p >= len(req.prompt) - 1))
        out = yield from decoder.step(rows, planned.step)
        emitting = [r for r in rows if r.emits]
        for row, token, logprob in zip(emitting, out.tokens, out.logprobs.tolist(), strict=True):
            results[row.request].tokens.append(token)
            results[row.request].logprobs.append(logprob)
        for row in rows:  # a finished request leaves: its cache is freed
            if row.position == by_id[row.request].steps - 1:
                caches.pop(row.request)
    return results


def run_plan(decoder: Decoder, requests: list[Request], plan: list[PlannedStep],
             device: str) -> tuple[dict[int, RequestResult], float]:
    """Run a plan; per request its tokens and logprobs, and the wall time in seconds."""
    start = time.perf_counter()
    results = drive(serve_plan(decoder, requests, plan, device), decoder.ops)
    return results, time.perf_counter() - start


def run_alone(decoders: list[Decoder], requests: list[Request],
              device: str) -> tuple[list[dict[int, RequestResult]], float]:
    """The alone plan once per decoder (the runs of one schedule, each on its own decoder and
    kernels): each reported request in batches of one row as `alone_plan` has them, but every
    request of every run served in step (`run_lanes`). Each op call is still one request's alone;
    the calls the requests make at the same point go to an op together (one round trip to a
    caged runner instead of one each), and to the ops of different runs at once. Per run, each
    request's tokens and logprobs; the wall time."""
    start = time.perf_counter()
    steps: dict[int, list[PlannedStep]] = {}
    for planned in alone_plan(requests):
        steps.setdefault(planned.rows[0].request, []).append(planned)
    lanes = [(serve_plan(decoder.lane(), [r], steps[r.id], device), decoder.ops)
             for decoder in decoders for r in requests if r.reported]
    values = iter(run_lanes(lanes))
    runs = []
    for _ in decoders:
        results = {r.id: RequestResult() for r in requests}
        for r in requests:
            if r.reported:
                results.update(next(values))
        runs.append(results)
    return runs, time.perf_counter() - start


def run_lanes(lanes: list[tuple[Calls, Mapping[str, Callable]]]) -> list[Any]:
    """Run independent op-call sequences in step, each on its ops: each round, every unfinished
    lane's next call, grouped by the op it calls (in the order of the lanes) and made through
    `kernel_sets.start_lanes` (a lane's fan, its calls all in the round); each lane's value, in
    order. The calls a lane makes, and their order within it, are those of running it alone.

    Lanes whose ops share no channel (`kernel_sets.channel`: the alone schedule's two runs on
    their own copies of a set's caged kernels) form cohorts that go out of phase: a cohort's
    next round is sent as soon as its last one's replies are in and its lanes advanced, so while
    one cohort's runners make its calls this thread advances another's lanes (the decoder's glue,
    reading outputs, writing the next inputs: about as long as the runner's side of a call).
    Lanes that share a channel are one cohort, with one round out at a time."""
    pending: dict[int, list[OpCall]] = {}
    fans: set[int] = set()  # the lanes whose pending calls are a fan (sent back a list)
    values: list[Any] = [None] * len(lanes)

    def advance(i: int, result: Any) -> None:
        try:
            call = lanes[i][0].send(result)
        except StopIteration as stop:
            pending.pop(i, None)
            values[i] = stop.value
            return
        if isinstance(call, OpCall):
            pending[i] = [call]
            fans.discard(i)
        elif call:
            pending[i] = list(call)
            fans.add(i)
        else:  # an empty fan: nothing to call
            advance(i, [])

    def send(cohort: list[int]) -> list[tuple[list[tuple[int, int]], Callable[[], list]]]:
        groups: dict[int, tuple[Callable, list[tuple[int, int]]]] = {}
        taken: dict[int, int] = {}
        for i in cohort:
            if i not in pending:
                continue
            ops = [lanes[i][1][call.task] for call in pending[i]]
            vias = [(id(via), id(op)) for op in ops if (via := channel(op)) is not None]
            if any(taken.get(v, o) != o for v, o in vias):
                continue  # a channel it needs is out with another op's calls this round: the next one
            taken.update(vias)
            for k, op in enumerate(ops):
                groups.setdefault(id(op), (op, []))[1].append((i, k))
        return [(members, start_lanes(op, [pending[i][k].args for i, k in members]))
                for op, members in groups.values()]

    for i in range(len(lanes)):
        advance(i, None)
    rounds = deque((cohort, send(cohort)) for cohort in _cohorts(lanes))
    while rounds:
        cohort, started = rounds.popleft()
        got: dict[int, list[Any]] = {}
        for members, finish in started:
            for (i, k), out in zip(members, finish(), strict=True):
                got.setdefault(i, [None] * len(pending[i]))[k] = out
        for i, results in got.items():
            advance(i, results if i in fans else results[0])
        if any(i in pending for i in cohort):
            rounds.append((cohort, send(cohort)))
    return values


def _cohorts(lanes: list[tuple[Calls, Mapping[str, Callable]]]) -> list[list[int]]:
    """The lanes in groups no two of which reach a common channel (lanes on the same ops are
    one group), each in order, ordered by their first lanes."""
    by_ops: dict[int, tuple[set[int], list[int]]] = {}
    for i, (_, ops) in enumerate(lanes):
        if id(ops) not in by_ops:
            by_ops[id(ops)] = ({id(c) for c in map(channel, ops.values()) if c is not None}, [])
        by_ops[id(ops)][1].append(i)
    cohorts: list[tuple[set[int], list[int]]] = []
    for reached, members in by_ops.values():
        apart = []
        for other in cohorts:
            if other[0] & reached:
                reached, members = reached | other[0], other[1] + members
            else:
                apart.append(other)
        cohorts = [*apart, (reached, members)]
    return sorted((sorted(members) for _, members in cohorts), key=lambda m: m[0])
