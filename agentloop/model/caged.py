"""A kernel set's ops as the decoder calls them: torch's own ops in this process, every other
kernel (a run's, the archive's, a file, a library entry, the corpus) in a caged runner of its own
(`gates.judge.client.Runner`), called through `RemoteEntry` like the gates call a candidate. This
process never imports a kernel: it hands tensors over and reads back outputs it checks."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentloop.model.config import ModelInputError
from agentloop.model.kernel_sets import KernelSet, torch_ops
from agentloop.model.set_spec import TORCH_KINDS, KernelSetChoice
from gates.contract import get_task

CPU_CALL_DEADLINE_S = 1800.0
"""How long the calls of one model check may take in all before a runner is given up (the CPU
interpreter runs a small model's whole check in a minute or two)."""


class CagedSet:
    """The runners holding one set's untrusted kernels; `ops` is the decoder's mapping. With
    `copies`, as many independent mappings of the same kernels in runners of their own (`twins`:
    the model check's second alone run goes on one at the same time as the first); every
    copy's runners boot at once, before any loads. Use as a context manager: every runner is
    stopped at the end, whatever happened."""

    def __init__(self, choice: KernelSetChoice, tasks: list[str], device: str, copies: int = 1) -> None:
        self.choice, self.device, self.runners = choice, device, []
        self.findings: list[str] = []
        built: dict[str, KernelSet] = {}
        self.copies: list[KernelSet] = []
        try:
            # Every runner of every copy boots in the background at once; loading waits for each in turn.
            caged = [name for name in tasks if choice.choice(name).kind not in TORCH_KINDS]
            booting = [{name: self._boot(name) for name in caged} for _ in range(copies)]
            for runners in booting:
                ops: dict[str, Callable] = {}
                sources: dict[str, str] = {}
                for name in tasks:
                    k = choice.choice(name)
                    if k.kind in TORCH_KINDS:
                        if k.kind not in built:
                            built[k.kind] = torch_ops(k.kind, device, tuple(tasks))
                        ops[name], sources[name] = built[k.kind][name], built[k.kind].sources[name] \
                            if k.origin == k.kind else k.origin
                    else:
                        ops[name], sources[name] = self._caged(name, runners[name], k.code or ""), k.origin
                self.copies.append(KernelSet(ops, sources))
        except BaseException:
            self.close()
            raise
        self.ops = self.copies[0]
        self.twins = self.copies[1:]

    def _boot(self, name: str) -> Any:
        from gates.judge.client import Runner, set_deadline
        from gates.judge.runner_pool import reference_dirs

        set_deadline(CPU_CALL_DEADLINE_S if self.device == "cpu" else 600.0)
        runner = Runner(self.device, reference_dirs=reference_dirs(get_task(name)))
        self.runners.append(runner)
        return runner

    def _caged(self, name: str, runner: Any, code: str) -> Callable:
        from gates.judge.client import CandidateFailure, RemoteEntry

        task = get_task(name)
        try:
            runner.load(code, task.entry)
        except Exception as exc:  # noqa: BLE001 - the kernel's own failure, said in one line
            raise ModelInputError(f"{name}: the kernel of set {self.choice.name!r} does not load: "
                                  f"{getattr(exc, 'described', exc)}") from None
        entry = RemoteEntry(runner)
        single = len(task.outputs) == 1

        def failed(exc: CandidateFailure) -> KernelFailed:
            return KernelFailed(f"{name} ({self.choice.name}): {exc.described}")

        def call(*args: Any) -> Any:
            try:
                outs = entry(*args)
            except CandidateFailure as exc:
                raise failed(exc) from None
            return outs[0] if single else outs

        def lanes(arg_lists: list[tuple]) -> Callable[[], list]:
            try:
                finish = runner.start_lanes([list(args) for args in arg_lists])
            except CandidateFailure as exc:
                raise failed(exc) from None

            def results() -> list:
                try:
                    reports = finish()
                except CandidateFailure as exc:
                    raise failed(exc) from None
                return [r.outs[0] if single else r.outs for r in reports]

            return results

        call.start_lanes = lanes
        call.channel = runner
        return call

    def close(self) -> None:
        """Every runner stopped, their findings kept; the runners stop at once (each waits for its
        process to die and removes its files: one after another, a set's 27 runners took 3.5 s
        on an H100)."""
        runners, self.runners = self.runners, []
        for runner in runners:
            for finding in runner.take_findings():
                self.findings.append(f"{finding.rule}: {finding.message}")
        if runners:
            with ThreadPoolExecutor(min(16, len(runners)), thread_name_prefix="stop-runner") as pool:
                list(pool.map(lambda runner: runner.stop(), runners))

    def __enter__(self) -> CagedSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class KernelFailed(RuntimeError):
    """A kernel failed while the model ran (crash, limit, a sandbox finding); one line."""
