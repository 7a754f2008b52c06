"""The dynamic BI gate on real kernel files, in this process through Triton's interpreter, and
its batch construction and bitwise comparison."""

from pathlib import Path

import pytest
import torch

from gates import batching, dynamic
from gates import plan as plan_module
from gates.batching import RowPools, as_bits, near_tie_row
from gates.candidate import candidate_entry
from gates.contract import BISettings, get_task
from gates.dynamic import dynamic_gate, gate_plan, plan_size, run_contexts
from gates.feedback import render_counterexample
from gates.plan import (
    CPU_BATCH_SIZES,
    CUDA_BEYOND_DRAWS,
    NEAR_TIE,
    PROBE_ROWS,
    SINGLES,
    HarnessError,
    batch_sizes,
    content_sizes,
    plan_contexts,
    plan_elements,
)
from gates.reference import as_outputs, reference_fn

FIXTURES = Path(__file__).parent / "fixtures"
RMS = get_task("rms_norm")
GREEDY = get_task("greedy_sample")
DECODE = get_task("decode_attention").model_copy(update={
    "cpu_dims": {"Hq": 2, "Hk": 1, "D": 16, "L": 24},
    "bi": BISettings(cpu_batch_sizes=[1, 2, 5])})


def entry(task, name):
    return candidate_entry(FIXTURES / task.name / f"{name}.py", task.entry)[1]


def test_invariant_kernel_passes():
    result = dynamic_gate(entry(RMS, "rows"), RMS, "cpu")
    assert result.passed and result.error is None and result.counterexample is None


def test_batch_size_dependent_reduction_is_caught_at_its_threshold():
    result = dynamic_gate(entry(RMS, "split_by_batch"), RMS, "cpu")
    cx = result.counterexample
    assert not result.passed and cx is not None
    # The kernel changes its reduction at T >= 16: every smaller batch matched.
    assert cx.batch_size == 16 and cx.output == 0
    assert cx.mismatched_elements > 0 and cx.max_abs_diff > 0
    assert cx.context.startswith("batch:") and "identical before in batches of 1, 2, 3, 4, 5, 8" in cx.context
    text = render_counterexample(cx, RMS, "cpu")
    assert "output `out`" in text and "batch size" in text and "split" in text


def test_state_kept_across_calls_is_caught_as_nondeterminism():
    cx = dynamic_gate(entry(RMS, "call_counter"), RMS, "cpu").counterexample
    assert cx is not None and cx.context.startswith("repeat:") and cx.batch_size == 1


def test_a_batch_wide_statistic_is_caught():
    cx = dynamic_gate(entry(RMS, "batch_max_scale"), RMS, "cpu").counterexample
    assert cx is not None and cx.reference_batch_size == 1 and cx.batch_size > 1


def test_padded_length_growth_is_caught_for_ragged_tasks():
    good = dynamic_gate(entry(DECODE, "own_length"), DECODE, "cpu")
    assert good.passed, good.counterexample or good.error
    cx = dynamic_gate(entry(DECODE, "block_from_padded_length"), DECODE, "cpu").counterexample
    assert cx is not None and cx.context.split(":")[0] in ("padding", "batch", "long")
    assert "padded length" in render_counterexample(cx, DECODE, "cpu")


def test_candidate_failure_is_an_error_with_its_context():
    result = dynamic_gate(entry(RMS, "compile_error"), RMS, "cpu")
    assert not result.passed and result.counterexample is None
    assert "compile_error.py line" in result.error and "the row alone" in result.error


def test_wrong_row_count_is_an_error():
    result = dynamic_gate(entry(RMS, "drops_last_row"), RMS, "cpu")
    assert not result.passed and "has shape (1, 256) for a batch of 2" in result.error


def test_positive_control_fails_a_harness_that_cannot_see_differences(monkeypatch):
    # A comparison that sees every row as equal must not let a variant kernel through.
    monkeypatch.setattr(dynamic, "as_bits", lambda t: torch.zeros(t.shape[:1] + (1,), dtype=torch.uint8))
    result = dynamic_gate(entry(RMS, "split_by_batch"), RMS, "cpu", sizes=[1, 2, 16])
    assert not result.passed and result.error.startswith("positive control failed")


def test_bitwise_comparison_of_special_values():
    nan = torch.tensor([float("nan"), 1.0])
    assert torch.equal(as_bits(nan), as_bits(nan.clone()))
    assert not torch.equal(as_bits(torch.tensor([0.0])), as_bits(torch.tensor([-0.0])))
    for dtype in (torch.int64, torch.int8, torch.bool, torch.bfloat16, torch.float8_e4m3fn):
        a = torch.zeros(3, dtype=dtype)
        b = a.clone()
        as_bits(b)[1] ^= 1
        assert not torch.equal(as_bits(a), as_bits(b)), dtype
        count, _ = dynamic._difference(a, b)
        assert count == 1, dtype


def test_batch_sizes_scale_with_the_device_and_the_task():
    assert batch_sizes(RMS, "cpu") == list(CPU_BATCH_SIZES)
    gpu = batch_sizes(RMS, "cuda")
    assert {1, 8, 16, 31, 32, 63, 64, 127, 128, 255, 256, 511, 512, 4096} <= set(gpu)
    assert batch_sizes(DECODE, "cpu") == [1, 2, 5]
    decode = get_task("decode_attention")
    assert max(batch_sizes(decode, "cuda")) == max(s["B"] for s in decode.shapes)


def test_probes_sit_first_a_quarter_in_middle_and_last_and_rotate():
    plan = plan_contexts([1, 2, 3, 8, 9, 16], ragged=False, repeat_each_size=False, repeats=1)
    batches = [c for c in plan if c.kind == "batch"]
    assert [sorted(c.probes) for c in batches] == [[0, 1], [0, 1, 2], [0, 2, 4, 7], [0, 2, 4, 8],
                                                   [0, 4, 8, 15]]
    assert batches[2].probes[0] != batches[3].probes[0]  # each probe visits each position
    # The near-tie probe is in every batch of four rows or more, at a different position each time.
    big = [c for c in batches if c.batch_size >= PROBE_ROWS]
    near_tie_at = [next(p for p, pid in c.probes.items() if pid == NEAR_TIE) for c in big]
    slots = {sorted(c.probes).index(p) for c, p in zip(big, near_tie_at, strict=True)}
    assert len(near_tie_at) == 3 and len(slots) == 3
    kinds = [c.kind for c in plan]
    assert kinds[:PROBE_ROWS] == ["alone"] * PROBE_ROWS and "permuted" in kinds and kinds[-1] == "repeat"
    permuted = next(c for c in plan if c.kind == "permuted")
    assert permuted.order != list(range(16)) and sorted(permuted.order) == list(range(16))
    for c in plan:
        if c.kind in ("zeros", "large"):
            assert c.batch_size > PROBE_ROWS and any(s.pool == c.kind for s in c.slots)


def test_long_context_grows_the_padded_length_and_keeps_probe_bytes():
    sizes = [1, 2, 5]
    plan = plan_contexts(sizes, ragged=True, repeat_each_size=False, repeats=1)
    pools = RowPools(DECODE, "cpu", "float32", plan)
    long = next(c for c in plan if c.kind == "long")
    pos, pid = next(iter(long.probes.items()))
    alone = pools.build(plan[pid])
    batch = pools.build(long)
    probe_len = pools.row_length(plan[pid].slots[0])
    assert alone.extent == probe_len
    assert batch.extent == 2 * DECODE.cpu_dims["L"] > probe_len
    k_alone, k_batch = alone.args[1], batch.args[1]
    assert torch.equal(k_batch[pos, :probe_len], k_alone[0])
    # The padding behind the probe is fresh random data, not the probe pool's.
    assert not torch.equal(k_batch[pos, probe_len:probe_len + 4], torch.zeros_like(k_batch[pos, :4]))
    assert batch.args[3][pos] == probe_len and batch.args[3].dtype == torch.int32


def test_splicing_errors_are_caught_by_the_harness(monkeypatch):
    plan = plan_contexts([1, 2], ragged=False, repeat_each_size=False, repeats=1)
    pools = RowPools(RMS, "cpu", "float32", plan)
    splice = batching.RowPools._splice
    monkeypatch.setattr(batching.RowPools, "_splice", lambda self, *a: splice(self, *a).roll(1, 0))
    with pytest.raises(HarnessError):
        pools.build(next(c for c in plan if c.kind == "batch"))


def test_content_sizes_leave_room_for_co_batched_rows():
    assert content_sizes([1, 2, 3]) == [5]
    assert content_sizes(list(CPU_BATCH_SIZES), compact=True) == [8, 16]
    assert all(b > PROBE_ROWS for b in content_sizes(list(CPU_BATCH_SIZES)))


def test_near_tie_probe_exposes_a_batch_wide_argmax_scale():
    cx = dynamic_gate(entry(GREEDY, "batch_scale_argmax"), GREEDY, "cpu").counterexample
    assert cx is not None and cx.row == NEAR_TIE and "near-tie probe" in cx.context
    assert dynamic_gate(entry(GREEDY, "row_scale_argmax"), GREEDY, "cpu").passed


def test_without_the_near_tie_probe_the_batch_wide_scale_goes_unseen(monkeypatch):
    # The near-tie row replaced by a plain copy of probe 0: nothing else exposes the fixture.
    plain = lambda rows, seed=0: {k: v[:1].clone() for k, v in rows.items()}  # noqa: E731
    monkeypatch.setattr(batching, "near_tie_row", plain)
    monkeypatch.setattr(batching.RowPools, "_cache", type(batching.RowPools._cache)())
    # Non-finite co-batched rows expose it too (an inf maximum scales every row): left out here.
    monkeypatch.setattr(plan_module, "CONTENT_KINDS", ("zeros", "large"))
    assert dynamic_gate(entry(GREEDY, "batch_scale_argmax"), GREEDY, "cpu").passed


def test_near_ties_sit_within_two_ulps_of_the_maximum_and_spare_integers():
    logits = torch.randn(1, 64, generator=torch.Generator().manual_seed(0))
    ids = torch.arange(1, dtype=torch.int64)
    for dtype in (torch.float32, torch.bfloat16):
        x = logits.to(dtype)
        got = near_tie_row({"x": x, "ids": ids})
        row, peak = got["x"][0], x[0].max()
        changed = (as_bits(row) != as_bits(x[0])).nonzero().flatten()
        assert len(changed) == 5 and int(x[0].argmax()) not in changed.tolist()
        up = torch.nextafter(peak, torch.tensor(float("inf"), dtype=dtype))
        assert row.max() == torch.nextafter(up, torch.tensor(float("inf"), dtype=dtype))
        # Values rise with the position, so merging close keys moves the argmax earlier.
        assert int(row.argmax()) == int(changed.max())
        assert torch.equal(row[changed], row[changed].sort().values)
        assert (row[changed] < peak).sum() == 2 and (row[changed] == peak).sum() == 1
        assert torch.equal(got["ids"], ids)


def test_cuda_plan_keeps_its_coverage_in_about_a_third_of_the_calls():
    for task in (get_task("decode_attention"), get_task("fused_add_rms_norm")):
        sizes = batch_sizes(task, "cuda")
        first = gate_plan(task, "cuda", sizes)
        batched = {c.batch_size for c in first if c.kind == "batch"}
        straddles = {2, 8, 16, 31, 32, 63, 64, 127, 128, 255, 256, 511, 512}
        assert {b for b in straddles if b <= max(sizes)} | {max(sizes)} <= batched
        assert all(sorted(c.probes) == [0, c.batch_size // 4, c.batch_size // 2, c.batch_size - 1]
                   for c in first if c.kind == "batch" and c.batch_size >= PROBE_ROWS)
        assert all(NEAR_TIE in c.probes.values() for c in first
                   if c.kind in ("batch", "zeros", "large", "long") and c.batch_size >= PROBE_ROWS)
        kinds = {c.kind for c in first}
        assert {"alone", "single", "batch", "zeros", "large", "permuted", "repeat"} <= kinds
        singles = {c.slots[0] for c in first if c.kind == "single"}
        assert len(singles) == SINGLES and {s.pool for s in singles} == {"random"}
        # every single row sits in the largest random batch, so meets its batch-1 self there
        largest = max((c for c in first if c.kind == "batch"), key=lambda c: c.batch_size)
        assert len(singles & set(largest.slots)) >= SINGLES - PROBE_ROWS
        if task.ragged:
            assert {"long", "padding"} <= kinds
        later = gate_plan(task, "cuda", sizes, first_dtype=False)
        assert max(c.batch_size for c in later) == max(sizes) and len(later) < len(first) / 2
        # Before: every size in both dtypes, each repeated, content at two sizes: 94 to 104 calls;
        # the singles are batch-1 calls on top.
        assert plan_size(task, "cuda").calls <= 36 + SINGLES + CUDA_BEYOND_DRAWS


def test_singles_catch_a_row_that_changes_where_no_probe_sits():
    """A kernel that changes the bits of the row at position 1 from eight rows up: no probe sits
    there, and the row keeps its (wrong) bits from B=8 to B=16, so comparing consecutive batches
    misses it; comparing the row with itself computed alone catches it at B=8."""
    ref = reference_fn(RMS)

    def position_one_changes(*args):
        outs = list(as_outputs(ref(*args)))
        if outs[0].shape[0] >= 8:
            out = outs[0].clone(memory_format=torch.contiguous_format)
            as_bits(out).view(out.shape[0], -1)[1, 0] ^= 1
            outs[0] = out
        return tuple(outs)

    found = {}
    for singles in (0, 4):
        plan = plan_contexts([1, 2, 3, 4, 5, 8, 16], ragged=False, contents=0, permute=False, singles=singles)
        pools = RowPools(RMS, "cpu", "float32", plan)
        found[singles] = run_contexts(position_one_changes, RMS, plan, pools, "float32").counterexample
    assert found[0] is None
    cx = found[4]
    assert (cx.batch_size, cx.position, cx.row, cx.reference_batch_size) == (8, 1, 1, 1)
    assert cx.mismatched_elements == 1 and "computed alone (batch 1)" in cx.context


def test_plan_elements_count_what_the_pools_generate():
    for task in (RMS, DECODE):
        sizes = batch_sizes(task, "cpu")
        smaller = plan_contexts(sizes, ragged=bool(task.ragged), contents=1)
        for plan in (gate_plan(task, "cpu", sizes), smaller):
            pools = RowPools(task, "cpu", "float32", plan)
            assert pools.generated_elements == plan_elements(task, "cpu", plan) > 0
