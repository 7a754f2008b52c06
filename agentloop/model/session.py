"""One model check as the command line runs it: the model from a config name or directory, each
kernel set resolved (`set_spec`) and caged (`caged`), checked one set at a time (`check`), the
shapes each op was called at logged and, when asked, the dynamic gate run at them (`shapes`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agentloop.model.caged import CagedSet
from agentloop.model.check import ModelCheckReport, SetReport, check_model
from agentloop.model.config import ModelInputError, load_config
from agentloop.model.decoder import required_ops
from agentloop.model.set_spec import parse_set
from agentloop.model.shapes import ShapeLog, gate_at_model_shapes
from agentloop.model.weights import load_weights, seeded_weights


def load_model(config: str, device: str, seed: int):
    """(config, weights): a directory with *.safetensors loads real weights; a config file or a
    bundled name gets weights drawn from `seed`."""
    path = Path(config)
    if path.is_dir() and any(path.glob("*.safetensors")):
        return load_weights(path, device)
    cfg = load_config(config)
    return cfg, seeded_weights(cfg, seed, device)


def check_sets(specs: list[str], config: str, *, requests: int = 16, new_tokens: int = 32, seed: int = 0,
               device: str = "cpu", gate_shapes: bool = False,
               progress: Callable[[str], None] | None = None) -> ModelCheckReport:
    """Check every set in turn (its runners live only while it is checked); ModelInputError (one
    line) for a config, weights or set that cannot be used — every set is resolved before any runs."""
    cfg, weights = load_model(config, device, seed)
    tasks = required_ops(cfg)
    choices = [parse_set(spec, tasks, device) for spec in specs]
    names = [c.name for c in choices]
    if len(set(names)) != len(names):
        raise ModelInputError(f"two kernel sets are named alike ({', '.join(names)}); name them NAME=SPEC")
    say = progress or (lambda _: None)
    sets: list[SetReport] = []
    report: ModelCheckReport | None = None
    for choice in choices:
        say(f"model check: set {choice.name} ({len(choice.kernels)} of {len(tasks)} ops from the set)")
        log = ShapeLog()
        with CagedSet(choice, tasks, device) as caged:
            report = check_model(cfg, weights, {choice.name: log.wrap(caged.ops)}, requests=requests,
                                 new_tokens=new_tokens, seed=seed, device=device)
        got = report.sets[0]
        got.sandbox_findings = caged.findings
        got.shapes = log.shapes()
        if gate_shapes:
            codes = {t: k.code for t, k in choice.kernels.items() if k.kind in ("code", "entry") and k.code}
            say(f"model check: the dynamic gate on {len(codes)} kernels of {choice.name} at the model's "
                f"shapes")
            got.op_gates = gate_at_model_shapes(codes, got.shapes, device)
        sets.append(got)
    assert report is not None
    return report.model_copy(update={"sets": sets})


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
        for f in s.sandbox_findings:
            lines.append(f"  sandbox: {f}")
        for g in s.op_gates:
            dims = ", ".join(f"{k}={v}" for k, v in g.dims.items())
            verdict = "pass" if g.passed else f"FAIL: {g.detail}"
            lines.append(f"  gate at model shapes: {g.task} [{dims}] batches {g.batch_sizes}: {verdict}")
    return lines
