"""What one call of a caged candidate costs: the judge's `RemoteEntry` into a runner
(`gates.judge.client.Runner`, `gates/runner/driver.py`), against the same function called in
this process, for a few sizes. The difference is the boundary's fixed cost per call (arena
copies, the driver's checks, the late-work wait, the messages): the model check makes ~30k such
calls per kernel set, the dynamic gate many too.

    python bench/runner_call.py                    # CPU, every case
    python bench/runner_call.py --device cuda      # the same on the GPU (device arena by default;
                                                   # AGENTLOOP_ARENA=host for the host arena)
    python bench/runner_call.py --cases tiny --calls 2000 --json out.json
    python bench/runner_call.py --device cuda --concurrent 1,2,3,6   # N runners called at once
    python bench/runner_call.py --device cuda --lanes 16   # also 16 calls in one request (call_lanes)

With --concurrent, each case is timed with N runners of the same code, each called from a thread
of its own (as the model check's twin runs call their copies): calls per second in all, and
each thread's milliseconds per call. It says how much of a call's cost one judge and one GPU
can overlap. With --lanes N, each case is also timed as N calls made together in one request
(`Runner.call_lanes`, as the model check serves its requests alone in step): milliseconds per
call of the N, each with its own input and the case's other arguments shared.

Cases: `tiny` (rms_norm of 2 rows of 64), `rows` (rms_norm of 256 rows of 4096), `linear` (8 rows
through a 14336 x 4096 weight with bias). float32 on the CPU, bfloat16 on the GPU. The candidate
is plain torch (no Triton), so what is timed is the boundary, not a kernel; every call's output
is checked against the in-process one once, before timing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # a bench script: run from a checkout that may not be installed

import torch  # noqa: E402

CODE = {
    "rms_norm": "import torch\n\ndef rms_norm(x, weight, eps):\n"
                "    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)\n",
    "linear": "import torch\n\ndef linear(x, weight, bias):\n"
              "    return torch.nn.functional.linear(x, weight, bias)\n",
}
CASES = {  # name: (task, entry's arguments as shapes or values, calls on the CPU, calls on the GPU)
    "tiny": ("rms_norm", [(2, 64), (64,), 1e-6], 2000, 5000),
    "rows": ("rms_norm", [(256, 4096), (4096,), 1e-6], 500, 3000),
    "linear": ("linear", [(8, 4096), (14336, 4096), (14336,)], 20, 1000),
}


def arguments(spec: list, device: str, dtype: torch.dtype) -> list:
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(a, generator=gen).to(device, dtype) if isinstance(a, tuple) else a for a in spec]


def timed(fn, args: list, calls: int, device: str, repeats: int) -> list[float]:
    """Milliseconds per call, `repeats` times over `calls` back-to-back calls."""
    out = []
    for _ in range(repeats):
        if device != "cpu":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        if device != "cpu":
            torch.cuda.synchronize()
        out.append((time.perf_counter() - start) / calls * 1e3)
    return out


def direct(task: str):
    namespace: dict = {}
    exec(compile(CODE[task], f"<{task}>", "exec"), namespace)  # noqa: S102 - our own candidate
    return namespace[task]


def _case(case: str, device: str, calls: int | None) -> tuple[str, int, list]:
    """A case's task, its calls per repeat (`calls`, else the case's for the device) and its
    arguments (float32 on the CPU, bfloat16 on the GPU)."""
    task, spec, cpu_calls, gpu_calls = CASES[case]
    calls = calls or (cpu_calls if device == "cpu" else gpu_calls)
    return task, calls, arguments(spec, device, torch.float32 if device == "cpu" else torch.bfloat16)


def _warm_calls(calls: int) -> int:
    return max(5, calls // 10)


def measure(case: str, device: str, calls: int | None, repeats: int, lanes: int = 0) -> dict:
    from gates.contract import get_task
    from gates.judge.client import RemoteEntry, Runner
    from gates.judge.runner_pool import reference_dirs

    task, calls, args = _case(case, device, calls)
    fn = direct(task)
    runner = Runner(device, reference_dirs=reference_dirs(get_task(task)))
    try:
        runner.load(CODE[task], get_task(task).entry)
        entry = RemoteEntry(runner)
        got, want = entry(*args)[0], fn(*args)
        assert torch.equal(got, want), f"{case}: the runner's output differs from the function's"
        timed(entry, args, _warm_calls(calls), device, 1)
        timed(fn, args, _warm_calls(calls), device, 1)
        caged = timed(entry, args, calls, device, repeats)
        plain = timed(fn, args, calls, device, repeats)
        together = []
        if lanes:
            lane_args = [[args[0].clone(), *args[1:]] for _ in range(lanes)]
            reports = runner.call_lanes(lane_args)
            assert all(torch.equal(r.outs[0], want) for r in reports), f"{case}: a lane's output differs"
            timed(runner.call_lanes, [lane_args], max(1, _warm_calls(calls) // lanes), device, 1)
            together = [ms / lanes for ms in timed(runner.call_lanes, [lane_args], max(1, calls // lanes),
                                                   device, repeats)]
        findings = [f"{f.rule}: {f.message}" for f in runner.take_findings()]
    finally:
        runner.stop()
    row = {"case": case, "device": device, "calls": calls, "repeats": repeats,
           "runner_ms": statistics.median(caged), "runner_ms_min": min(caged),
           "direct_ms": statistics.median(plain), "arena": type(runner.arena).__name__,
           "findings": findings}
    row["overhead_ms"] = row["runner_ms"] - row["direct_ms"]
    if together:
        row["lanes"], row["lane_ms"] = lanes, statistics.median(together)
    return row


def concurrent(case: str, device: str, calls: int | None, threads: int) -> dict:
    import threading

    from gates.contract import get_task
    from gates.judge.client import RemoteEntry, Runner
    from gates.judge.runner_pool import reference_dirs

    task, calls, args = _case(case, device, calls)
    runners = [Runner(device, reference_dirs=reference_dirs(get_task(task))) for _ in range(threads)]
    try:
        for runner in runners:
            runner.load(CODE[task], get_task(task).entry)
        entries = [RemoteEntry(runner) for runner in runners]
        for entry in entries:
            timed(entry, args, _warm_calls(calls), device, 1)
        each: list[float] = []

        def run(entry) -> None:
            start = time.perf_counter()
            for _ in range(calls):
                entry(*args)
            each.append((time.perf_counter() - start) / calls * 1e3)

        workers = [threading.Thread(target=run, args=(entry,)) for entry in entries]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        wall = time.perf_counter() - start
    finally:
        for runner in runners:
            runner.stop()
    return {"case": case, "device": device, "threads": threads, "calls": calls,
            "calls_per_s": threads * calls / wall, "ms_per_call": statistics.median(each)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    parser.add_argument("--calls", type=int, default=None, help="calls per repeat (default: per case)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per case (the median is shown)")
    parser.add_argument("--concurrent", default=None,
                        help="comma-separated runner counts: time N runners called at once instead")
    parser.add_argument("--lanes", type=int, default=0,
                        help="also time N calls made together in one request (ms per call of the N)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no GPU here")
    rows = []
    if args.concurrent:
        print(f"{'case':8} {'runners':>7} {'calls':>6} {'calls/s':>9} {'ms/call':>8}")
        for case in args.cases.split(","):
            for n in (int(x) for x in args.concurrent.split(",")):
                row = concurrent(case.strip(), args.device, args.calls, n)
                rows.append(row)
                print(f"{row['case']:8} {n:7d} {row['calls']:6d} {row['calls_per_s']:9.0f} "
                      f"{row['ms_per_call']:8.3f}", flush=True)
    else:
        print(f"{'case':8} {'calls':>6} {'runner ms':>10} {'min':>8} {'direct ms':>10} {'overhead':>9}  "
              "arena")
        for case in args.cases.split(","):
            row = measure(case.strip(), args.device, args.calls, args.repeats, args.lanes)
            rows.append(row)
            print(f"{row['case']:8} {row['calls']:6d} {row['runner_ms']:10.3f} {row['runner_ms_min']:8.3f} "
                  f"{row['direct_ms']:10.3f} {row['overhead_ms']:9.3f}  {row['arena']}"
                  + (f"  {row['lanes']} lanes: {row['lane_ms']:.3f} ms per call" if "lanes" in row else "")
                  + (f"  findings: {row['findings']}" if row["findings"] else ""), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"torch": torch.__version__, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
