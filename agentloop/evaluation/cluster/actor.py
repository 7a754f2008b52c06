"""The evaluation actor: what runs on a cluster node for the Ray back-end.

One actor owns one GPU (Ray sets its `CUDA_VISIBLE_DEVICES`) or a few CPUs, and holds a local
`agentloop.evaluation.pool.WorkerPool` on them: the same judge workers and caged runners as on one machine,
so the trust boundary stays on the actor's node. The actor itself never imports candidate code;
it receives a candidate as text and hands back a stage's outcome as plain JSON data, which the
driver validates (`StageOutcome`) before it trusts it.

This module imports no Ray: `agentloop.evaluation.cluster.ray_pool` wraps the class with `ray.remote`.
"""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any


def device_name(device: str) -> str:
    """The name of the device an actor owns, found without a CUDA context in the actor (that is
    for its judge workers): nvidia-smi for the GPU Ray gave it, the CPU model on a CPU."""
    if device == "cuda":
        visible = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip()
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", visible],
                                 capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        return out.splitlines()[0].strip() if out else "cuda (unknown GPU)"
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    names = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")]
    return names[0] if names else platform.processor() or platform.machine() or "cpu"


def task_digest(task: Any) -> str:
    """A hash of a task as the gates see it: the driver's and the node's must match."""
    return hashlib.sha256(task.model_dump_json().encode()).hexdigest()[:16]


class EvaluationActor:
    """Evaluates candidate stages on one GPU (or CPU slot) of a cluster node.

    `device`: cpu or cuda; `workers`: judge worker processes (side by side on the GPU, a
    benchmark alone on it); `start_timeout`: seconds a worker may take to start."""

    def __init__(self, device: str, workers: int = 1, start_timeout: float = 300.0) -> None:
        from agentloop.evaluation.pool import WorkerPool

        self.device = device
        self.pool = WorkerPool(device, workers, start_timeout=start_timeout)
        self._tasks: dict[str, Any] = {}

    def info(self) -> dict[str, Any]:
        """Once its workers have started: who and where the actor is, and which evaluating code
        it runs (the driver refuses an actor whose code differs from its own: the evaluation
        cache is keyed by the driver's)."""
        from agentloop.evaluation.stages import evaluation_code_version

        workers = self.pool.warm_up()
        node = ""
        try:
            import ray

            node = ray.get_runtime_context().get_node_id()
        except Exception:  # noqa: BLE001 - outside Ray (tests of the class itself)
            pass
        return {"pid": os.getpid(), "host": socket.gethostname(), "node": node, "workers": workers,
                "device": self.device, "device_name": device_name(self.device),
                "code_version": evaluation_code_version()}

    def isolation(self) -> dict[str, Any]:
        """The cage this node's runners put candidates in (`WorkerPool.isolation`)."""
        return self.pool.isolation()

    def evaluate_stage(self, code: str, task_name: str, digest: str, stage: str,
                       settings: dict[str, Any]) -> dict[str, Any]:
        """One stage of one candidate through the actor's worker pool; the outcome as JSON data.
        Raises (a failed call, not a verdict) when this node's task differs from the driver's."""
        from agentloop.evaluation.stages import EvalSettings

        task = self._task(task_name, digest)
        outcome = self.pool.evaluate_stage(code, task, stage, EvalSettings.model_validate(settings))
        return outcome.model_dump(mode="json")

    def _task(self, name: str, digest: str) -> Any:
        from gates.contract import get_task

        if name not in self._tasks:
            self._tasks[name] = get_task(name)
        task = self._tasks[name]
        if task_digest(task) != digest:
            raise RuntimeError(f"task {name} on {socket.gethostname()} differs from the driver's; "
                               "install the same task suite on every node")
        return task

    def close(self) -> None:
        """Stop the workers, after the stages running now."""
        self.pool.close()
