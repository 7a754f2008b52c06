"""The CPU plan's reach (issue 13): batches at the sizes kernels switch strategy at, and co-batched
rows holding inf, -inf and NaN whose neighbours must keep their bits. Plain torch callables stand
in for candidates, so these run in milliseconds."""

import math

import torch

from gates.batching import RowPools
from gates.contract import get_task
from gates.dynamic import dynamic_gate, gate_plan
from gates.feedback import render_counterexample
from gates.plan import CPU_BATCH_SIZES, batch_sizes
from gates.reference import as_outputs, reference_fn

RMS = get_task("rms_norm")
LOGPROBS = get_task("token_logprobs")


def test_cpu_plan_reaches_the_usual_thresholds():
    sizes = batch_sizes(RMS, "cpu")
    assert {64, 128, 256, 512} <= set(sizes) == set(CPU_BATCH_SIZES)
    plan = gate_plan(RMS, "cpu", sizes)
    assert {c.batch_size for c in plan if c.kind == "batch"} >= {64, 128, 256, 512}
    ref = reference_fn(RMS)

    def prefill_switch(x, weight, eps):  # another rounding from 256 rows up
        out = as_outputs(ref(x, weight, eps))[0]
        return (out * 1.0000001) if x.shape[0] >= 256 else out

    cx = dynamic_gate(prefill_switch, RMS, "cpu").counterexample
    assert cx is not None and cx.batch_size == 256 and cx.context.startswith("batch:")
    assert "identical before in batches of 1, 2, 3, 4, 5, 8, 16, 17, 32, 33, 64, 128" in cx.context


def test_a_row_whose_inf_or_nan_reaches_its_neighbours_is_caught():
    ref = reference_fn(RMS)

    def contaminating(x, weight, eps):  # 0 * (a batch-wide sum): exact zero until a row is not finite
        return as_outputs(ref(x, weight, eps))[0] + 0.0 * x.float().sum()

    assert dynamic_gate(ref, RMS, "cpu").passed
    cx = dynamic_gate(contaminating, RMS, "cpu").counterexample
    assert cx is not None and cx.context.startswith("nonfinite:") and "inf, -inf and NaN" in cx.context
    text = render_counterexample(cx, RMS, "cpu")  # the feedback names the mechanism and the fix
    assert "element(s) differ (to or from inf or NaN)." in text
    assert "Another request's inf or NaN reached this row" in text and "tl.where(mask, x, neutral)" in text
    assert "tl.dot's rounding" not in text  # the CPU caveat is about tile positions, not this


def test_nonfinite_rows_hold_inf_and_nan_in_floating_inputs_only():
    plan = gate_plan(LOGPROBS, "cpu", batch_sizes(LOGPROBS, "cpu"))
    ctx = next(c for c in plan if c.kind == "nonfinite")
    pools = RowPools(LOGPROBS, "cpu", "float32", plan)
    logits, ids = pools.build(ctx).args
    others = [p for p in range(ctx.batch_size) if p not in ctx.probes]
    assert others
    for p in others:
        head = logits[p, :3].tolist()
        assert head[0] == math.inf and head[1] == -math.inf and math.isnan(head[2])
        assert torch.isfinite(logits[p, 3:]).all()
    assert ids.dtype == torch.int64 and (ids >= 0).all()
    for p in ctx.probes:
        assert torch.isfinite(logits[p]).all()


# -- beyond the sweep (issue: a kernel that behaves one way under audit and another in production) --
def test_sizes_beyond_the_sweep_are_drawn_per_seed_within_reach():
    from gates.plan import CPU_BEYOND, beyond_sizes

    for task in (RMS, LOGPROBS, get_task("decode_attention")):
        swept = max(batch_sizes(task, "cpu"))
        drawn = {tuple(beyond_sizes(task, "cpu", seed)) for seed in range(40)}
        assert len(drawn) > 10  # the seed decides, so a candidate cannot know the sizes in advance
        assert all(swept < b <= swept + CPU_BEYOND for sizes in drawn for b in sizes)
        largest = max(s[task.batch_axis] for s in task.shapes)
        gpu = [b for seed in range(40) for b in beyond_sizes(task, "cuda", seed)]
        assert max(batch_sizes(task, "cuda")) < min(gpu) and max(gpu) <= 2 * largest
        assert beyond_sizes(task, "cuda", 7) == beyond_sizes(task, "cuda", 7)


def test_a_switch_above_the_largest_swept_batch_is_caught_and_named():
    from gates.plan import beyond_sizes

    ref = reference_fn(RMS)
    swept = max(batch_sizes(RMS, "cpu"))

    def serving_only(x, weight, eps):  # another rounding only above every size the sweep tries
        T = getattr(x, "si" + "ze")(0)
        out = as_outputs(ref(x, weight, eps))[0]
        return (out * 1.0000001) if T > swept else out

    seed = 123456
    result = dynamic_gate(serving_only, RMS, "cpu", sweep_seed=seed)
    cx = result.counterexample
    assert cx is not None and cx.batch_size == beyond_sizes(RMS, "cpu", seed)[0] > swept
    assert cx.context.startswith("beyond:") and f"sweep seed {seed}" in cx.context
    assert f"largest swept size {swept}" in cx.context
    assert dynamic_gate(ref, RMS, "cpu", sweep_seed=seed).passed  # the reference is no counterexample
    # An explicit list of sizes draws nothing beyond it.
    assert dynamic_gate(serving_only, RMS, "cpu", sizes=[1, 2, 4, 8]).passed


def test_beyond_batches_reuse_the_generated_rows():
    from gates.plan import add_beyond, plan_elements

    sizes = batch_sizes(RMS, "cuda")
    plan = gate_plan(RMS, "cuda", sizes)
    more = add_beyond(plan, [2 * max(sizes)], max(sizes), 5)
    assert more[-1].kind == "beyond" and more[-1].batch_size == 2 * max(sizes)
    assert plan_elements(RMS, "cuda", more) == plan_elements(RMS, "cuda", plan)


def test_the_audit_coverage_names_the_drawn_sizes_and_seed():
    from gates.audit import coverage
    from gates.plan import beyond_sizes

    text = coverage("dynamic", RMS, "cpu", 99)
    assert f"+ {beyond_sizes(RMS, 'cpu', 99)[0]} beyond (sweep seed 99)" in text
