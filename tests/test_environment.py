"""What evaluation processes inherit, and secrets scrubbed from text that leaves the gates."""

from gates.audit import verdict_json
from gates.judge.environment import judge_environ, redact, runner_environ
from gates.verdict import GateResult, Verdict

USER_ENV = {"PATH": "/usr/bin", "HOME": "/root", "OPENAI_API_KEY": "sk-live-123456",
            "CUDA_VISIBLE_DEVICES": "1",
            "ANTHROPIC_AUTH_TOKEN": "tok-987654", "TRITON_API_KEY": "x" * 10, "OPENBLAS_CORETYPE": "Haswell",
            "AWS_SECRET_ACCESS_KEY": "aws-secret-1", "PYTHONPATH": "/src"}


def test_judges_and_runners_get_no_secret_and_runners_only_device_settings():
    judge = judge_environ(USER_ENV)
    assert {"PATH", "HOME", "CUDA_VISIBLE_DEVICES", "OPENBLAS_CORETYPE", "PYTHONPATH"} <= set(judge)
    secrets = {"OPENAI_API_KEY", "ANTHROPIC_AUTH_TOKEN", "TRITON_API_KEY", "AWS_SECRET_ACCESS_KEY"}
    assert not secrets & set(judge)
    runner = runner_environ(USER_ENV, "/tmp/w", "cpu")
    assert runner["HOME"] == runner["TMPDIR"] == "/tmp/w" and runner["TRITON_INTERPRET"] == "1"
    assert "PYTHONPATH" not in runner and not any("sk-live" in v or "tok-" in v for v in runner.values())
    gpu = runner_environ(USER_ENV, "/tmp/w", "cuda")  # autotuning results kept with the kernels
    assert gpu["TRITON_CACHE_AUTOTUNING"] == "1" and "TRITON_INTERPRET" not in gpu
    asked = runner_environ({**USER_ENV, "TRITON_CACHE_AUTOTUNING": "0"}, "/tmp/w", "cuda")
    assert asked["TRITON_CACHE_AUTOTUNING"] == "0"  # the user's own choice stands


def test_secret_values_are_redacted_from_text_and_verdict_json(monkeypatch):
    assert redact("key sk-live-123456 and tok-987654", USER_ENV) == "key [redacted] and [redacted]"
    assert redact("nothing here", USER_ENV) == "nothing here"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-leaked-42424242")
    verdict = Verdict(task="rms_norm", candidate="c.py", verdict="reject", seconds=1.0,
                      gates=[GateResult(gate="dynamic", passed=False,
                                        error="ValueError: sk-leaked-42424242")])
    assert "sk-leaked" not in str(verdict_json(verdict))
