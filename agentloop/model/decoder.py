"""A Llama-style decoder (and its Mixtral-style MoE variant) composed only from task entry points.

The decoder gets an `ops` mapping of task name -> callable with the task's entry signature
(positional arguments in the task file's `args` order, scalars included; one tensor or a tuple as
the task's `outputs`) and calls nothing else for the compute the tasks cover. Plain torch does
only the glue: the embedding lookup, splitting qkv, writing the per-request KV cache and padding
it into the batch's cache, gathering the rows routed to an expert and summing the weighted expert
outputs, and picking the rows that are sampled. The callables may be proxies to another process:
every tensor passed is contiguous, nothing relies on an op changing its inputs in place, and
every return value is taken as a new tensor.

One step runs a batch of rows, each (request, position, input token); per layer, as serving
engines run it: input norm (rms_norm on layer 0, fused_add_rms_norm after, carrying the residual
stream), one fused qkv linear, rotary_embedding, the KV-cache append, decode_attention over the
batch's padded cache with seq_lens, the o_proj linear, fused_add_rms_norm, then the MLP — a fused
gate_up linear, silu_and_mul and the down linear, or for MoE the router linear, moe_topk_softmax
and each expert's MLP on the rows routed to it (that gathered set is the expert's batch, as in a
real MoE layer). The final norm is fused_add_rms_norm too (it absorbs the last residual add, as
vLLM's does), then lm_head, greedy_sample and token_logprobs on the rows that emit a token.

Prefill runs as decode: each prompt token is one step through decode_attention. Every op used then
has a task and a contract; a chunked-prefill attention task would be a later addition.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from agentloop.model.config import ModelConfig
from agentloop.model.kernel_sets import start_lanes
from agentloop.model.recorder import Recorder
from agentloop.model.weights import Expert, ModelWeights

DENSE_OPS = ("rms_norm", "fused_add_rms_norm", "linear", "rotary_embedding", "decode_attention",
             "silu_and_mul", "greedy_sample", "token_logprobs")


def required_ops(config: ModelConfig) -> list[str]:
    """The tasks a decoder of this config calls."""
    extra = ["moe_topk_softmax"] if config.is_moe else []
    return [*DENSE_OPS, *extra, *(["per_token_quant_int8"] if config.agentloop_int8_activations else [])]


class OpCall(NamedTuple):
    """What a decoder step asks for: one call of a task's op; the step is sent back its result."""

    task: str
    args: tuple


Calls = Generator["OpCall | list[OpCall]", Any, Any]
"""A decoder step (or a schedule of them): it yields the op calls it needs, in order, is sent
each one's result, and returns what it computed (`drive` runs one, `schedule.run_lanes` several
in step). A list of calls is a fan: calls independent of each other (a MoE layer's experts,
`together`), sent back the list of their results; they may be made together."""


def drive(steps: Calls, ops: Mapping[str, Callable]) -> Any:
    """Run `steps` to its end, each op call made on `ops` as it comes, a fan's calls to one op
    together (`kernel_sets.start_lanes`: a caged kernel's in one request); its return value."""
    try:
        call = next(steps)
        while True:
            call = steps.send(ops[call.task](*call.args) if isinstance(call, OpCall) else fan_out(call, ops))
    except StopIteration as stop:
        return stop.value


def fan_out(calls: list[OpCall], ops: Mapping[str, Callable]) -> list:
    """The results of a fan's calls, in order: the calls to each op made together, every op's
    request sent before any is read."""
    groups: dict[int, tuple[Callable, list[int]]] = {}
    for k, call in enumerate(calls):
        op = ops[call.task]
        groups.setdefault(id(op), (op, []))[1].append(k)
    started = [(members, start_lanes(op, [calls[k].args for k in members]))
               for op, members in groups.values()]
    results: list[Any] = [None] * len(calls)
    for members, finish in started:
        for k, out in zip(members, finish(), strict=True):
            results[k] = out
    return results


def together(steps: list[Calls]) -> Calls:
    """Independent call sequences as one: each round yields the next call of every unfinished one
    as a fan (a list, in the order of `steps`) and is sent their results; its value is each
    one's value. The sequences yield single calls, not fans."""
    values: list[Any] = [None] * len(steps)
    pending: dict[int, OpCall] = {}

    def advance(i: int, result: Any) -> None:
        try:
            pending[i] = steps[i].send(result)
        except StopIteration as stop:
            pending.pop(i, None)
            values[i] = stop.value

    for i in range(len(steps)):
        advance(i, None)
    while pending:
        order = list(pending)
        results = yield [pending[i] for i in order]
        for i, result in zip(order, results, strict=True):
            advance(i, result)
    return values


class OpContractError(RuntimeError):
    """An op returned something other than its task's outputs; the message is one line."""


@dataclass
class RequestCache:
    """One request's KV cache: per layer, [max_len, kv_heads, head_dim] for keys and values."""

    k: list[torch.Tensor]
    v: list[torch.Tensor]

    @classmethod
    def empty(cls, config: ModelConfig, max_len: int, device: str) -> RequestCache:
        shape = (max_len, config.kv_heads, config.head_size)
        n = config.num_hidden_layers
        return cls(k=[torch.zeros(shape, dtype=config.dtype, device=device) for _ in range(n)],
                   v=[torch.zeros(shape, dtype=config.dtype, device=device) for _ in range(n)])


@dataclass
class Row:
    """One row of a step's batch."""

    request: int
    position: int
    """The token's position in its request, which is also the request's step."""
    token: int
    cache: RequestCache
    emits: bool
    """Whether this step's logits are sampled (the last prompt token and every generated one)."""


@dataclass
class StepOutput:
    tokens: list[int]
    """The sampled token of each emitting row, in row order."""
    logprobs: torch.Tensor
    """Their log-probabilities, float32, on the CPU."""


class Decoder:
    """The model over a kernel set; `recorder`, when set, gets every op call's outputs."""

    def __init__(self, config: ModelConfig, weights: ModelWeights, ops: Mapping[str, Callable],
                 recorder: Recorder | None = None) -> None:
        missing = [t for t in required_ops(config) if t not in ops]
        if missing:
            raise ValueError(f"the kernel set has no op for task {missing[0]!r}; "
                             f"a {config.model_type} model needs {', '.join(required_ops(config))}")
        self.config, self.weights, self.ops, self.recorder = config, weights, ops, recorder
        self._owners: list[tuple[int, int]] = []
        self._kv_len, self._global_step = 0, 0

    def lane(self) -> Decoder:
        """A decoder over the same model, ops and recorder with a step state of its own (a request
        served alone beside others in step: `schedule.run_lanes`)."""
        return Decoder(self.config, self.weights, self.ops, self.recorder)

    # One op call: the only place a kernel runs --------------------------------------------
    def _call(self, site: str, task: str, layer: int | None, args: tuple, n_outputs: int,
              owners: list[tuple[int, int]] | None = None) -> Calls:
        owners = self._owners if owners is None else owners
        args = tuple(a.contiguous() if isinstance(a, torch.Tensor) else a for a in args)
        result = yield OpCall(task, args)
        outs = tuple(result) if isinstance(result, (tuple, list)) else (result,)
        if len(outs) != n_outputs or not all(isinstance(o, torch.Tensor) for o in outs):
            raise OpContractError(f"{site}: {task} returned {len(outs)} value(s) "
                                  f"({', '.join(type(o).__name__ for o in outs)}), expected "
                                  f"{n_outputs} tensor(s)")
        bad = [o for o in outs if o.dim() == 0 or o.shape[0] != len(owners)]
        if bad:
            raise OpContractError(f"{site}: {task} returned shape {list(bad[0].shape)} for a batch of "
                                  f"{len(owners)} rows")
        if self.recorder is not None:
            self.recorder.record(site, task, layer, outs, owners, self._kv_len, self._global_step)
        return outs

    def _project(self, site: str, layer: int | None, x: torch.Tensor, weight: torch.Tensor,
                 owners: list[tuple[int, int]] | None = None, quantize: bool = True) -> Calls:
        """A projection without bias (a zero bias for the linear task); with int8 activations the
        input is quantised per token and dequantised first."""
        if quantize and self.config.agentloop_int8_activations:
            q, scale = yield from self._call(f"{site}.quant", "per_token_quant_int8", layer, (x,), 2, owners)
            x = (q.float() * scale.float()[:, None]).to(self.config.dtype)
        bias = self.weights.zero_bias(weight.shape[0])
        return (yield from self._call(site, "linear", layer, (x, weight, bias), 1, owners))[0]

    def _mlp(self, site: str, layer: int, x: torch.Tensor, expert: Expert,
             owners: list[tuple[int, int]] | None = None) -> Calls:
        gate_up = yield from self._project(f"{site}.gate_up_proj", layer, x, expert.gate_up, owners)
        act = (yield from self._call(f"{site}.act", "silu_and_mul", layer, (gate_up,), 1, owners))[0]
        return (yield from self._project(f"{site}.down_proj", layer, act, expert.down, owners))

    def _moe(self, i: int, x: torch.Tensor) -> Calls:
        layer, cfg = self.weights.layers[i], self.config
        gating = yield from self._project(f"layer{i}.router", i, x, layer.router, quantize=False)
        weights, ids = yield from self._call(f"layer{i}.topk", "moe_topk_softmax", i,
                                  (gating, cfg.num_experts_per_tok), 2)
        k = cfg.num_experts_per_tok
        # Mixtral renormalises the top-k weights; summed column by column so each row's sum is
        # the same elementwise adds whatever the batch.
        weights = weights.float()
        total = weights[:, 0]
        for j in range(1, k):
            total = total + weights[:, j]
        weights = weights / total[:, None]
        chosen = ids.long().tolist()
        bad = next((row for row in chosen if len(set(row)) != k or not all(0 <= e < len(layer.experts)
                                                                          for e in row)), None)
        if bad is not None:
            raise OpContractError(f"layer{i}.topk: moe_topk_softmax returned expert ids {bad}; expected "
                                  f"{k} distinct ids in 0..{len(layer.experts) - 1}")
        picked = torch.zeros(x.shape[0], k, x.shape[1], dtype=torch.float32, device=x.device)
        # Each expert's MLP on the rows routed to it; the experts are independent of each other,
        # so their calls go as fans (one request per op and stage to a caged kernel, as a real
        # MoE layer runs its experts together), each still a call of its own.
        routed = [(e, [t for t, row_ids in enumerate(chosen) if e in row_ids])
                  for e in range(len(layer.experts))]
        routed = [(e, rows) for e, rows in routed if rows]
        outs = yield from together([self._mlp(f"layer{i}.expert{e}", i, x[rows], layer.experts[e],
                                              [self._owners[t] for t in rows]) for e, rows in routed])
        for (e, rows), out in zip(routed, outs, strict=True):
            for n, t in enumerate(rows):
                picked[t, chosen[t].index(e)] = out[n].float()
        total = weights[:, 0, None] * picked[:, 0]
        for j in range(1, k):
            total = total + weights[:, j, None] * picked[:, j]
        return total.to(cfg.dtype)

    def _attention(self, i: int, x: torch.Tensor, rows: list[Row], positions: torch.Tensor,
                   seq_lens: torch.Tensor, kv_len: int) -> Calls:
        cfg, layer = self.config, self.weights.layers[i]
        B, Hq, Hk, D = len(rows), cfg.num_attention_heads, cfg.kv_heads, cfg.head_size
        qkv = yield from self._project(f"layer{i}.qkv_proj", i, x, layer.qkv)
        q = qkv[:, :Hq * D].reshape(B, Hq, D)
        k = qkv[:, Hq * D:(Hq + Hk) * D].reshape(B, Hk, D)
        v = qkv[:, (Hq + Hk) * D:].reshape(B, Hk, D)
        q, k = yield from self._call(f"layer{i}.rotary", "rotary_embedding", i,
                                     (q, k, positions, cfg.rope_theta), 2)
        k_cache = torch.zeros(B, kv_len, Hk, D, dtype=cfg.dtype, device=x.device)
        v_cache = torch.zeros_like(k_cache)
        for b, row in enumerate(rows):
            p = row.position
            row.cache.k[i][p] = k[b]
            row.cache.v[i][p] = v[b]
            k_cache[b, :p + 1] = row.cache.k[i][:p + 1]
            v_cache[b, :p + 1] = row.cache.v[i][:p + 1]
        attn = (yield from self._call(f"layer{i}.attention", "decode_attention", i,
                                      (q, k_cache, v_cache, seq_lens, D ** -0.5), 1))[0]
        return (yield from self._project(f"layer{i}.o_proj", i, attn.reshape(B, Hq * D), layer.o_proj))

    def step(self, rows: list[Row], global_step: int = 0) -> Calls:
        """One batch (`drive` it; its value is the StepOutput); rows may be in any order and of
        any requests."""
        cfg, w = self.config, self.weights
        device = w.embed.device
        self._owners = [(r.request, r.position) for r in rows]
        positions = torch.tensor([r.position for r in rows], dtype=torch.int64, device=device)
        seq_lens = (positions + 1).to(torch.int32)
        kv_len = max(r.position for r in rows) + 1
        self._kv_len, self._global_step = kv_len, global_step
        tokens = torch.tensor([r.token for r in rows], dtype=torch.int64, device=device)
        hidden, residual = w.embed[tokens], None
        eps = cfg.rms_norm_eps
        for i, layer in enumerate(w.layers):
            site = f"layer{i}.input_norm"
            if residual is None:
                residual = hidden
                x = (yield from self._call(site, "rms_norm", i, (hidden, layer.input_norm, eps), 1))[0]
            else:
                x, residual = yield from self._call(site, "fused_add_rms_norm", i,
                                                    (hidden, residual, layer.input_norm, eps), 2)
            attn = yield from self._attention(i, x, rows, positions, seq_lens, kv_len)
            x, residual = yield from self._call(f"layer{i}.post_attention_norm", "fused_add_rms_norm", i,
                                                (attn, residual, layer.post_norm, eps), 2)
            mlp = self._moe(i, x) if cfg.is_moe else self._mlp(f"layer{i}.mlp", i, x, layer.mlp)
            hidden = yield from mlp
        normed, _ = yield from self._call("final_norm", "fused_add_rms_norm", None,
                                          (hidden, residual, w.norm, eps), 2)
        emit = [b for b, r in enumerate(rows) if r.emits]
        if not emit:
            return StepOutput(tokens=[], logprobs=torch.empty(0, dtype=torch.float32))
        owners = [self._owners[b] for b in emit]
        logits = yield from self._project("lm_head", None, normed[emit], w.lm_head, owners, quantize=False)
        ids = (yield from self._call("sample", "greedy_sample", None, (logits,), 1, owners))[0]
        if ids.dtype.is_floating_point or not bool(((ids >= 0) & (ids < cfg.vocab_size)).all()):
            raise OpContractError(f"sample: greedy_sample returned {ids.dtype} ids {ids.tolist()[:8]}; "
                                  f"expected int64 token ids in 0..{cfg.vocab_size - 1}")
        logprobs = (yield from self._call("logprobs", "token_logprobs", None, (logits, ids.long()), 1,
                                          owners))[0]
        return StepOutput(tokens=[int(t) for t in ids.tolist()],
                          logprobs=logprobs.detach().to("cpu", torch.float32))
