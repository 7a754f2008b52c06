"""Command-line conventions and the safety of `run --resume` (no loop runs here: every case is
refused, or answered, before the first worker starts)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import yaml
from typer.testing import CliRunner

from agentloop.cli import app

CAMPAIGN = {"name": "c", "tasks": ["rms_norm"], "styles": ["refine"], "modes": ["baseline"],
            "model": "replay", "budget": {"iterations": 1}, "device": "cpu"}


def _cli(*args) -> object:
    return CliRunner().invoke(app, [str(a) for a in args])


def _run_dir(tmp_path: Path, **campaign) -> Path:
    """A run directory as `agentloop run` leaves it before its first loop ends."""
    from agentloop.campaign.file import parse_campaign
    from agentloop.campaign.run import campaign_dump
    from agentloop.results.store import Store

    out = tmp_path / "run"
    out.mkdir()
    Store(out / "results.sqlite").close()
    dump = campaign_dump(parse_campaign({**CAMPAIGN, **campaign}))
    (out / "campaign.yaml").write_text(yaml.safe_dump(dump, sort_keys=False))
    return out


def test_resume_refuses_a_directory_without_a_run(tmp_path):
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(CAMPAIGN))
    for args in (["--resume", "--out", tmp_path / "empty"],
                 [tmp_path / "c.yaml", "--resume", "--out", tmp_path]):
        result = _cli("run", *args)
        assert result.exit_code == 2 and "holds no run to resume" in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "empty").exists()


def test_resume_refuses_another_campaign_unless_told(tmp_path):
    out = _run_dir(tmp_path)
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**CAMPAIGN, "seed": 7}))
    saved = (out / "campaign.yaml").read_text()
    result = _cli("run", other, "--resume", "--out", out)
    assert result.exit_code == 2 and "another campaign (it differs in seed)" in result.output
    assert "agentloop run --resume --out" in result.output
    assert (out / "campaign.yaml").read_text() == saved  # the run's campaign is untouched


def test_resume_takes_the_runs_own_campaign(tmp_path, monkeypatch):
    out = _run_dir(tmp_path, seed=5)
    seen = {}

    def fake_run(campaign, run_dir, **kwargs):
        seen.update(campaign=campaign, kwargs=kwargs)
        raise SystemExit(0)

    monkeypatch.setattr("agentloop.campaign.run.run_campaign", fake_run)
    _cli("run", "--resume", "--out", out)
    assert seen["campaign"].seed == 5 and seen["kwargs"]["resume"] is True
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump({**CAMPAIGN, "seed": 9}))
    _cli("run", changed, "--resume", "--out", out, "--campaign-changed")
    assert seen["campaign"].seed == 9 and seen["kwargs"]["campaign_changed"] is True


def test_run_needs_a_campaign_or_resume(tmp_path):
    result = _cli("run")
    assert result.exit_code == 2 and "give a campaign file" in result.output
    result = _cli("run", "--resume")
    assert result.exit_code == 2 and "--resume --out DIR" in result.output


def test_out_pointing_at_a_file_is_one_line(tmp_path):
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(CAMPAIGN))
    result = _cli("run", tmp_path / "c.yaml", "--out", tmp_path / "c.yaml")
    assert result.exit_code == 2 and "is a file, not a directory" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_version_short_help_and_flags_without_metavar():
    from agentloop.cli import version

    result = _cli("--version")
    assert result.exit_code == 0 and result.output.strip() == f"agentloop {version()}"
    result = _cli("audit", "-h")
    assert result.exit_code == 0 and "--json" in result.output
    assert "<bool>" not in result.output and "BOOLEAN" not in result.output
    assert "-v, --verbose" in _cli("-h").output and "-q, --quiet" in _cli("-h").output


def test_quiet_and_verbose_contradict():
    result = _cli("-v", "-q", "tasks")
    assert result.exit_code == 2 and "contradict" in result.output


def test_task_names_are_never_cut(monkeypatch):
    from gates.contract import load_suite

    result = _cli("tasks")
    assert result.exit_code == 0
    for name in load_suite():
        assert name in result.output


def test_audit_rejects_a_negative_timeout(tmp_path):
    kernel = tmp_path / "k.py"
    kernel.write_text("def rms_norm(x, weight, eps):\n    return x\n")
    result = _cli("audit", kernel, "--task", "rms_norm", "--timeout", "-1")
    assert result.exit_code == 2 and "positive number of seconds" in result.output


def test_error_paths_answer_fast(tmp_path):
    # Measured as a user meets them: a new process, the heavy modules not imported.
    for args in (["run", str(tmp_path / "missing.yaml")], ["report", str(tmp_path)],
                 ["run", "--resume", "--out", str(tmp_path / "none")]):
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "agentloop.cli", *args], capture_output=True, text=True)
        seconds = time.monotonic() - start
        assert done.returncode == 2, done.stderr
        assert seconds < 2.5, f"{args}: {seconds:.1f} s"
        assert "torch" not in done.stderr


def test_audit_stops_at_the_first_time_out():
    import json

    hang = Path(__file__).parent / "fixtures" / "rms_norm" / "hang.py"
    start = time.monotonic()
    result = _cli("audit", hang, "--task", "rms_norm", "--device", "cpu", "--timeout", "3", "--json")
    seconds = time.monotonic() - start
    verdict = json.loads(result.output)
    assert result.exit_code == 1 and verdict["verdict"] == "reject"
    # static passes or not, dynamic times out, correctness never runs: one time-out, not two.
    assert [g["gate"] for g in verdict["gates"]] == ["static", "dynamic"]
    assert verdict["gates"][-1]["error"].startswith("timed out after 3 s")
    assert seconds < 3 + 30
