"""The model check on CPU (Triton kernels in the interpreter, float32, the bundled tiny configs):
an invariant kernel set reproduces every request, one variant kernel makes requests differ and
the finder names it, bad configs and checkpoints fail in one line, and a safetensors directory
gives the seeded model's tokens."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from agentloop.model import check as model_check
from agentloop.model.check import check_model, exit_status, render_table
from agentloop.model.config import ModelInputError, load_config, parse_config
from agentloop.model.decoder import Decoder
from agentloop.model.kernel_sets import compiled_ops, eager_ops, file_ops, reference_ops
from agentloop.model.recorder import Recorder
from agentloop.model.schedule import (
    Request,
    alone_plan,
    batched_plan,
    make_requests,
    run_alone,
    run_lanes,
    run_plan,
    serve_plan,
)
from agentloop.model.weights import load_weights, seeded_state_dict, seeded_weights
from gates.contract import get_task
from gates.corpus import load_manifest

# Corpus kernels measured invariant on the CPU interpreter (checked against the manifests below).
CPU_INVARIANT = {"rms_norm": "row_per_program.py", "fused_add_rms_norm": "row_per_program.py",
                 "rotary_embedding": "token_per_program.py", "decode_attention": "grouped_decode.py",
                 "silu_and_mul": "row_column_blocks.py", "greedy_sample": "row_scan.py",
                 "token_logprobs": "online_row.py", "moe_topk_softmax": "row_per_program.py"}
# Measured variant on CPU: batches of 16 rows or more take a tiled path that computes
# (gate * up) * sigmoid(gate) instead of gate / (1 + exp(-gate)) * up, which changes most rows'
# bits. (The rms_norm split kernels change a row only when the reordered sum of squares moves
# rsqrt by an ulp, about one row in seven at these widths: a test on them would rest on luck.)
VARIANT = ("silu_and_mul", "rows_heuristics.py")

# Every linear of the corpus multiplies its tiles with tl.dot, which the interpreter runs as
# np.matmul; OpenBLAS's Haswell sgemm kernel (picked on this AMD EPYC) rounds rows 6-11 of each
# 12 differently from rows 0-5, so a row's result depends on its place in the tile. This linear
# gives each row its own programs and reduces with tl.sum, invariant on any CPU.
ROW_LINEAR = (Path(__file__).parent / "fixtures" / "linear" / "row_sum.py").read_text()


def _candidate(task: str, file: str) -> str:
    return str(get_task(task).candidates_dir / file)


@pytest.fixture(scope="module")
def invariant_files(tmp_path_factory) -> dict[str, str]:
    for task, file in CPU_INVARIANT.items():
        entry = next(e for e in load_manifest(get_task(task)).candidates if e.file == file)
        assert entry.cpu is not None and entry.cpu.label == "invariant", (task, file)
    linear = tmp_path_factory.mktemp("kernels") / "row_linear.py"
    linear.write_text(ROW_LINEAR)
    return {**{t: _candidate(t, f) for t, f in CPU_INVARIANT.items()}, "linear": str(linear)}


def _variant_path(rows: int) -> int:
    """rows_heuristics.py's BLOCK_T for a batch of `rows`, which picks its formula."""
    return 1 if rows < 16 else 8


def _requests(config, burst: int = 14) -> list[Request]:
    """Three reported requests and random fillers, plus a burst of one-step fillers at step 2
    (with 14, that batch exceeds 16 rows, where the variant kernel takes its other path)."""
    reqs = make_requests(config, requests=3, new_tokens=2, seed=0, fillers=2, prompt_lens=(2, 2))
    rng = random.Random(1)
    return reqs + [Request(id=len(reqs) + j, prompt=[rng.randrange(config.vocab_size)], new_tokens=1,
                           arrival=2, reported=False) for j in range(burst)]


# The MoE model with a smaller burst: its experts' gathered batches vary anyway, and time is short.
@pytest.mark.parametrize(("name", "burst"), [("tiny-llama", 14), ("tiny-moe", 3)])
def test_invariant_kernels_reproduce_every_request(name, burst, invariant_files):
    config = load_config(name)
    reqs = _requests(config, burst)
    plan = batched_plan(reqs, seed=0)
    sizes = [len(s.rows) for s in plan]
    assert max(sizes) > 3 + burst and len(set(sizes)) > 3, sizes
    report = check_model(config, seeded_weights(config, seed=0), {"invariant": file_ops(invariant_files)},
                         requests=reqs, seed=0, device="cpu")
    (result,) = report.sets
    assert not result.error, result.error
    assert result.differing == 0 and result.nondeterministic == 0, result.model_dump_json()
    assert len(result.requests) == 3 and all(r.reproducible for r in result.requests)
    assert exit_status(report) == 0


# Recorded in the first runs (small recordings), or on one more run of each schedule that records
# only the requests that differed (recordings above RECORD_ALWAYS_BYTES): the same answer.
@pytest.mark.parametrize("recording", ["first runs", "one more run"])
def test_variant_kernel_is_found(invariant_files, recording, monkeypatch):
    if recording == "one more run":
        monkeypatch.setattr(model_check, "RECORD_ALWAYS_BYTES", {"cpu": 0, "cuda": 0})
    config = load_config("tiny-llama")
    reqs = _requests(config)
    task, file = VARIANT
    entry = next(e for e in load_manifest(get_task(task)).candidates if e.file == file)
    assert entry.cpu is not None and entry.cpu.label == "variant"
    ops = file_ops({**invariant_files, task: _candidate(task, file)})
    report = check_model(config, seeded_weights(config, seed=0), {"variant silu_and_mul": ops},
                         requests=reqs, seed=0, device="cpu")
    (result,) = report.sets
    assert not result.error, result.error
    assert result.differing >= 1 and exit_status(report) == 1
    assert result.nondeterministic == 0
    # Per request: its first step in a batch where the variant takes another path than alone.
    first_other_path = {}
    for planned in batched_plan(reqs, seed=0):
        for row, pr in enumerate(planned.rows):
            if _variant_path(len(planned.rows)) != _variant_path(1) and pr.request not in first_other_path:
                first_other_path[pr.request] = (pr.position, len(planned.rows), row, planned.kv_len)
    # Only requests that met the other path can differ (one whose reported outputs happen to
    # round the same is not reported).
    differing = {c.request for c in result.requests if not c.reproducible}
    assert differing and differing <= set(first_other_path)
    for check in result.requests:
        if check.reproducible:
            continue
        div = check.divergence
        assert div is not None, check
        step, size, row, kv_len = first_other_path[check.request]
        assert (div.task, div.site, div.layer, div.step) == (task, "layer0.mlp.act", 0, step)
        assert (div.batched.batch_size, div.batched.row, div.batched.kv_len) == (size, row, kv_len)
        assert div.alone.batch_size == 1 and div.alone_value != div.batched_value
    assert json.loads(report.model_dump_json())["sets"][0]["differing"] == result.differing
    assert render_table(report).row_count == 1


def test_bad_inputs_fail_in_one_line(tmp_path):
    with pytest.raises(ModelInputError, match="'GPT2LMHeadModel' is not supported") as info:
        parse_config({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "hidden_size": 64})
    assert "\n" not in str(info.value)
    from safetensors.torch import save_file

    config = load_config("tiny-llama")
    tensors = seeded_state_dict(config, seed=0)
    (tmp_path / "config.json").write_text(json.dumps(config.model_dump(exclude_none=True)))
    missing = "model.layers.1.self_attn.v_proj.weight"
    save_file({k: v for k, v in tensors.items() if k != missing}, tmp_path / "model.safetensors")
    with pytest.raises(ModelInputError, match=f"'{missing}' is missing") as info:
        load_weights(tmp_path)
    assert "\n" not in str(info.value)
    wrong = "model.layers.0.mlp.down_proj.weight"
    save_file({**tensors, wrong: torch.zeros(128, 100)}, tmp_path / "model.safetensors")
    with pytest.raises(ModelInputError, match=rf"'{wrong}' has shape \[128, 100\], expected \[128, 256\]"):
        load_weights(tmp_path)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-moe"])
def test_safetensors_directory_gives_the_seeded_tokens(name, tmp_path):
    from safetensors.torch import save_file

    config = load_config(name)
    tensors = seeded_state_dict(config, seed=3)
    names = sorted(tensors)
    (tmp_path / "config.json").write_text(json.dumps(config.model_dump(exclude_none=True)))
    # Two shards, as large checkpoints come.
    save_file({k: tensors[k] for k in names[::2]}, tmp_path / "model-00001-of-00002.safetensors")
    save_file({k: tensors[k] for k in names[1::2]}, tmp_path / "model-00002-of-00002.safetensors")
    loaded_config, loaded = load_weights(tmp_path)
    assert loaded_config == config
    reqs = make_requests(config, requests=2, new_tokens=4, seed=0, fillers=0)
    ops = reference_ops()
    seeded, _ = run_plan(Decoder(config, seeded_weights(config, seed=3), ops), reqs, alone_plan(reqs), "cpu")
    from_dir, _ = run_plan(Decoder(config, loaded, ops), reqs, alone_plan(reqs), "cpu")
    for r in reqs:
        assert len(seeded[r.id].tokens) == 4
        assert seeded[r.id].tokens == from_dir[r.id].tokens
        assert seeded[r.id].same_logprobs(from_dir[r.id])


def test_int8_activations_and_the_torch_kernel_sets():
    config = load_config("tiny-llama").model_copy(update={"agentloop_int8_activations": True})
    weights = seeded_weights(config, seed=0)
    recorder = Recorder()
    reqs = make_requests(config, requests=1, new_tokens=2, seed=0, fillers=0)
    run_plan(Decoder(config, weights, reference_ops(), recorder), reqs, alone_plan(reqs), "cpu")
    sites = [(r.site, r.task) for r in recorder.records[(0, 0)]]
    assert ("layer0.qkv_proj.quant", "per_token_quant_int8") in sites
    assert ("lm_head.quant", "per_token_quant_int8") not in sites
    eager, compiled = eager_ops("cpu"), compiled_ops()
    assert set(eager) == set(compiled) == set(eager.sources)
    assert eager.sources["linear"] == "baseline torch_linear on cpu"
    report = check_model(config, weights, {"eager": eager}, requests=2, new_tokens=2, seed=0, fillers=2,
                         prompt_lens=(2, 3))
    (result,) = report.sets
    assert not result.error and result.max_batch >= 2 and result.batched_tokens_per_s > 0
    for check in result.requests:  # CPU GEMMs are free to round a row by its batch: found if so
        assert check.reproducible or check.divergence is not None


def test_twin_runners_give_the_alone_runs_of_a_caged_set(monkeypatch):
    """`check_sets(twin_runs=True)`: two more copies of the set's runners, for the alone schedule's
    second run and the batched schedule's runs, the first of them beside the alone runs (caged:
    Triton's interpreter is not for two threads of one process); the report is the one of the runs
    one after the other (the set's eager linear makes requests differ, in both)."""
    from agentloop.model import session

    made = []

    class Counted(session.CagedSet):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(len(self.copies))

    monkeypatch.setattr(session, "CagedSet", Counted)
    spec = f"torch-rms=files:rms_norm={Path(__file__).parent / 'fixtures' / 'rms_norm' / 'torch_only.py'}"
    reports = {twin: session.check_sets([spec], "tiny-llama", requests=2, new_tokens=2, twin_runs=twin)
               for twin in (False, True)}
    assert made == [1, 3]  # one set of runners, then three copies of them
    alone, twinned = (reports[t].sets[0] for t in (False, True))
    assert not twinned.error and twinned.nondeterministic == 0, twinned
    assert twinned.requests and not twinned.sandbox_findings
    # No finder's runs (recorded at once); the first batched run went beside the alone runs.
    assert list(twinned.phases) == ["runners", "alone", "alone runs", "first batched run", "batched", "stop"]
    assert list(alone.phases) == ["runners", "alone", "alone runs", "batched", "stop"]
    assert twinned.phases["alone"] >= max(twinned.phases["alone runs"], twinned.phases["first batched run"])
    assert [c.model_dump() for c in twinned.requests] == [c.model_dump() for c in alone.requests]


def _same_recordings(a: Recorder, b: Recorder) -> None:
    assert a.records.keys() == b.records.keys()
    for key, recs in a.records.items():
        others = b.records[key]
        assert [(r.site, r.task, r.layer, r.context) for r in recs] == \
            [(r.site, r.task, r.layer, r.context) for r in others], key
        for r, o in zip(recs, others, strict=True):
            assert all(torch.equal(x, y) for x, y in zip(r.outputs, o.outputs, strict=True)), (key, r.site)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-moe"])
def test_requests_served_alone_in_step_give_what_they_give_one_after_another(name):
    """`run_alone` serves the alone plan's requests in step (each op call still one request's
    alone); every request gets the tokens, logprobs and recorded op outputs, batch contexts
    included, of the plan run one step after another."""
    config = load_config(name)
    weights = seeded_weights(config, seed=0)
    reqs = make_requests(config, requests=3, new_tokens=3, seed=0, fillers=2, prompt_lens=(1, 4))
    assert len({len(r.prompt) for r in reqs if r.reported}) > 1  # lanes that end at different rounds
    made: list[int] = []

    def counting(op):
        def call(*args):
            made.append(1)
            return op(*args)

        def start_lanes(arg_lists):
            made.append(len(arg_lists))
            results = [op(*args) for args in arg_lists]
            return lambda: results

        call.start_lanes = start_lanes
        return call

    counted = {task: counting(op) for task, op in reference_ops().items()}
    one_by_one, in_step = Recorder(), Recorder()
    expected, _ = run_plan(Decoder(config, weights, counted, one_by_one), reqs, alone_plan(reqs), "cpu")
    sequential = sum(made)  # op calls (a MoE layer's experts go as fans: several calls a request)
    made.clear()
    runs = [Decoder(config, weights, counted, in_step), Decoder(config, weights, counted)]
    (got, again), _ = run_alone(runs, reqs, "cpu")
    # Both runs' calls, most of them together: the two runs' requests on the same ops share rounds.
    assert sum(made) == 2 * sequential and len(made) < sequential / 2
    reported = [r.id for r in reqs if r.reported]
    for i in reported:
        assert got[i].tokens == expected[i].tokens and got[i].same_logprobs(expected[i])
        assert again[i].tokens == expected[i].tokens and again[i].same_logprobs(expected[i])
    _same_recordings(one_by_one, in_step)


def test_a_moe_layers_experts_go_to_an_op_together():
    """The experts of a MoE layer are independent: their projections and activations go to the op
    as fans (one request per stage for a caged kernel), each still a call of its own on the rows
    routed to it, and give what the calls one after another give, recordings included."""
    config = load_config("tiny-moe")
    weights = seeded_weights(config, seed=0)
    reqs = make_requests(config, requests=3, new_tokens=3, seed=0, fillers=2, prompt_lens=(1, 4))
    plan = batched_plan(reqs, seed=0)
    requests_to: dict[str, list[int]] = {}

    def counting(task, op):
        def start_lanes(arg_lists):
            requests_to.setdefault(task, []).append(len(arg_lists))
            results = [op(*args) for args in arg_lists]
            return lambda: results
        call = lambda *args: (requests_to.setdefault(task, []).append(1), op(*args))[1]  # noqa: E731
        call.start_lanes = start_lanes
        return call

    plain, fanned = Recorder(), Recorder()
    expected, _ = run_plan(Decoder(config, weights, reference_ops(), plain), reqs, plan, "cpu")
    counted = {task: counting(task, op) for task, op in reference_ops().items()}
    got, _ = run_plan(Decoder(config, weights, counted, fanned), reqs, plan, "cpu")
    for r in reqs:
        assert got[r.id].tokens == expected[r.id].tokens and got[r.id].same_logprobs(expected[r.id])
    _same_recordings(plain, fanned)
    experts = config.num_local_experts
    assert max(requests_to["linear"]) == experts and max(requests_to["silu_and_mul"]) == experts
    assert max(requests_to["rms_norm"]) == 1 and max(requests_to["moe_topk_softmax"]) == 1


def test_runs_on_copies_of_the_kernels_go_out_of_phase():
    """`run_lanes`: the alone schedule's two runs, on ops that reach different channels (copies
    of a set's caged kernels), each send their next round as soon as their own replies are in,
    not after the other's; runs whose ops reach a common channel stay one cohort, with one
    request out on a channel at a time; the results are those of the calls one after another."""
    config = load_config("tiny-llama")
    weights = seeded_weights(config, seed=0)
    reqs = make_requests(config, requests=2, new_tokens=2, seed=0, fillers=0, prompt_lens=(1, 3))
    events: list[tuple[str, str]] = []

    def copy(name: str, channels: dict[str, object]) -> dict:
        out = {}
        for task, op in reference_ops().items():
            via = channels[task]

            def start_lanes(arg_lists, op=op, via=via):
                assert id(via) not in out_on, "two requests out on one channel"
                out_on.add(id(via))
                events.append(("send", name))
                results = [op(*args) for args in arg_lists]

                def finish():
                    out_on.discard(id(via))
                    events.append(("read", name))
                    return results
                return finish

            def call(*args, op=op):
                return op(*args)
            call.start_lanes, call.channel = start_lanes, via
            out[task] = call
        return out

    def runners() -> dict[str, object]:
        return {task: object() for task in reference_ops()}

    def lanes(ops_by_run):
        made = []
        for ops in ops_by_run:
            for r in reqs:
                steps = [s for s in alone_plan(reqs) if s.rows[0].request == r.id]
                made.append((serve_plan(Decoder(config, weights, ops), [r], steps, "cpu"), ops))
        return made

    def check(values):
        for k, got in enumerate(values):
            r = reqs[k % len(reqs)]
            assert got[r.id].tokens == expected[r.id].tokens and got[r.id].same_logprobs(expected[r.id])

    out_on: set[int] = set()
    expected, _ = run_plan(Decoder(config, weights, reference_ops()), reqs, alone_plan(reqs), "cpu")
    check(run_lanes(lanes([copy("a", runners()), copy("b", runners())])))
    # Out of phase: after the first round of each, "a" sends its next before "b"'s replies are read.
    assert events[:4] == [("send", "a"), ("send", "b"), ("read", "a"), ("send", "a")]
    assert events.count(("send", "a")) == events.count(("send", "b"))

    events.clear()
    shared = runners()  # two mappings over the same runners: one cohort, in step
    check(run_lanes(lanes([copy("a", shared), copy("b", shared)])))
    assert events[:2] == [("send", "a"), ("read", "a")]  # "b"'s calls wait for "a"'s channel
    assert events.count(("send", "a")) == events.count(("send", "b"))


def test_a_caged_sets_requests_served_alone_in_step_share_round_trips(monkeypatch):
    """The calls requests make in step reach a caged kernel in one `calls` request per round, and
    give what its calls one after another give."""
    from agentloop.model.caged import CagedSet
    from agentloop.model.decoder import required_ops
    from agentloop.model.set_spec import parse_set
    from gates.judge import client

    config = load_config("tiny-llama")
    weights = seeded_weights(config, seed=0)
    reqs = make_requests(config, requests=3, new_tokens=2, seed=0, fillers=0, prompt_lens=(2, 3))
    spec = f"caged=files:rms_norm={Path(__file__).parent / 'fixtures' / 'rms_norm' / 'torch_only.py'}"
    tasks = required_ops(config)
    sent: list[str] = []
    send = client.wire.send
    monkeypatch.setattr(client.wire, "send", lambda sock, header, fds=(): (sent.append(header["op"]),
                                                                          send(sock, header, fds))[1])
    with CagedSet(parse_set(spec, tasks, "cpu"), tasks, "cpu") as caged:
        assert caged.ops.sources["rms_norm"].startswith("file")
        expected, _ = run_plan(Decoder(config, weights, caged.ops), reqs, alone_plan(reqs), "cpu")
        one_by_one = sent.count("call")
        (got,), _ = run_alone([Decoder(config, weights, caged.ops)], reqs, "cpu")
        findings = caged.runners[0].take_findings()
    steps = max(r.steps for r in reqs)  # rms_norm runs once a step (layer 0), each request alone
    assert one_by_one == sum(r.steps for r in reqs) and sent.count("calls") == steps
    assert sent.count("call") == one_by_one and not findings
    for r in reqs:
        assert got[r.id].tokens == expected[r.id].tokens and got[r.id].same_logprobs(expected[r.id])
