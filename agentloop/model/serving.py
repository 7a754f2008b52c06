"""The end-to-end batch-invariance tax: a kernel set's tokens per second under continuous batching
with its kernels in the serving process, as an engine would run them — not behind the model
check's cage, whose crossing per op call (about 1.3 ms on the H200) is all its figure shows.

The serving process is a child of its own, never the judge's: `python -I` with a runner's
environment (no secrets). It imports torch, Triton and the decoder and draws the model's weights
first (trusted code only), then enters the runner's cage (`gates.runner.cage`: the project,
homes and temporary folders hidden, no network, limits), and only then imports the set's kernel
files from its work directory. It serves a warm-up batch of other prompts, says "ready", and on
each "go" serves a batch of requests whose prompts it has not seen before and sends back their
tokens. The parent times each round from "go" to that answer itself: ROUNDS rounds of the same
shapes, one of them (at a place drawn per measurement, which the child cannot tell) the check's
requests, whose tokens it compares with those the caged check produced for the same schedule;
the figure is the median round. No figure of the child's own is believed, and a run whose tokens
differ is reported as such rather than as a speed.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping

from pydantic import BaseModel

from agentloop.model.schedule import Request

WARM_SEED_OFFSET = 7919
"""The warm-up's and the other rounds' prompts are the requests' shifted by multiples of this:
the same shapes' kernels compile, but each round's prompts reach the child only with its "go"."""
ROUNDS = 5
"""Timed rounds of the batched schedule (one batch of 16 x 32 tokens takes a quarter of a second on
the H200: one round alone is noise)."""
BOOT = ("import json, sys; sys.path[:] = json.loads(sys.argv[2])['sys_path']; "
        "from agentloop.model.serving import child_main; child_main()")
"""`python -I` ignores PYTHONPATH: the parent's path is set before agentloop is imported (on a
machine where the project is on PYTHONPATH, not installed)."""


class ServingSpeed(BaseModel):
    tokens_per_s: float = 0.0
    seconds: float = 0.0
    """The median round's seconds."""
    tokens: int = 0
    """Tokens one round generates."""
    rounds: list[float] = []
    """Every timed round's seconds, in order."""
    tokens_match: bool | None = None
    """The child's tokens equal the caged check's batched tokens (None: none to compare)."""
    error: str = ""


def measure_serving(torch_set: str | None, kernels: Mapping[str, str], config: str, *, seed: int,
                    requests: list[Request], plan_seed: int, device: str, vocab: int,
                    expected: Mapping[int, list[int]] | None = None, timeout: float = 600.0,
                    rounds: int = ROUNDS) -> ServingSpeed:
    """Serve `requests` continuously batched in a caged child, timed in `rounds` rounds (one of
    them these requests, the others theirs with shifted prompts). The ops: the torch set
    `torch_set` ("eager", "compiled", "reference"; None: eager) for every task not in `kernels`
    (task -> kernel source)."""
    from gates.judge.environment import runner_environ
    from gates.judge.runner_process import destroy, hidden_paths, keep_paths, next_uid
    from gates.runner import wire

    workdir = tempfile.mkdtemp(prefix="serving-")
    os.chmod(workdir, 0o700)
    os.makedirs(os.path.join(workdir, "kernels"))
    for task, code in kernels.items():
        with open(os.path.join(workdir, "kernels", f"{task}.py"), "w") as f:
            f.write(code)
    uid = next_uid() if os.geteuid() == 0 else -1
    cfg = {"config": os.path.abspath(config) if os.path.exists(config) else config, "seed": seed,
           "device": "cpu" if device == "cpu" else "cuda", "torch_set": torch_set or "eager",
           "kernels": sorted(kernels), "workdir": workdir, "uid": uid,
           "hide": hidden_paths([]), "keep": keep_paths(), "plan_seed": plan_seed,
           "sys_path": [os.path.abspath(p) if p in ("", ".") else p for p in sys.path]}
    parent, child = socket.socketpair()
    env = runner_environ(os.environ, workdir, device)
    marker = f"{os.getpid()}-{os.urandom(8).hex()}"
    env["AGENTLOOP_RUNNER"] = marker
    log_path = os.path.join(workdir, "serving.log")
    with open(log_path, "wb") as log:
        argv = [sys.executable, "-I", "-B", "-c", BOOT, str(child.fileno()), json.dumps(cfg)]
        proc = subprocess.Popen(argv, pass_fds=(child.fileno(),), cwd=workdir, env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    child.close()
    parent.settimeout(timeout)
    try:
        def shifted(k: int) -> list[dict]:
            return [r.model_copy(update={"prompt": [(t + k * WARM_SEED_OFFSET) % vocab for t in r.prompt]})
                    .model_dump() for r in requests]

        wire.send(parent, {"op": "warm", "requests": shifted(1)})
        ready = wire.recv(parent)[0]
        if ready.get("op") != "ready":
            return ServingSpeed(error=f"the serving process failed: {str(ready.get('error'))[:300]}")
        checked = secrets.randbelow(rounds)
        times, got = [], {}
        for k in range(rounds):
            start = time.perf_counter()
            wire.send(parent, {"op": "go", "requests": shifted(0) if k == checked else shifted(k + 2)})
            done = wire.recv(parent)[0]
            times.append(time.perf_counter() - start)
            if done.get("op") != "done":
                return ServingSpeed(error=f"the serving process failed: {str(done.get('error'))[:300]}")
            if k == checked:
                got = {int(k): [int(t) for t in v] for k, v in dict(done.get("tokens", {})).items()}
        seconds = statistics.median(times)
        tokens = sum(r.new_tokens for r in requests)
        match = None if expected is None else all(got.get(i) == list(t) for i, t in expected.items())
        return ServingSpeed(tokens_per_s=tokens / seconds if seconds > 0 else 0.0, seconds=seconds,
                            tokens=tokens, rounds=times, tokens_match=match)
    except (OSError, wire.WireError, ValueError, TypeError) as exc:
        try:
            with open(log_path, "rb") as f:
                lines = f.read()[-4096:].decode(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        tail = f"; its last line: {lines[-1][:300]}" if lines else ""
        return ServingSpeed(error=f"the serving process failed ({type(exc).__name__}: {exc}){tail}")
    finally:
        destroy(proc, parent, workdir, uid, marker)


def child_main() -> None:
    """The serving process (see the module's text)."""
    fd, cfg = int(sys.argv[1]), json.loads(sys.argv[2])
    sock = socket.socket(fileno=fd)
    from gates.runner import wire

    try:
        import torch
        import triton  # noqa: F401 - imported before the cage, as a runner does

        from agentloop.model.decoder import Decoder, required_ops
        from agentloop.model.kernel_sets import torch_ops
        from agentloop.model.schedule import batched_plan, run_plan
        from agentloop.model.weights import load_model
        from gates.runner import cage, loader

        device = cfg["device"]
        config, weights = load_model(cfg["config"], device, cfg["seed"])
        tasks = tuple(required_ops(config))
        base = torch_ops(cfg["torch_set"], device, tasks)
        from gates.contract import get_task

        entries = {task: get_task(task).entry for task in cfg["kernels"]}
        cage.enter(cfg["workdir"], uid=cfg["uid"], hide=cfg["hide"], keep=cfg["keep"], memory_bytes=None,
                   cpu_seconds=3600, processes=512, file_bytes=1 << 30, open_files=1024)
        os.chdir(cfg["workdir"])
        ops = dict(base)
        for task, entry in entries.items():
            ops[task] = loader.candidate_entry(os.path.join("kernels", f"{task}.py"), entry)[1]

        def serve(message: dict) -> dict:
            reqs = [Request(**r) for r in message["requests"]]
            results, _ = run_plan(Decoder(config, weights, ops), reqs, batched_plan(reqs, cfg["plan_seed"]),
                                  device)
            if device != "cpu":
                torch.cuda.synchronize()
            return {str(i): r.tokens for i, r in results.items()}

        serve(wire.recv(sock)[0])
        wire.send(sock, {"op": "ready"})
        while True:  # until the parent hangs up (`destroy`)
            wire.send(sock, {"op": "done", "tokens": serve(wire.recv(sock)[0])})
    except BaseException as exc:  # noqa: BLE001 - one line back to the parent
        from gates.runner.loader import describe_exception

        try:
            wire.send(sock, {"op": "error", "error": describe_exception(exc)})
        except OSError:
            pass
