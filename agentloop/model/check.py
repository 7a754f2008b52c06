"""The model check: per kernel set, does a request's output depend on its batch neighbours?

For each kernel set the same requests are served alone and under continuous batching, each
schedule twice; per request the tokens and float32 logprobs are compared bit for bit between the
schedules and between the two runs of each. For the requests that differ, the finder names the
first op whose output differed (recorder.py), from recordings of the first runs when they are
small (RECORD_ALWAYS_BYTES), else from one more run of each schedule that records only them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import torch
from pydantic import BaseModel, Field, computed_field
from rich.table import Table

from agentloop.model.config import ModelConfig, ModelInputError
from agentloop.model.decoder import Decoder
from agentloop.model.recorder import Divergence, Recorder, first_divergence
from agentloop.model.schedule import (
    PlannedStep,
    Request,
    RequestResult,
    batched_plan,
    check_requests,
    make_requests,
    run_alone,
    run_plan,
)
from agentloop.model.serving import ServingSpeed
from agentloop.model.shapes import OpGate, OpShapes
from agentloop.model.weights import ModelWeights


class RequestCheck(BaseModel):
    request: int
    prompt_len: int
    tokens_equal: bool
    """Alone and batched gave the same tokens."""
    logprobs_equal: bool
    """... and the same logprobs, bit for bit."""
    deterministic: bool
    """Each schedule gave the same tokens and logprobs in both of its runs."""
    first_token_diff: int | None = None
    """The first generated token that differs between the schedules."""
    max_logprob_diff: float = 0.0
    divergence: Divergence | None = None

    @computed_field
    @property
    def reproducible(self) -> bool:
        return self.tokens_equal and self.logprobs_equal and self.deterministic


class SetReport(BaseModel):
    name: str
    sources: dict[str, str] = {}
    """Where each op came from."""
    requests: list[RequestCheck] = []
    differing: int = 0
    """Requests whose tokens or logprobs differ between the schedules."""
    tokens_differing: int = 0
    nondeterministic: int = 0
    batched_steps: int = 0
    max_batch: int = 0
    batched_tokens_per_s: float = 0.0
    """Tokens of every request (fillers too) over the second batched run's wall time."""
    error: str = ""
    """Why the set could not be checked (a kernel raised, an op broke its contract)."""
    sandbox_findings: list[str] = []
    """What the caged runners of its kernels reported (any one is a finding against the kernel)."""
    shapes: list[OpShapes] = []
    """The shapes the model called each op at (batch sizes per distinct non-batch dims)."""
    op_gates: list[OpGate] = []
    """The dynamic gate on each kernel at those shapes (`--gate-shapes`)."""
    serving: ServingSpeed | None = None
    """Tokens/s with the kernels in a serving process of their own (`--serving`), the
    end-to-end batch-invariance tax beside the torch sets."""
    phases: dict[str, float] = {}
    """Wall seconds of the set's check by phase: `runners` (its caged runners booted and loaded),
    `alone` (the alone schedule's two runs, and the first batched run where it goes beside them
    on a copy of the kernels), within it `alone runs` (the two, in step) and `first batched
    run` (where it goes beside them), `batched` (the batched runs after that), `finder` (its
    extra runs, if any), `stop` (its runners stopped): where the 60 s of a set go."""
    batched_tokens: dict[int, list[int]] = Field(default_factory=dict, exclude=True)
    """Each reported request's tokens in the timed batched run (what `serving` is checked against)."""

    @computed_field
    @property
    def reproducible(self) -> bool:
        return not self.error and not self.sandbox_findings and all(r.reproducible for r in self.requests)


class ModelCheckReport(BaseModel):
    model: str
    requests: int
    new_tokens: int
    seed: int
    device: str
    sets: list[SetReport]

    @computed_field
    @property
    def reproducible(self) -> bool:
        return all(s.reproducible for s in self.sets)


def _compare(req: Request, alone: list[dict[int, RequestResult]], batched: list[dict[int, RequestResult]]
             ) -> RequestCheck:
    a, b = alone[0][req.id], batched[0][req.id]
    first = next((i for i, (x, y) in enumerate(zip(a.tokens, b.tokens, strict=True)) if x != y), None)
    same_runs = all(r0[req.id].same_tokens(r1[req.id]) and r0[req.id].same_logprobs(r1[req.id])
                    for r0, r1 in (alone, batched))
    gap = max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)), default=0.0)
    return RequestCheck(request=req.id, prompt_len=len(req.prompt), tokens_equal=a.same_tokens(b),
                        logprobs_equal=a.same_logprobs(b), deterministic=same_runs, first_token_diff=first,
                        max_logprob_diff=gap)


RECORD_ALWAYS_BYTES = {"cpu": 64 << 20, "cuda": 4 << 30}
"""Up to this estimated size of the recordings (by device: the rows stay where they were
computed), the first run of each schedule records every reported request, so finding a
divergence costs no extra run (the small CPU models; on a GPU, the 4096-wide decoders, whose
recordings are estimated at 0.48 and 0.71 GiB there); above it, only the requests that differed
are recorded, on one more run of each schedule."""


def _record_bytes(config: ModelConfig, reqs: list[Request]) -> int:
    """An estimate of the recordings of every reported request in both schedules."""
    H, I, D = config.hidden_size, config.intermediate_size, config.head_size
    Hq, Hk = config.num_attention_heads, config.kv_heads
    mlp = 3 * I + H
    if config.is_moe:
        k = config.num_experts_per_tok
        mlp = config.num_local_experts + 2 * k + k * mlp
    layer = 6 * H + (2 * Hq + 3 * Hk) * D + mlp
    if config.agentloop_int8_activations:
        layer += 2 * (H + Hq * D + I)
    per_step = config.num_hidden_layers * layer + 2 * H + config.vocab_size
    steps = sum(r.steps for r in reqs if r.reported)
    return 2 * steps * per_step * torch.empty((), dtype=config.dtype).element_size()


def _find(config: ModelConfig, weights: ModelWeights, ops: Mapping[str, Callable], reqs: list[Request],
          plan: list[PlannedStep], differing: list[int], device: str) -> dict[int, Divergence | None]:
    """Re-run both schedules recording the differing requests only, and compare."""
    wanted = set(differing)
    alone_rec, batched_rec = Recorder(wanted), Recorder(wanted)
    subset = [r for r in reqs if r.id in wanted]
    run_alone([Decoder(config, weights, ops, alone_rec)], subset, device)
    run_plan(Decoder(config, weights, ops, batched_rec), reqs, plan, device)
    return {i: first_divergence(alone_rec, batched_rec, i) for i in differing}


def _first_runs(config: ModelConfig, weights: ModelWeights, ops: Mapping[str, Callable],
                copies: Sequence[Mapping[str, Callable]], reqs: list[Request], plan: list[PlannedStep],
                device: str, recorders: dict[str, Recorder] | None,
                took: dict[str, float]) -> dict[str, list[dict[int, RequestResult]]]:
    """The runs before the timed one: the alone schedule's two and, with a second copy of the
    kernels, the batched schedule's first. The first of each schedule records (with `recorders`).
    The alone runs go in step (`run_alone`), the second on the first copy where there is one
    (the same kernels in runners of their own, whose requests go out beside the first run's),
    else on the same kernels. With a second copy the first batched run goes on it at the same
    time, in a thread of its own: it is where the kernels first see batches, and compile for
    them. `took` gets each kind of run's wall seconds."""
    rec = recorders or {}

    def alone() -> list[dict[int, RequestResult]]:
        decoders = [Decoder(config, weights, ops, rec.get("alone")),
                    Decoder(config, weights, copies[0] if copies else ops, None)]
        results, took["alone runs"] = run_alone(decoders, reqs, device)
        return results

    def batched(o: Mapping[str, Callable]) -> list[dict[int, RequestResult]]:
        results, took["first batched run"] = run_plan(Decoder(config, weights, o, rec.get("batched")), reqs,
                                                      plan, device)
        return [results]

    if len(copies) < 2:
        return {"alone": alone(), "batched": []}
    with ThreadPoolExecutor(1, thread_name_prefix="first-batched-run") as pool:
        first_batched = pool.submit(batched, copies[1])
        runs = alone()
        return {"alone": runs, "batched": first_batched.result()}


def _check_set(name: str, ops: Mapping[str, Callable], config: ModelConfig, weights: ModelWeights,
               reqs: list[Request], device: str, seed: int,
               copies: Sequence[Mapping[str, Callable]] = ()) -> SetReport:
    report = SetReport(name=name, sources=dict(getattr(ops, "sources", {})))
    plan = batched_plan(reqs, seed)
    report.batched_steps, report.max_batch = len(plan), max(len(s.rows) for s in plan)
    reported = [r for r in reqs if r.reported]
    record_now = _record_bytes(config, reqs) <= RECORD_ALWAYS_BYTES["cpu" if device == "cpu" else "cuda"]
    recorders = {"alone": Recorder({r.id for r in reported}), "batched": Recorder({r.id for r in reported})}
    began = time.perf_counter()
    try:
        took: dict[str, float] = {}
        runs = _first_runs(config, weights, ops, copies, reqs, plan, device,
                           recorders if record_now else None, took)
        report.phases["alone"], began = time.perf_counter() - began, time.perf_counter()
        report.phases.update({k: took[k] for k in ("alone runs", "first batched run") if k in took})
        batched_ops = copies[1] if len(copies) > 1 else ops
        for run in range(len(runs["batched"]), 2):
            # The first run records (if it does); the second, warm (kernels compiled, the vendor
            # libraries' per-shape choices made, on the runners of the first) and alone on the
            # machine, is the one timed.
            recorder = recorders["batched"] if record_now and run == 0 else None
            results, seconds = run_plan(Decoder(config, weights, batched_ops, recorder), reqs, plan, device)
            runs["batched"].append(results)
        report.phases["batched"], began = time.perf_counter() - began, time.perf_counter()
        report.batched_tokens = {r.id: list(results[r.id].tokens) for r in reported}
        report.requests = [_compare(r, runs["alone"], runs["batched"]) for r in reported]
        differing = [c.request for c in report.requests if not (c.tokens_equal and c.logprobs_equal)]
        if differing:
            found = ({i: first_divergence(recorders["alone"], recorders["batched"], i) for i in differing}
                     if record_now else _find(config, weights, ops, reqs, plan, differing, device))
            for c in report.requests:
                c.divergence = found.get(c.request)
            if not record_now:
                report.phases["finder"] = time.perf_counter() - began
    except Exception as exc:  # noqa: BLE001 - a kernel's failure is this set's result, not the check's
        from gates.runner.loader import describe_exception

        report.error = describe_exception(exc)
        return report
    report.differing = len(differing)
    report.tokens_differing = sum(not c.tokens_equal for c in report.requests)
    report.nondeterministic = sum(not c.deterministic for c in report.requests)
    tokens = sum(r.new_tokens for r in reqs)
    report.batched_tokens_per_s = tokens / seconds if seconds > 0 else 0.0
    return report


def check_model(config: ModelConfig, weights: ModelWeights, ops_by_set: dict[str, Mapping[str, Callable]],
                requests: int | list[Request] = 16, new_tokens: int = 32, seed: int = 0,
                device: str | None = None, fillers: int | None = None,
                prompt_lens: tuple[int, int] = (2, 12),
                twins: Mapping[str, Sequence[Mapping[str, Callable]]] | None = None) -> ModelCheckReport:
    """Serve `requests` seeded requests (plus `fillers`, default as many; see make_requests) alone
    and batched on each kernel set, or the given list of requests (then `new_tokens`, `fillers`
    and `prompt_lens` are unused). The weights must be on `device` (default: where they are).
    `twins`: for a set, copies of the same kernels (runners of their own): the alone schedule's
    second run goes on the first at the same time as its first run, and with a second copy the
    batched schedule's runs go on it, the first beside the alone runs (`_first_runs`)."""
    where = str(weights.embed.device)
    device = device or where
    if device != where and not where.startswith(f"{device}:"):
        raise ModelInputError(f"the weights are on {where}, not {device}; load them on {device}")
    if isinstance(requests, int):
        reqs = make_requests(config, requests, new_tokens, seed, fillers, prompt_lens)
    else:
        reqs = check_requests(config, requests)
    sets = [_check_set(name, ops, config, weights, reqs, device, seed, (twins or {}).get(name, ()))
            for name, ops in ops_by_set.items()]
    reported = [r for r in reqs if r.reported]
    return ModelCheckReport(model=config.summary(), requests=len(reported),
                            new_tokens=max(r.new_tokens for r in reported), seed=seed, device=device,
                            sets=sets)


def exit_status(report: ModelCheckReport) -> int:
    """0 when every request of every set is reproducible; 1 when some request differs, is not
    deterministic, or a set could not run."""
    return 0 if report.reproducible else 1


def _served(s: SetReport) -> str:
    if s.serving is None:
        return "-"
    if s.serving.error:
        return "[red]failed[/red]"
    mark = "" if s.serving.tokens_match is not False else " [red](tokens differ)[/red]"
    return f"{s.serving.tokens_per_s:.1f}{mark}"


def render_table(report: ModelCheckReport) -> Table:
    """One row per kernel set: how many requests differ, and where the first one diverged."""
    table = Table(title=f"model check: {report.model}; {report.requests} requests x "
                        f"{report.new_tokens} tokens on {report.device}")
    served = any(s.serving is not None for s in report.sets)
    columns = ["kernel set", "differ (in tokens)", "nondeterministic", "batches", "tokens/s"] + \
        (["served tokens/s"] if served else []) + ["first divergence"]
    for column in columns:
        table.add_column(column, justify="right" if "tokens/s" in column or column == "batches" else "left")
    for s in report.sets:
        if s.error:
            table.add_row(s.name, "-", "-", "-", "-", *(["-"] if served else []),
                          f"[red]failed: {s.error}[/red]")
            continue
        first = next((c for c in s.requests if c.divergence is not None), None)
        where = f"request {first.request}: {first.divergence.describe()}" if first else (
            "no op differed (check the glue)" if s.differing else "")
        style = "green" if s.reproducible else "red"
        table.add_row(s.name, f"[{style}]{s.differing}/{len(s.requests)} ({s.tokens_differing})[/{style}]",
                      str(s.nondeterministic), f"{s.batched_steps} (max {s.max_batch})",
                      f"{s.batched_tokens_per_s:.1f}", *([_served(s)] if served else []), where)
    return table
