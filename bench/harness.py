"""How trustworthy the benchmark is, in three figures (issue 5):

  (1) overhead   the worker pool's own cost of evaluating a trivial candidate, every stage
  (2) stability  the same kernel benchmarked N times: coefficient of variation of the median
  (3) agreement  our median against an independent timer's on the corpus's batch-invariant
                 kernels: triton.testing.do_bench on a GPU; torch.utils.benchmark on a CPU, where
                 Triton has no driver (both without L2 flush there, as that timer has none)

    python bench/harness.py --device cuda                   # all parts, all tasks
    python bench/harness.py --device cpu --tasks rms_norm --part stability

Targets (GPU): (2) CV <= 2 %, (3) within 5 %. CPU figures show the code path works; the Triton
interpreter's timings say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

PARTS = ("overhead", "stability", "agreement")
STABILITY_TARGET = 0.02
AGREEMENT_TARGET = 0.05
OVERHEAD_TARGET = 0.5
OVERHEAD_RUNS = 5


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="default: cuda when available, else cpu")
    parser.add_argument("--part", choices=PARTS, action="append",
                        help="run only this part (repeatable); default: all")
    parser.add_argument("--tasks", default="all", help="comma-separated task names, or 'all'")
    parser.add_argument("--runs", type=int, default=10, help="benchmarks per kernel in part (2)")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="parts (2) and (3) time CUDA-graph replays (part (3): ours and do_bench alike)")
    parser.add_argument("--no-queue-ahead", dest="queue_ahead", action="store_false",
                        help="GPU: do not hold the stream while a chunk of timed calls is enqueued "
                             "(the events then also see host launch gaps)")
    parser.add_argument("--json", type=Path, default=None, help="also write every row to this file")
    return parser.parse_args(argv)


# Loading -----------------------------------------------------------------------------------
def load_entry(path: Path, entry: str) -> Callable:
    """A corpus file's entry function (loaded the way sandbox workers load candidates)."""
    from gates.candidate import candidate_entry

    return candidate_entry(path, entry)[1]


def invariant_candidates(task, device: str) -> list[Path]:
    """Corpus files labelled batch-invariant on this device (the measurement when there is one)."""
    from gates.corpus import load_manifest

    out = []
    for e in load_manifest(task).candidates:
        measured = e.gpu if device == "cuda" else e.cpu
        label = measured.label if measured else e.expected
        if label == "invariant" and (measured is None or measured.correct is not False):
            out.append(task.candidates_dir / e.file)
    return out


def selected_tasks(names: str) -> list:
    from gates.contract import get_task, load_suite

    if names == "all":
        return list(load_suite().values())
    return [get_task(n.strip()) for n in names.split(",") if n.strip()]


def short(dims: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in dims.items())


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    for line in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())


# (1) overhead ------------------------------------------------------------------------------
def part_overhead(args: argparse.Namespace, tasks: list) -> list[dict]:
    """The worker pool's own cost: a trivial candidate (a copy of the first selected task's
    plain-PyTorch reference) evaluated through every stage in a one-worker pool, after a warm-up
    evaluation that started the worker and loaded the candidate. Per stage, overhead = the wall
    time the caller waited minus the time the stage's job spent on its own work in the worker
    (what remains: sending the job, finding the loaded candidate, returning the result). Medians
    of OVERHEAD_RUNS evaluations."""
    from agentloop.evaluation.pool import WorkerPool
    from agentloop.evaluation.stages import STAGES, EvalSettings

    print(f"\n(1) overhead of evaluating a trivial candidate through the worker pool after warm-up "
          f"(median of {OVERHEAD_RUNS})")
    if not tasks:
        return []
    task = tasks[0]
    path = task.reference_path
    code = path.read_text()
    settings = EvalSettings(device=args.device)
    with WorkerPool(args.device, workers=1) as pool:
        t0 = time.perf_counter()
        pool.warm_up()
        boot = time.perf_counter() - t0
        t0 = time.perf_counter()
        pool.warm_up()
        ping = time.perf_counter() - t0
        t0 = time.perf_counter()
        first = pool.evaluate(code, task, settings, observe_bi=True)
        first_s = time.perf_counter() - t0
        walls, runs = [], []
        for _ in range(OVERHEAD_RUNS):
            t0 = time.perf_counter()
            runs.append(pool.evaluate(code, task, settings, observe_bi=True))
            walls.append(time.perf_counter() - t0)
    failed = [o for o in first + [o for r in runs for o in r] if o.error]
    print(f"task {task.name}, candidate: a copy of {path.name}; worker start {boot:.1f} s; "
          f"empty job round trip {ping * 1e3:.1f} ms; first evaluation {first_s:.2f} s")
    if failed:
        print(f"note: stage {failed[0].stage} failed: {failed[0].error}")

    def inner(o) -> float:
        work = o.gate.seconds if o.gate else (o.benchmark.seconds if o.benchmark else 0.0)
        return o.seconds if o.stage == "static" else work

    header = ["stage", "wall", "in stage", "overhead"]
    rows, records = [], []
    for stage in STAGES:
        done = [o for r in runs for o in r if o.stage == stage]
        if not done:
            continue
        wall = statistics.median(o.seconds for o in done)
        work = statistics.median(inner(o) for o in done)
        over = statistics.median(o.seconds - inner(o) for o in done)
        rows.append([stage, f"{wall:.3f} s", f"{work:.3f} s", f"{over * 1e3:.1f} ms"])
        records.append({"stage": stage, "wall_s": wall, "work_s": work, "overhead_s": over})
    print_table(header, rows)
    overheads = [w - sum(inner(o) for o in r) for w, r in zip(walls, runs, strict=True)]
    total, overhead = statistics.median(walls), statistics.median(overheads)
    verdict = "yes" if overhead <= OVERHEAD_TARGET else "no"
    print(f"evaluate() end to end {total:.2f} s, of which pool overhead {overhead:.3f} s "
          f"(target <= {OVERHEAD_TARGET} s on CPU: {verdict}); the rest is the stages' own work")
    records.append({"task": task.name, "candidate": str(path), "boot_s": boot, "ping_s": ping,
                    "first_s": first_s, "end_to_end_s": total, "overhead_s": overhead})
    return records


# (2) stability -----------------------------------------------------------------------------
def part_stability(args: argparse.Namespace, tasks: list) -> list[dict]:
    """Each task's first invariant kernel timed `runs` times against its reference, through the
    benchmark's own interleaved timing (`time_interleaved`, as `benchmark_candidate` times), at
    the smallest and largest bench shape (smallest only on CPU). Inputs are made once per shape:
    generating them does not change the timings and costs seconds at the largest shapes."""
    from agentloop.evaluation.benchmark import bench_dims, clone_inputs
    from agentloop.evaluation.timer import BenchSettings, time_interleaved
    from gates.reference import make_inputs, reference_fn

    print(f"\n(2) stability: the same kernel benchmarked {args.runs} times, CV = stdev / mean of the median")
    settings = BenchSettings.for_device(args.device, cuda_graph=args.cuda_graph,
                                       queue_ahead=args.queue_ahead)
    header = ["task", "kernel", "shape", "median", "CV median", "speedup", "CV speedup", "ok"]
    rows, records = [], []
    for task in tasks:
        paths = invariant_candidates(task, args.device)
        if not paths:
            continue
        kernel = paths[0].stem
        fns = {"candidate": load_entry(paths[0], task.entry), "reference": reference_fn(task)}
        dims_list = bench_dims(task, args.device)
        picks = [dims_list[0]] if args.device == "cpu" else [dims_list[0], dims_list[-1]]
        for dims in {short(d): d for d in picks}.values():
            inputs = make_inputs(task, dims, task.dtypes[0], 0, args.device)
            make_args = functools.partial(clone_inputs, inputs)
            try:
                runs = [time_interleaved(fns, make_args, args.device, settings) for _ in range(args.runs)]
            except Exception as exc:  # a kernel that fails here is reported, not fatal
                line = error_line(exc)
                rows.append([task.name, kernel, short(dims), "-", "-", "-", "-", line[:60]])
                records.append({"task": task.name, "kernel": kernel, "dims": dims, "error": line})
                continue
            medians = [r["candidate"].median_ms for r in runs]
            speedups = [r["reference"].median_ms / r["candidate"].median_ms for r in runs]
            cv_med, cv_sp = cv(medians), cv(speedups)
            rows.append([task.name, kernel, short(dims), fmt_ms(statistics.median(medians)), f"{cv_med:.2%}",
                         f"{statistics.median(speedups):.3f}", f"{cv_sp:.2%}",
                         "yes" if cv_med <= STABILITY_TARGET else "no"])
            records.append({"task": task.name, "kernel": kernel, "dims": dims, "medians_ms": medians,
                            "speedups": speedups, "cv_median": cv_med, "cv_speedup": cv_sp})
    print_table(header, rows)
    cvs = [r["cv_median"] for r in records if "cv_median" in r]
    if cvs:
        inside = sum(c <= STABILITY_TARGET for c in cvs)
        print(f"{inside}/{len(cvs)} kernel-shapes within {STABILITY_TARGET:.0%}, worst CV {max(cvs):.2%}, "
              f"median {statistics.median(cvs):.2%} (target <= {STABILITY_TARGET:.0%} on GPU)")
    return records


def error_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else 0.0


def fmt_ms(ms: float) -> str:
    return f"{ms * 1e3:.1f} us" if ms < 1 else f"{ms:.3f} ms"


# (3) agreement -----------------------------------------------------------------------------
def independent_median_ms(fn: Callable, kwargs: dict, device: str, cuda_graph: bool = False) -> float:
    """The median from a timer that is not ours: do_bench on a GPU (L2 flush before each call,
    like ours; with `cuda_graph`, of a CUDA-graph replay of the call, as our graph mode times),
    torch.utils.benchmark on a CPU (no flush)."""
    if device == "cuda":
        from triton.testing import do_bench

        from agentloop.evaluation.timer import capture_graph

        call = capture_graph(lambda: fn(**kwargs), device) if cuda_graph else (lambda: fn(**kwargs))
        return float(do_bench(call, return_mode="median"))
    from torch.utils.benchmark import Timer

    return Timer(stmt="fn(**kwargs)", globals={"fn": fn, "kwargs": kwargs}).blocked_autorange(
        min_run_time=0.05).median * 1e3


def part_agreement(args: argparse.Namespace, tasks: list) -> list[dict]:
    """Every invariant corpus kernel at every bench shape: our median / the independent median,
    both timing the same inputs. With --cuda-graph both time a CUDA-graph replay of the call, so
    both see device time only; without it do_bench also sees the gaps where the GPU waits for the
    host, which our queue-ahead leaves out (--no-queue-ahead makes ours see them too)."""
    from agentloop.evaluation.benchmark import bench_dims, clone_inputs
    from agentloop.evaluation.timer import time_callable
    from gates.reference import make_inputs

    other = "do_bench" if args.device == "cuda" else "torch.utils.benchmark"
    mode = " (both timing CUDA-graph replays)" if args.cuda_graph else ""
    print(f"\n(3) agreement with {other}{mode} on the corpus's batch-invariant kernels "
          "(ratio = ours / theirs)")
    flush = args.device == "cuda"
    header = ["task", "kernel", "shape", "ours", other, "ratio", "ok"]
    rows, records = [], []
    for task in tasks:
        kernels = {p.stem: load_entry(p, task.entry) for p in invariant_candidates(task, args.device)}
        for dims in bench_dims(task, args.device) if kernels else []:
            inputs = make_inputs(task, dims, task.dtypes[0], 0, args.device)
            for kernel, fn in kernels.items():
                make_args = functools.partial(clone_inputs, inputs)
                try:
                    ours = time_callable(fn, make_args, args.device, l2_flush=flush,
                                         cuda_graph=args.cuda_graph, queue_ahead=args.queue_ahead).median_ms
                    theirs = independent_median_ms(fn, make_args(), args.device, args.cuda_graph)
                except Exception as exc:  # a kernel that fails here is reported, not fatal
                    line = error_line(exc)
                    rows.append([task.name, kernel, short(dims), "-", "-", "-", line[:60]])
                    records.append({"task": task.name, "kernel": kernel, "dims": dims, "error": line})
                    continue
                ratio = ours / theirs
                rows.append([task.name, kernel, short(dims), fmt_ms(ours), fmt_ms(theirs), f"{ratio:.3f}",
                             "yes" if abs(ratio - 1) <= AGREEMENT_TARGET else "no"])
                records.append({"task": task.name, "kernel": kernel, "dims": dims, "ours_ms": ours,
                                "theirs_ms": theirs, "ratio": ratio})
    print_table(header, rows)
    devs = [abs(r["ratio"] - 1) for r in records if "ratio" in r]
    if devs:
        inside = sum(d <= AGREEMENT_TARGET for d in devs)
        print(f"{inside}/{len(devs)} kernel-shapes within {AGREEMENT_TARGET:.0%}, worst {max(devs):.1%}, "
              f"median {statistics.median(devs):.1%} (target within {AGREEMENT_TARGET:.0%} on GPU)")
    return records


def gpu_neighbours() -> str:
    """One line on what else uses the GPU: other processes' kernels land in any event timing
    (a killed hanging kernel can keep running for a while)."""
    import torch

    try:
        busy = torch.cuda.utilization()
        others = [line for line in torch.cuda.list_gpu_processes().splitlines()[1:]
                  if f"process {os.getpid():>10d}" not in line and "no processes" not in line]
    except Exception as exc:  # no NVML (nvidia-ml-py) here: say so and go on
        return f"GPU neighbours: unknown ({type(exc).__name__})"
    warning = "  WARNING: timings will include their work" if others else ""
    return f"GPU utilisation {busy}% before timing; other processes: {len(others)}{warning}"


def spin_up(device: str, seconds: float = 0.5) -> None:
    """Keep the GPU busy for a moment so its clocks have risen from idle before anything is timed."""
    if device != "cuda":
        return
    import torch

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but torch sees no GPU; use --device cpu", file=sys.stderr)
        return 2
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before any candidate's @triton.jit runs
    if args.cuda_graph and args.device != "cuda":
        print("error: --cuda-graph needs --device cuda", file=sys.stderr)
        return 2
    import triton

    from gates.contract import TaskError

    try:
        tasks = selected_tasks(args.tasks)
    except TaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu (Triton interpreter)"
    print(f"device {name}; torch {torch.__version__}; triton {triton.__version__}; "
          f"{len(tasks)} tasks; cuda_graph={args.cuda_graph}; queue_ahead={args.queue_ahead}")
    if args.device == "cuda":
        print(gpu_neighbours())
    started = time.perf_counter()
    spin_up(args.device)
    out: dict[str, list[dict]] = {}
    parts = {"overhead": part_overhead, "stability": part_stability, "agreement": part_agreement}
    for part in args.part or PARTS:
        t0 = time.perf_counter()
        out[part] = parts[part](args, tasks)
        print(f"[{part}: {time.perf_counter() - t0:.1f} s]")
    print(f"\ntotal {time.perf_counter() - started:.1f} s")
    if args.json:
        args.json.write_text(json.dumps({"device": name, "cuda_graph": args.cuda_graph,
                                              "queue_ahead": args.queue_ahead, **out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
