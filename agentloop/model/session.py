"""One model check as the command line runs it: the model from a config name or directory, each
kernel set resolved (`set_spec`) and caged (`caged`), checked one set at a time (`check`), the
shapes each op was called at logged and, when asked, the dynamic gate run at them (`shapes`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from agentloop.model.caged import CagedSet
from agentloop.model.check import ModelCheckReport, SetReport, check_model
from agentloop.model.config import ModelConfig, ModelInputError
from agentloop.model.decoder import required_ops
from agentloop.model.schedule import make_requests
from agentloop.model.serving import ServingSpeed, measure_serving
from agentloop.model.set_spec import TORCH_KINDS, KernelSetChoice, parse_set
from agentloop.model.shapes import ShapeLog, gate_at_model_shapes
from agentloop.model.weights import ModelWeights, load_model, model_loader
from gates.judge.runner_process import UID_SLOTS


def check_sets(specs: list[str], config: str, *, requests: int = 16, new_tokens: int = 32, seed: int = 0,
               device: str = "cpu", gate_shapes: bool = False, serving: bool = False,
               twin_runs: bool | None = None,
               progress: Callable[[str], None] | None = None) -> ModelCheckReport:
    """Check every set in turn (its runners live only while it is checked); ModelInputError (one
    line) for a config, weights or set that cannot be used — every set is resolved before any runs.
    `serving`: also time each set with its kernels in a serving process (`serving.py`).
    `twin_runs` (default: on a GPU): a set with caged kernels gets two more copies of its runners
    (one where a judge's runner uids do not stretch to three), so the alone schedule's two runs
    and the batched schedule's first go at once (`check_model`'s twins); on a CPU they would
    share its cores with the interpreter instead."""
    cfg, load_weights = model_loader(config, device, seed)
    tasks = required_ops(cfg)
    choices = [parse_set(spec, tasks, device) for spec in specs]
    names = [c.name for c in choices]
    if len(set(names)) != len(names):
        raise ModelInputError(f"two kernel sets are named alike ({', '.join(names)}); name them NAME=SPEC")
    with ThreadPoolExecutor(1, thread_name_prefix="weights") as pool:
        # Drawn (and this process's device set up) while the first set's runners boot.
        weights = pool.submit(load_weights)
        return _check_each(choices, tasks, config, cfg, weights, requests=requests, new_tokens=new_tokens,
                           seed=seed, device=device, gate_shapes=gate_shapes, serving=serving,
                           twin_runs=twin_runs, say=progress or (lambda _: None))


def _check_each(choices: list[KernelSetChoice], tasks: list[str], config: str, cfg: ModelConfig,
                loading: Future[ModelWeights], *, requests: int, new_tokens: int, seed: int, device: str,
                gate_shapes: bool, serving: bool, twin_runs: bool | None,
                say: Callable[[str], None]) -> ModelCheckReport:
    sets: list[SetReport] = []
    report: ModelCheckReport | None = None
    for choice in choices:
        say(f"model check: set {choice.name} ({len(choice.kernels)} of {len(tasks)} ops from the set)")
        log = ShapeLog()
        caged_ops = sum(choice.choice(t).kind not in TORCH_KINDS for t in tasks)
        twinned = (device != "cpu" if twin_runs is None else twin_runs) and caged_ops > 0
        copies = (3 if 3 * caged_ops <= UID_SLOTS else 2) if twinned else 1
        began = time.perf_counter()
        with CagedSet(choice, tasks, device, copies=copies) as caged:
            runners = time.perf_counter() - began
            twins = {choice.name: [log.wrap(c) for c in caged.twins]} if twinned else None
            report = check_model(cfg, loading.result(), {choice.name: log.wrap(caged.ops)}, requests=requests,
                                 new_tokens=new_tokens, seed=seed, device=device, twins=twins)
            checked = time.perf_counter()
        got = report.sets[0]
        got.phases = {"runners": runners, **got.phases, "stop": time.perf_counter() - checked}
        got.sandbox_findings = caged.findings
        got.shapes = log.shapes()
        if gate_shapes:
            codes = {t: k.code for t, k in choice.kernels.items() if k.kind in ("code", "entry") and k.code}
            say(f"model check: the dynamic gate on {len(codes)} kernels of {choice.name} at the model's "
                f"shapes")
            got.op_gates = gate_at_model_shapes(codes, got.shapes, device)
        if serving and not got.error:
            say(f"model check: {choice.name} served with its kernels in a caged serving process")
            got.serving = _serve(choice, tasks, config, cfg, requests, new_tokens, seed, device,
                                 got.batched_tokens)
        sets.append(got)
    assert report is not None
    return report.model_copy(update={"sets": sets})


def serve_sets(specs: list[str], config: str, *, requests: int = 16, new_tokens: int = 32, seed: int = 0,
               device: str = "cpu") -> dict[str, ServingSpeed]:
    """Each set's tokens/s in a serving process only, without its check: quicker, but nothing
    compares its tokens (`tokens_match` is None), so a figure is a kernel's own word."""
    cfg, _ = load_model(config, device, seed)
    tasks = required_ops(cfg)
    return {choice.name: _serve(choice, tasks, config, cfg, requests, new_tokens, seed, device, None)
            for choice in (parse_set(spec, tasks, device) for spec in specs)}



def _serve(choice: KernelSetChoice, tasks: list[str], config: str, cfg: ModelConfig, requests: int,
           new_tokens: int, seed: int, device: str, expected: dict[int, list[int]] | None) -> ServingSpeed:
    kernels = {t: k.code for t, k in choice.kernels.items()
               if t in tasks and k.kind not in TORCH_KINDS and k.code}
    if any(k.kind == "entry" for k in choice.kernels.values()):
        return ServingSpeed(error="library entries are timed only behind the cage (not in a serving process)")
    torch_set = next((choice.choice(t).kind for t in tasks if choice.choice(t).kind in TORCH_KINDS), "eager")
    reqs = make_requests(cfg, requests, new_tokens, seed)
    return measure_serving(torch_set, kernels, config, seed=seed, requests=reqs, plan_seed=seed,
                           device=device, vocab=cfg.vocab_size, expected=expected)


def render_details(report: ModelCheckReport) -> list[str]:
    """What the table leaves out: per set, where each op came from, every divergent request's first
    differing op, and the gate at the model's shapes."""
    lines = []
    for s in report.sets:
        lines.append(f"{s.name}:")
        lines += [f"  {task}: {origin}" for task, origin in sorted(s.sources.items())]
        for c in s.requests:
            if c.divergence is not None:
                lines.append(f"  request {c.request} first differs at {c.divergence.describe()}")
        if s.serving is not None:
            sv = s.serving
            same = {True: "as in the check", False: "NOT as in the check", None: "not compared"}
            same = same[sv.tokens_match]
            lines.append(f"  serving process: {sv.error}" if sv.error else
                         f"  serving process: {sv.tokens_per_s:.0f} tokens/s batched ({sv.tokens} tokens in "
                         f"{sv.seconds:.2f} s); tokens {same}")
        for f in s.sandbox_findings:
            lines.append(f"  sandbox: {f}")
        for g in s.op_gates:
            dims = ", ".join(f"{k}={v}" for k, v in g.dims.items())
            verdict = "pass" if g.passed else f"FAIL: {g.detail}"
            lines.append(f"  gate at model shapes: {g.task} [{dims}] batches {g.batch_sizes}: {verdict}")
    return lines
