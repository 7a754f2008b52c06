"""The model check's serving process (`agentloop/model/serving.py`): a set's kernels imported in
a caged child of their own, timed by the parent, its tokens compared with the caged check's."""

from __future__ import annotations

from pathlib import Path

from agentloop.model.config import load_config
from agentloop.model.schedule import make_requests
from agentloop.model.serving import measure_serving
from agentloop.model.session import check_sets, render_details

FIXTURES = Path(__file__).parent / "fixtures" / "rms_norm"


def test_a_sets_kernels_are_timed_in_a_serving_process_and_give_the_checks_tokens():
    spec = f"torch-rms=files:rms_norm={FIXTURES / 'torch_only.py'}"
    report = check_sets([spec], "tiny-llama", requests=2, new_tokens=2, serving=True)
    s = report.sets[0]
    assert s.serving is not None and not s.serving.error, s.serving
    assert s.serving.tokens_match is True and s.serving.tokens == 2 * 2 + sum(
        r.new_tokens for r in make_requests(load_config("tiny-llama"), 2, 2, 0) if not r.reported)
    assert s.serving.tokens_per_s > 0
    assert any("serving process:" in line and "as in the check" in line for line in render_details(report))


def test_tokens_other_than_the_checks_are_reported_not_believed():
    cfg = load_config("tiny-llama")
    reqs = make_requests(cfg, 1, 2, 0, fillers=0)
    got = measure_serving("eager", {}, "tiny-llama", seed=0, requests=reqs, plan_seed=0, device="cpu",
                          vocab=cfg.vocab_size, expected={0: [-1, -1]})
    assert not got.error and got.tokens_match is False


def test_the_serving_process_is_caged(tmp_path):
    secret = Path(__file__).resolve().parents[1] / "README.md"  # inside the project: hidden
    kernel = (FIXTURES / "torch_only.py").read_text() + f"\nopen({str(secret)!r}).read()\n"
    cfg = load_config("tiny-llama")
    reqs = make_requests(cfg, 1, 1, 0, fillers=0)
    got = measure_serving("eager", {"rms_norm": kernel}, "tiny-llama", seed=0, requests=reqs, plan_seed=0,
                          device="cpu", vocab=cfg.vocab_size)
    assert got.error and "README.md" in got.error and got.tokens_per_s == 0


def test_served_only_times_each_set_without_a_check_and_compares_no_tokens():
    from agentloop.model.session import serve_sets

    spec = f"torch-rms=files:rms_norm={FIXTURES / 'torch_only.py'}"
    got = serve_sets(["eager", spec], "tiny-llama", requests=1, new_tokens=2)
    assert list(got) == ["eager", "torch-rms"]
    for speed in got.values():
        assert not speed.error and speed.tokens_per_s > 0 and speed.tokens_match is None


def test_the_figure_is_the_median_of_rounds_one_of_them_the_checks_requests():
    """Every round is timed; the check's requests are one of them, at a place the child cannot
    tell, so a kernel cannot be right only in the compared round and fast in the others."""
    cfg = load_config("tiny-llama")
    reqs = make_requests(cfg, 1, 2, 0, fillers=0)
    got = measure_serving("eager", {}, "tiny-llama", seed=0, requests=reqs, plan_seed=0, device="cpu",
                          vocab=cfg.vocab_size, rounds=3)
    assert not got.error and len(got.rounds) == 3 and all(t > 0 for t in got.rounds)
    assert got.seconds == sorted(got.rounds)[1]
    checked = check_sets(["eager"], "tiny-llama", requests=1, new_tokens=2, serving=True).sets[0].serving
    assert checked.tokens_match is True and len(checked.rounds) == 5
