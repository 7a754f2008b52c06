"""Campaign files: the shipped ones, one-line errors, and `agentloop run`'s refusals."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from agentloop.campaign.file import CampaignError, load_campaign, parse_campaign
from agentloop.cli import app
from gates.contract import load_suite, tasks_dir

CAMPAIGNS = tasks_dir() / "campaigns"
GOOD = {"name": "t", "tasks": ["rms_norm"], "budget": {"iterations": 2}}


def test_demo_campaign_is_small_offline_and_covers_every_cell():
    demo = load_campaign(CAMPAIGNS / "demo.yaml")
    assert demo.model == "replay" and demo.device == "cpu"
    assert len(demo.task_names()) >= 4 and demo.budget.iterations <= 3
    assert sorted(c.id for c in demo.cells()) == sorted(
        f"{s}/{m}/replay" for s in ("refine", "evolve", "team") for m in ("baseline", "bi-aware"))
    for name in demo.task_names():  # replay needs a corpus to answer from
        assert list((tasks_dir() / name / "candidates").glob("*.py")), name


def test_full_campaign_is_the_whole_suite_on_a_gpu():
    full = load_campaign(CAMPAIGNS / "full.yaml")
    assert full.task_names() == list(load_suite())
    assert len(full.task_names()) == 13 and len(full.cells()) == 6
    assert (full.model, full.device, full.budget.iterations) == ("replay", "cuda", 3)


def test_model_override_replaces_every_role():
    campaign = parse_campaign({**GOOD, "roles": {"planner": "openai:big"}})
    assert campaign.role_model("planner") == "openai:big" and campaign.role_model("coder") == "replay"
    over = campaign.with_model("anthropic:m")
    assert {over.role_model(r) for r in ("planner", "coder", "reviewer")} == {"anthropic:m"}
    assert {c.provider for c in over.cells()} == {"anthropic:m"}


def test_eval_section_reaches_the_cache_key():
    a = parse_campaign({**GOOD, "eval": {"stage_timeout_s": {"dynamic": 10}}}).eval_settings()
    b = parse_campaign(GOOD).eval_settings()
    assert a.stage_timeout_s["dynamic"] == 10 and a.stage_timeout_s["compile"] == b.stage_timeout_s["compile"]
    assert a.key("h", "rms_norm") != b.key("h", "rms_norm")


def test_cache_key_changes_with_the_evaluating_code(monkeypatch):
    """A resumed run whose gates or benchmark changed since evaluates its kernels again."""
    from agentloop.evaluation import stages as evaluation

    settings = parse_campaign(GOOD).eval_settings()
    before = settings.key("h", "rms_norm")
    assert settings.key("h", "rms_norm") == before and len(evaluation.evaluation_code_version()) == 16
    monkeypatch.setattr(evaluation, "evaluation_code_version", lambda: "another-version")
    assert settings.key("h", "rms_norm") != before


@pytest.mark.parametrize("change, words", [
    ({"colour": "red"}, ["colour", "unknown key"]),
    ({"styles": ["refine", "swarm"]}, ["styles[1]", "swarm"]),
    ({"modes": ["baseline", "baseline"]}, ["modes", "listed twice"]),
    ({"tasks": ["rms_norm", "fft"]}, ["tasks", "fft", "known tasks"]),
    ({"tasks": "some"}, ["tasks"]),
    ({"budget": {"iterations": 0}}, ["budget.iterations"]),
    ({"eval": {"stage_timeout_s": {"link": 3}}}, ["eval.stage_timeout_s", "link"]),
    ({"device": "tpu"}, ["device", "tpu"]),
    ({"name": "a b"}, ["name"]),
])
def test_errors_are_one_line_naming_the_key(change, words):
    with pytest.raises(CampaignError) as err:
        parse_campaign({**GOOD, **change}, "c.yaml")
    message = str(err.value)
    assert "\n" not in message and message.startswith("c.yaml: ")
    for w in words:
        assert w in message, message


def test_unreadable_files(tmp_path):
    with pytest.raises(CampaignError, match="cannot read"):
        load_campaign(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [x\n")
    with pytest.raises(CampaignError, match="not valid YAML"):
        load_campaign(bad)


def _cli(*args):
    return CliRunner().invoke(app, ["run", *map(str, args)])


def test_run_refuses_bad_input_with_exit_2(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    good = tmp_path / "c.yaml"
    good.write_text(yaml.safe_dump(GOOD))
    result = _cli(tmp_path / "missing.yaml")
    assert result.exit_code == 2 and "cannot read campaign file" in result.output
    result = _cli(good, "--model", "opnai:gpt", "--out", tmp_path / "r")
    assert result.exit_code == 2 and "did you mean 'openai'" in result.output
    result = _cli(good, "--model", "openai:gpt-4o", "--out", tmp_path / "r")
    assert result.exit_code == 2 and "OPENAI_API_KEY" in result.output
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "results.sqlite").write_text("")
    result = _cli(good, "--out", tmp_path / "r")
    assert result.exit_code == 2 and "--resume" in result.output
