"""The batch-invariance tax of the corpus: per task and shape, the best batch-invariant corpus
kernel's time over the fastest production baseline's (docs/benchmark.md, issue 16).

    python bench/bi_tax.py --device cuda --json OUT.json          # measure (on the GPU)
    python bench/bi_tax.py --from-json OUT.json --write           # render docs/bi_tax.md here
    python bench/bi_tax.py --device cpu --tasks rms_norm          # smoke test (interpreter)

Per task, in this process (corpus kernels and baselines are ours, not untrusted candidates):
  1. the production baselines the task file declares (`compile: true` ones only with
     `--compile`), each run through the dynamic gate (`gates.dynamic.dynamic_gate`) on the
     device, which says whether the baseline itself is batch-invariant;
  2. the corpus kernels labelled invariant on the device (the measured label where the manifest
     has one), each checked against the reference at every shape before it is timed;
  3. at each shape (the task's bench shapes plus a T=8 decode shape where they have none; on a
     CPU capped as the benchmark caps them), reference, kernels and baselines timed interleaved
     with the benchmark's timer (`agentloop.evaluation.timer.time_interleaved`) on the same inputs.
The tax at a shape = best invariant kernel's median / fastest baseline's median (1.25: the
invariant kernel takes 25 % longer than what the engine would run; below 1 it is faster). Shapes
fall in three regimes by batch size: decode (1..8), mid, prefill (>= 2048).

The JSON file is rewritten after every task, so a run cut short keeps the tasks it finished;
`--deadline` stops starting new tasks after that many seconds.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # a bench script: run from a checkout that may not be installed
sys.path.insert(0, str(REPO / "bench"))

DOC = REPO / "docs" / "bi_tax.md"
DECODE_MAX, PREFILL_MIN = 8, 2048
REGIMES = ("decode", "mid", "prefill")


def regime(batch: int) -> str:
    return "decode" if batch <= DECODE_MAX else "prefill" if batch >= PREFILL_MIN else "mid"


def tax_shapes(task, device: str) -> list[dict[str, int]]:
    """The task's bench shapes, plus a decode shape of 8 rows where none has 2..8 rows (the
    smallest shape's dims otherwise); on a CPU capped as the benchmark caps them."""
    from agentloop.evaluation.benchmark import bench_dims

    shapes = [dict(s) for s in task.bench_shapes]
    axis = task.batch_axis
    if not any(1 < s[axis] <= DECODE_MAX for s in shapes):
        smallest = min(shapes, key=lambda s: s[axis])
        shapes.append({**smallest, axis: DECODE_MAX})
    shapes.sort(key=lambda s: s[axis])
    return bench_dims(task, device, shapes) if device == "cuda" else bench_dims_cpu(task, shapes)


def bench_dims_cpu(task, shapes: list[dict[str, int]]) -> list[dict[str, int]]:
    from agentloop.evaluation.benchmark import CPU_BATCH_CAP

    out: list[dict[str, int]] = []
    for shape in shapes:
        dims = dict(task.cpu_dims)
        for axis, size in shape.items():
            dims[axis] = min(size, CPU_BATCH_CAP if axis == task.batch_axis else task.cpu_dims[axis])
        if dims not in out:
            out.append(dims)
    return out


def baseline_verdicts(task, fns: dict, device: str, gate: bool) -> dict[str, dict]:
    """Whether each baseline is batch-invariant by the dynamic gate, with its counterexample."""
    from gates.dynamic import dynamic_gate

    out = {}
    for name, fn in fns.items():
        if not gate:
            out[name] = {"bi": None, "detail": "not gated (--no-gate)", "seconds": 0.0}
            continue
        try:
            result = dynamic_gate(fn, task, device)
        except Exception as exc:  # noqa: BLE001 - reported, not fatal
            out[name] = {"bi": None, "detail": f"gate raised {error_line(exc)}", "seconds": 0.0}
            continue
        detail = ""
        if result.counterexample is not None:
            ce = result.counterexample
            detail = (f"output {ce.output} row {ce.row} differs in a batch of {ce.batch_size} (position "
                      f"{ce.position}) from a batch of {ce.reference_batch_size}")
        elif result.error:
            detail = result.error
        out[name] = {"bi": result.passed if not result.error else None, "detail": detail,
                     "seconds": round(result.seconds, 2)}
    return out


def measure_task(task, args: argparse.Namespace) -> dict:
    """One task's baselines (gated), kernels (checked) and timings at every shape."""
    from harness import invariant_candidates, load_entry

    from agentloop.evaluation.benchmark import clone_inputs, load_baselines, timed_baselines
    from agentloop.evaluation.timer import BenchSettings, error_line, sync, time_interleaved
    from gates.correctness import compare_outputs
    from gates.reference import as_outputs, make_inputs, reference_fn

    started = time.perf_counter()
    device, dtype = args.device, task.dtypes[0]
    declared = timed_baselines(task, args.compile)
    baselines, unavailable = load_baselines(task, declared)
    kernels, broken = {}, {}
    for path in invariant_candidates(task, device):
        try:
            kernels[path.name] = load_entry(path, task.entry)
        except Exception as exc:  # noqa: BLE001 - a kernel that does not load is reported
            broken[path.name] = error_line(exc)
    ref = reference_fn(task)
    settings = BenchSettings.for_device(device, min_time=args.min_time)
    shapes = []
    for dims in tax_shapes(task, device):
        make_args = functools.partial(clone_inputs, make_inputs(task, dims, dtype, 0, device, on_device=True))
        want = as_outputs(ref(**make_args()))
        for fns, failed in ((kernels, broken), (baselines, unavailable)):
            for name in list(fns):
                try:
                    got = as_outputs(fns[name](**make_args()))
                    sync(device)
                    problem = compare_outputs(task, dtype, got, want)
                    why = f"wrong output at {dims}: {problem[1]}" if problem else None
                except Exception as exc:  # noqa: BLE001 - left out, and why
                    why = f"at {dims}: {error_line(exc)}"
                if why:
                    failed[name] = why
                    del fns[name]
        timed = {"reference": ref, **{f"k:{n}": f for n, f in kernels.items()},
                 **{f"b:{n}": f for n, f in baselines.items()}}
        try:
            timings = time_interleaved(timed, make_args, device, settings)
        except Exception as exc:  # noqa: BLE001 - the shape is reported as failed
            shapes.append({"dims": dims, "error": error_line(exc)})
            continue
        ms = {name: t.median_ms for name, t in timings.items()}
        shapes.append({"dims": dims, "batch": dims[task.batch_axis], "regime": regime(dims[task.batch_axis]),
                       "reference_ms": ms["reference"],
                       "kernels": {n[2:]: v for n, v in ms.items() if n.startswith("k:")},
                       "baselines": {n[2:]: v for n, v in ms.items() if n.startswith("b:")}})
        print(f"  {task.name} {short(dims)}: " + ", ".join(f"{n} {fmt_us(v)}" for n, v in ms.items()),
              flush=True)
    gated = baseline_verdicts(task, {b.name: f for b, f in ((b, baselines.get(b.name)) for b in declared)
                                     if f is not None}, device, not args.no_gate)
    return {"task": task.name, "dtype": dtype,
            "baselines": [{"name": b.name, "summary": b.summary, "compile": b.compile,
                           "unavailable": unavailable.get(b.name), **gated.get(b.name, {"bi": None})}
                          for b in declared],
            "kernels": sorted(set(kernels) | set(broken)), "kernel_errors": broken, "shapes": shapes,
            "seconds": round(time.perf_counter() - started, 1)}


# Figures -----------------------------------------------------------------------------------
def shape_figures(shape: dict, bi_baselines: set[str]) -> dict | None:
    """Best kernel, fastest baseline and the tax at one measured shape; None without both."""
    kernels = {k: v for k, v in (shape.get("kernels") or {}).items() if v > 0}
    baselines = {k: v for k, v in (shape.get("baselines") or {}).items() if v > 0}
    if not kernels or not baselines:
        return None
    kernel = min(kernels, key=kernels.get)
    base = min(baselines, key=baselines.get)
    bi = {k: v for k, v in baselines.items() if k in bi_baselines}
    bi_base = min(bi, key=bi.get) if bi else None
    return {"kernel": kernel, "kernel_ms": kernels[kernel], "baseline": base, "baseline_ms": baselines[base],
            "tax": kernels[kernel] / baselines[base], "bi_baseline": bi_base,
            "bi_baseline_ms": bi[bi_base] if bi_base else None}


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def regime_taxes(entry: dict) -> dict[str, float | None]:
    bi = {b["name"] for b in entry["baselines"] if b.get("bi")}
    out = {}
    for r in REGIMES:
        figures = [f for s in entry["shapes"] if s.get("regime") == r and (f := shape_figures(s, bi))]
        out[r] = geomean([f["tax"] for f in figures])
    return out


# Output ------------------------------------------------------------------------------------
def short(dims: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in dims.items())


def fmt_us(ms: float | None) -> str:
    if ms is None or ms <= 0:
        return "-"
    us = ms * 1e3
    return f"{us:,.0f} µs" if us >= 100 else f"{us:.3g} µs"


def fmt_tax(tax: float | None) -> str:
    return "-" if tax is None else f"{tax:.2f}×"


def error_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"


def render(data: dict) -> str:
    """docs/bi_tax.md from a run's JSON."""
    lines = ["# The batch-invariance tax", "",
             "Per task and shape: the best batch-invariant corpus kernel's time over the fastest",
             "production baseline's (the ops a serving engine runs instead: vendor GEMM, torch's fused",
             "norms, SDPA, ...; declared in each task file, `tasks/<task>/baselines.py`). 1.25× means the",
             "invariant kernel takes 25 % longer than the fastest baseline; below 1× it is faster. Medians",
             "of the benchmark's timer (`agentloop/evaluation/timer.py`, L2 flushed before every call), all",
             "functions interleaved on the same inputs in one process. Whether a baseline is itself",
             "batch-invariant is the dynamic gate's verdict on it (`gates.dynamic.dynamic_gate` on the",
             "device).",
             "Definitions: docs/benchmark.md. Made by `bench/bi_tax.py`.", "",
             f"- Device: {data['device']} ({data.get('device_name', '-')}), torch {data.get('torch', '-')}, "
             f"triton {data.get('triton', '-')}, {data.get('started', '')}, {data.get('seconds', 0):.0f} s",
             f"- Command: `{data.get('command', '')}`", ""]
    if data["device"] == "cpu":
        lines += ["**CPU run: Triton's interpreter against native torch; the figures only show that the "
                  "script works, not what the tax is on a GPU.**", ""]
    if data.get("skipped"):
        lines += [f"Not measured (deadline): {', '.join(data['skipped'])}.", ""]
    lines += ["## Per task: geomean tax by regime", "",
              f"decode: batch 1..{DECODE_MAX}; prefill: batch ≥ {PREFILL_MIN}; mid: between. "
              "`-`: no shape of that regime, or no kernel or baseline measured there.", "",
              "| task | decode | mid | prefill | invariant kernels | baselines (BI by the dynamic gate) |",
              "| --- | --- | --- | --- | --- | --- |"]
    for entry in data["tasks"]:
        taxes = regime_taxes(entry)
        bases = ", ".join(f"`{b['name']}` " + ("unavailable" if b.get("unavailable") else
                                               {True: "BI", False: "not BI", None: "BI ?"}[b.get("bi")])
                          for b in entry["baselines"])
        lines.append(f"| {entry['task']} | {fmt_tax(taxes['decode'])} | {fmt_tax(taxes['mid'])} | "
                     f"{fmt_tax(taxes['prefill'])} | {len(entry['kernels']) - len(entry['kernel_errors'])} | "
                     f"{bases} |")
    lines += ["", "## Per shape", "",
              "| task | shape | regime | best invariant kernel | fastest baseline | tax | "
              "fastest BI baseline | reference |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for entry in data["tasks"]:
        bi = {b["name"] for b in entry["baselines"] if b.get("bi")}
        for s in entry["shapes"]:
            if s.get("error"):
                lines.append(f"| {entry['task']} | {short(s['dims'])} | | failed: {s['error'][:80]} "
                             "| | | | |")
                continue
            f = shape_figures(s, bi)
            if f is None:
                lines.append(f"| {entry['task']} | {short(s['dims'])} | {s['regime']} | - | - | - | - | "
                             f"{fmt_us(s['reference_ms'])} |")
                continue
            bi_text = f"`{f['bi_baseline']}` {fmt_us(f['bi_baseline_ms'])}" if f["bi_baseline"] else "-"
            lines.append(f"| {entry['task']} | {short(s['dims'])} | {s['regime']} | `{f['kernel']}` "
                         f"{fmt_us(f['kernel_ms'])} | `{f['baseline']}` {fmt_us(f['baseline_ms'])} | "
                         f"{fmt_tax(f['tax'])} | {bi_text} | {fmt_us(s['reference_ms'])} |")
    notes = [(e["task"], b["name"], b.get("unavailable") or b.get("detail")) for e in data["tasks"]
             for b in e["baselines"] if b.get("unavailable") or b.get("detail")]
    notes += [(e["task"], k, why) for e in data["tasks"] for k, why in e["kernel_errors"].items()]
    if notes:
        lines += ["", "## Baselines and kernels: details", "", "| task | function | detail |",
                  "| --- | --- | --- |"]
        lines += [f"| {t} | `{n}` | {' '.join(str(d).split()).replace('|', '/')[:200]} |"
                  for t, n, d in notes]
    return "\n".join(lines) + "\n"


def provenance(args: argparse.Namespace, argv: list[str]) -> dict:
    import torch

    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = "-"
    cuda = args.device == "cuda"
    name = torch.cuda.get_device_name() if cuda else platform.processor() or platform.machine()
    return {"device": args.device, "device_name": name, "torch": torch.__version__, "triton": triton_version,
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": "python bench/bi_tax.py " + " ".join(shlex.quote(a) for a in argv)}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default=None)
    ap.add_argument("--tasks", default="all", help="comma-separated task names, or 'all'")
    ap.add_argument("--compile", action="store_true", help="also time the compile: true baselines")
    ap.add_argument("--no-gate", action="store_true", help="do not run the dynamic gate on the baselines")
    ap.add_argument("--min-time", type=float, default=None,
                    help="seconds of timed calls per function per shape (default 0.03 cuda, 0.02 cpu)")
    ap.add_argument("--deadline", type=float, default=420.0,
                    help="start no new task after this many seconds (default 420)")
    ap.add_argument("--json", type=Path, help="write the measurements here (after every task)")
    ap.add_argument("--from-json", type=Path, help="skip measuring: render a JSON file of an earlier run")
    ap.add_argument("--write", action="store_true", help="write the table to --doc")
    ap.add_argument("--doc", type=Path, default=DOC)
    args = ap.parse_args(argv)
    if args.from_json:
        data = json.loads(args.from_json.read_text())
    else:
        if args.device is None:
            ap.error("--device is required unless --from-json is given")
        import torch

        if args.device == "cuda" and not torch.cuda.is_available():
            ap.error("--device cuda: no GPU is visible here; measure on a GPU machine, or use --device cpu")
        if args.device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            ap.error("--device cpu runs Triton kernels in its interpreter: set TRITON_INTERPRET=1")
        if args.min_time is None:
            args.min_time = 0.03 if args.device == "cuda" else 0.02
        data = measure(args, argv)
    text = render(data)
    if args.write:
        args.doc.write_text(text)
        print(f"wrote {args.doc}")
    else:
        print(text)


def measure(args: argparse.Namespace, argv: list[str]) -> dict:
    from harness import selected_tasks

    t0 = time.perf_counter()
    data = {**provenance(args, argv), "seconds": 0.0, "tasks": [], "skipped": []}
    tasks = selected_tasks(args.tasks)
    for i, task in enumerate(tasks):
        if time.perf_counter() - t0 > args.deadline:
            data["skipped"] = [t.name for t in tasks[i:]]
            print(f"deadline: {', '.join(data['skipped'])} not measured", flush=True)
            break
        print(f"[{i + 1}/{len(tasks)}] {task.name}", flush=True)
        entry = measure_task(task, args)
        data["tasks"].append(entry)
        taxes = regime_taxes(entry)
        print(f"  {task.name}: " + ", ".join(f"{r} {fmt_tax(v)}" for r, v in taxes.items())
              + "; baselines " + ", ".join(f"{b['name']} bi={b.get('bi')}" for b in entry["baselines"])
              + f" ({entry['seconds']} s)", flush=True)
        data["seconds"] = round(time.perf_counter() - t0, 1)
        if args.json:
            args.json.write_text(json.dumps(data, indent=1))
    data["seconds"] = round(time.perf_counter() - t0, 1)
    if args.json:
        args.json.write_text(json.dumps(data, indent=1))
    return data


if __name__ == "__main__":
    main()
