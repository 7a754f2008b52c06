"""Issue 5's GPU acceptance check: a candidate that makes an illegal memory access is reported,
its worker (whose CUDA context the fault corrupted) is replaced, and the next candidate in the
same pool is evaluated correctly.

One worker pool with one worker, on the rms_norm task:
  1. a correct batch-invariant corpus kernel, every stage (it must pass them all);
  2. a kernel that stores 2 TiB past its output from the first call: the compile stage must fail
     with the fault and the worker must be replaced;
  3. the correct kernel again, every stage, in the same pool: it must pass them all;
  4. a kernel that faults only on batches of more than 8 rows: compile passes, the dynamic stage
     must fail with the fault and the worker must be replaced;
(the faulting kernels skip the static gate, which would reject the second one before it runs).
  5. the correct kernel again: it must pass every stage.
Prints one line per stage and a last line starting with PASS or FAIL; exit status 0 on PASS.

    python bench/illegal_memory_access.py                 # on the GPU
    python bench/illegal_memory_access.py --device cpu    # the same path on a CPU, where the
                                                          # interpreter turns the store into a segfault
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "pool"
FAULT_SIGNS = {"cuda": ("illegal memory access", "illegal address", "CUDA error"),
               "cpu": ("SIGSEGV", "SIGBUS")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    args = parser.parse_args(argv)
    import torch
    import triton

    if args.device == "cuda" and not torch.cuda.is_available():
        print("FAIL: --device cuda but torch sees no GPU; use --device cpu")
        return 1
    from agentloop.evaluation.pool import WorkerPool
    from agentloop.evaluation.stages import STAGES, EvalSettings
    from gates.contract import get_task

    task = get_task("rms_norm")
    good = (task.candidates_dir / "row_per_program.py").read_text()
    settings = EvalSettings(device=args.device)
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu (Triton interpreter)"
    print(f"device {name}; torch {torch.__version__}; triton {triton.__version__}")
    problems: list[str] = []

    with WorkerPool(args.device, workers=1) as pool:
        def evaluate(label: str, code: str, stages: tuple = STAGES) -> list:
            pid, restarts, start = pool.pids()[0], pool.restarts, time.perf_counter()
            outcomes = pool.evaluate(code, task, settings, stages=stages)
            print(f"\n{label} ({time.perf_counter() - start:.1f} s; worker pid {pid} -> {pool.pids()[0]}, "
                  f"replaced {pool.restarts - restarts} time(s))")
            for o in outcomes:
                extra = f", speedup {o.benchmark.speedup:.2f}" if o.benchmark and o.passed else ""
                print(f"  {o.stage:<12} {'pass' if o.passed else 'FAIL'}  {o.seconds:7.2f} s{extra}"
                      + (f"  {o.error}" if o.error else ""))
            return outcomes

        def expect_all_pass(label: str) -> None:
            outcomes = evaluate(label, good)
            failed = [o for o in outcomes if not o.passed]
            if failed or len(outcomes) != 5:
                problems.append(f"{label}: stage {failed[0].stage if failed else '?'} failed "
                                f"({failed[0].error if failed else 'stages missing'})")

        def expect_fault(label: str, fixture: str, stage: str) -> None:
            restarts = pool.restarts
            outcomes = evaluate(label, (FIXTURES / fixture).read_text(), stages=STAGES[:1] + STAGES[2:])
            last = outcomes[-1]
            if last.stage != stage or last.passed:
                problems.append(f"{label}: expected the {stage} stage to fail, got {last.stage} "
                                f"{'passing' if last.passed else 'failing'}")
            elif not any(sign in (last.error or "") for sign in FAULT_SIGNS[args.device]):
                problems.append(f"{label}: the error does not name the fault: {last.error}")
            if pool.restarts != restarts + 1:
                problems.append(f"{label}: the worker was replaced {pool.restarts - restarts} times, "
                                "expected once")
            if any(not o.passed for o in outcomes[:-1]):
                problems.append(f"{label}: an earlier stage failed")

        pool.warm_up()
        expect_all_pass("1. correct kernel")
        expect_fault("2. stray store from the first call", "illegal_store.py", "compile")
        expect_all_pass("3. correct kernel, same pool")
        expect_fault("4. stray store on batches > 8 rows", "illegal_store_large_batch.py", "dynamic")
        expect_all_pass("5. correct kernel, same pool")

    if problems:
        print("\nFAIL: " + "; ".join(problems))
        return 1
    print("\nPASS: both faulting candidates were reported with their fault and their worker replaced; "
          "the correct kernel passed every stage before and after, in the same pool")
    return 0


if __name__ == "__main__":
    sys.exit(main())
