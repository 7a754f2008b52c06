"""What environment evaluation processes get, and scrubbing secrets out of text.

Judge workers and runners start from an allow-list, never from the user's whole environment:
provider keys and tokens stay in the orchestrator. `redact` is the second line of defence: it
replaces the values of secret-looking variables of this process's environment in any text that
leaves the gates (feedback for an LLM, reports, JSON).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)
JUDGE_ALLOWED = re.compile(
    r"^(PATH|HOME|USER|LOGNAME|LANG|LANGUAGE|LC_\w+|TZ|TERM|TMPDIR|SHELL|VIRTUAL_ENV|CONDA_PREFIX"
    r"|PYTHON\w*|CUDA_\w+|NVIDIA_\w+|NCCL_\w+|TRITON_\w+|TORCH\w*|OMP_\w+|MKL_\w+|KMP_\w+|GOMP_\w+"
    r"|OPENBLAS_\w+|NVPL_\w+|LD_LIBRARY_PATH|CC|CXX|XDG_\w+|AGENTLOOP_TASKS|AGENTLOOP_RUNNER_SHARED_DIR"
    r"|AGENTLOOP_KERNEL_CACHE|AGENTLOOP_ARENA)$")
RUNNER_ALLOWED = re.compile(
    r"^(PATH|LANG|LANGUAGE|LC_\w+|TZ|CUDA_\w+|NVIDIA_\w+|TRITON_\w+|OMP_\w+|MKL_\w+|KMP_\w+|GOMP_\w+"
    r"|OPENBLAS_\w+|NVPL_\w+|LD_LIBRARY_PATH|CC|CXX)$")
MIN_SECRET = 6
RUNNER_USER = "agentloop-runner"
"""The user name a runner sees (its uid has no passwd entry: `getpass.getuser()` reads this)."""


def _allowed(environ: Mapping[str, str], pattern: re.Pattern) -> dict[str, str]:
    return {k: v for k, v in environ.items() if pattern.match(k) and not SECRET_NAME.search(k)}


def judge_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of a judge worker: toolchain and device settings, no secrets."""
    return _allowed(environ, JUDGE_ALLOWED)


def runner_environ(environ: Mapping[str, str], workdir: str, device: str) -> dict[str, str]:
    """The environment of a runner: device and thread settings only, every cache and home in
    its work directory."""
    env = _allowed(environ, RUNNER_ALLOWED)
    env.update(HOME=workdir, TMPDIR=workdir, USER=RUNNER_USER, LOGNAME=RUNNER_USER,
               TRITON_CACHE_DIR=os.path.join(workdir, ".triton"),
               XDG_CACHE_HOME=os.path.join(workdir, ".cache"), PYTHONDONTWRITEBYTECODE="1",
               PYTHONUNBUFFERED="1", TORCHINDUCTOR_CACHE_DIR=os.path.join(workdir, ".inductor"))
    # Autotuning results go to the Triton cache with the compiled kernels, which the judge keeps
    # for the candidate's next runners (gates.judge.kernel_cache): a fresh runner then does not time
    # every configuration again (seconds per stage for an autotuned kernel on a GPU; Triton's
    # interpreter never caches them).
    env.setdefault("TRITON_CACHE_AUTOTUNING", "1")
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    environ = os.environ if environ is None else environ
    return sorted({v for k, v in environ.items() if SECRET_NAME.search(k) and len(v) >= MIN_SECRET},
                  key=len, reverse=True)


def redact(text: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """`text` with every secret value of the environment replaced by "[redacted]"."""
    if not text:
        return text
    for value in secret_values(environ):
        if value in text:
            text = text.replace(value, "[redacted]")
    return text
