"""Time the dynamic BI gate on every corpus candidate and compare its verdict with the
candidate's measured label (manifest `gpu` / `cpu` field for the device, else `expected`).

    python bench/dynamic_gate.py [--device cpu|cuda] [--tasks a,b] [--runs 2] [--timeout S]
                                 [--json OUT] [--plan]
    python bench/dynamic_gate.py --from-json RUN.json [RUN2.json ...] [--markdown]

Each candidate runs in a sandbox worker; the gate runs `--runs` times in the same worker and
the last run's time is reported as the gate time excluding the first compile (Triton's JIT and
autotuning happen in the first run). The static gate's verdict is shown beside it, and "both"
is the verdict of static and dynamic together. Prints a table, per-task medians and the overall
median; the target on GPU is a median of at most 2 s per candidate. `--plan` only prints the
size of each task's plan on the CPU and the GPU (candidate calls, batch rows, generated
elements), computed without a device. `--from-json` reports saved runs instead (a GPU machine's,
whose files do not come back): later files replace earlier rows of the same candidate, and the
agreement is recomputed against the manifests' current labels; `--markdown` prints the table as
Markdown.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from gates.audit import DEFAULT_TIMEOUT, default_device
from gates.contract import TaskError, load_task, tasks_dir
from gates.corpus import load_manifest, manifest_path
from gates.dynamic import plan_size
from gates.judge.sandbox import Job, Sandbox
from gates.source import static_result


def measured_label(entry, device: str) -> tuple[str, str]:
    measured = entry.gpu if device == "cuda" else entry.cpu
    return (measured.label, device) if measured else (entry.expected, "expected")


def verdict_text(result) -> str:
    if result is None:
        return "-"
    if result.passed:
        return "pass"
    return "error" if result.error else "FAIL"


def agreement(label: str, verdict: str) -> str:
    """Whether the dynamic gate's verdict ("pass", "FAIL": a counterexample, "error") matches
    the label (an invariant candidate must pass, a variant one must give a counterexample);
    broken candidates have no BI label."""
    if label == "broken":
        return "n/a"
    if label == "invariant":
        return "yes" if verdict == "pass" else "NO"
    if verdict == "error":
        return "error"
    return "yes" if verdict == "FAIL" else "NO"


def bench_candidate(box: Sandbox, task, path: Path, runs: int, timeout: float) -> dict:
    times, result, error = [], None, None
    for _ in range(runs):
        job = Job("gates.dynamic:dynamic_job", {"code": Path(path).read_text(), "task": task,
                                                "device": box.device})
        outcome = box.run(job, timeout)
        times.append(outcome.seconds)  # inside the worker: no start-up or transfer
        if not outcome.ok:
            error = outcome.error
            break
        result = outcome.value
        if result.error:
            break  # a failing candidate fails the same way again
    static = static_result(path.read_text(), task, path)
    return {"result": result, "error": error, "static": static, "cold": times[0], "warm": times[-1]}


def print_plan_sizes(names: list[str]) -> None:
    """Per task and device: candidate calls, batch rows and generated elements of one gate run
    (the positive control repeats the calls on the same inputs)."""
    print(f"{'task':<22} {'device':<6} {'calls':>6} {'rows':>7} {'generated elements':>19}")
    for name in names:
        try:
            task = load_task(tasks_dir() / f"{name}.yaml")
        except TaskError as exc:
            print(f"skip {name}: {exc}")
            continue
        for device in ("cpu", "cuda"):
            size = plan_size(task, device)
            print(f"{name:<22} {device:<6} {size.calls:>6} {size.rows:>7} {size.generated:>19,}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None)
    parser.add_argument("--tasks", default="", help="comma-separated task names (default: all with a corpus)")
    parser.add_argument("--runs", type=int, default=2, help="gate runs per candidate; the last is timed")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds per gate run (default: the audit's, 300 on CPU, 120 on CUDA)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--plan", action="store_true", help="print each task's plan size and exit")
    parser.add_argument("--from-json", type=Path, nargs="+", metavar="RUN.json",
                        help="report saved runs (later files win per candidate) instead of running")
    parser.add_argument("--markdown", action="store_true", help="with --from-json: a Markdown table")
    args = parser.parse_args()
    if args.from_json:
        rows, device = saved_rows(args.from_json)
        if args.markdown:
            print_markdown(rows)
        summarise(rows, device)
        return
    names = args.tasks.split(",") if args.tasks else [p.stem for p in sorted(tasks_dir().glob("*.yaml"))]
    if args.plan:
        print_plan_sizes(names)
        return
    device = args.device or default_device()
    timeout = args.timeout or DEFAULT_TIMEOUT[device]
    rows = []
    print(f"{'task':<22} {'candidate':<34} {'label':<18} {'static':<6} {'dynamic':<7} {'both':<6} "
          f"{'agrees':<6} {'cold s':>7} {'warm s':>7}  detail", flush=True)
    with Sandbox(device) as box:
        for name in names:
            try:
                task = load_task(tasks_dir() / f"{name}.yaml")
            except TaskError as exc:
                print(f"skip {name}: {exc}", flush=True)
                continue
            if not manifest_path(task).is_file():
                continue
            for entry in load_manifest(task).candidates:
                path = task.candidates_dir / entry.file
                out = bench_candidate(box, task, path, args.runs, timeout)
                label, source = measured_label(entry, device)
                dyn, static = out["result"], out["static"]
                both = "reject" if (dyn is None or not dyn.passed or not static.passed) else "accept"
                cx = dyn.counterexample if dyn else None
                detail = out["error"] or (dyn.error if dyn and dyn.error else "") or \
                    (f"B={cx.batch_size} pos={cx.position} vs B={cx.reference_batch_size}: "
                     f"{cx.context.split(':')[0]}" if cx else "")
                verdict = verdict_text(dyn) if dyn else "error"
                row = {"task": name, "candidate": entry.file, "label": label, "label_source": source,
                       "static": verdict_text(static), "dynamic": verdict,
                       "both": both, "agrees": agreement(label, verdict), "cold_s": round(out["cold"], 3),
                       "warm_s": round(out["warm"], 3), "detail": detail[:120]}
                rows.append(row)
                if args.json:  # after every row, so a run cut by a time limit keeps what it measured
                    args.json.write_text(json.dumps({"device": device, "rows": rows}, indent=2))
                labelled = f"{label} ({source})"
                print(f"{name:<22} {entry.file[:34]:<34} {labelled:<18} {row['static']:<6} "
                      f"{row['dynamic']:<7} {both:<6} {row['agrees']:<6} {row['cold_s']:>7.2f} "
                      f"{row['warm_s']:>7.2f}  {row['detail']}", flush=True)
    if not rows:
        sys.exit("no corpus candidates found")
    summarise(rows, device)


def summarise(rows: list[dict], device: str) -> None:
    print("\nper-task median of warm dynamic-gate seconds:")
    for name in dict.fromkeys(r["task"] for r in rows):
        warm = [r["warm_s"] for r in rows if r["task"] == name]
        print(f"  {name:<22} {statistics.median(warm):6.2f} s over {len(warm)} candidates")
    warm = [r["warm_s"] for r in rows]
    checked = [r for r in rows if r["agrees"] != "n/a"]
    print(f"overall median {statistics.median(warm):.2f} s, max {max(warm):.2f} s ({device}); "
          f"dynamic verdict agrees with the label on {sum(r['agrees'] == 'yes' for r in checked)}"
          f"/{len(checked)} labelled candidates")
    invariant_rejected = [r for r in rows if r["label"] == "invariant" and r["both"] == "reject"]
    variant_accepted = [r for r in rows if r["label"] == "variant" and r["both"] == "accept"]
    print(f"static+dynamic: {len(variant_accepted)} variant accepted, "
          f"{len(invariant_rejected)} invariant rejected")
    for r in checked:
        if r["agrees"] != "yes":
            print(f"  disagrees: {r['task']}/{r['candidate']}: label {r['label']}, dynamic {r['dynamic']}")


def saved_rows(paths: list[Path]) -> tuple[list[dict], str]:
    """Rows of saved runs, relabelled from the manifests; later files win per candidate."""
    by_key: dict[tuple[str, str], dict] = {}
    devices = set()
    for path in paths:
        saved = json.loads(path.read_text())
        devices.add(saved["device"])
        for row in saved["rows"]:
            by_key[(row["task"], row["candidate"])] = row
    if len(devices) != 1:
        sys.exit(f"error: the files hold runs of several devices: {sorted(devices)}")
    device = devices.pop()
    order = {name: i for i, name in enumerate(sorted(p.stem for p in tasks_dir().glob("*.yaml")))}
    entries = {}  # (task, file) -> manifest entry, each task's manifest read once
    for name in {name for name, _ in by_key}:
        for entry in load_manifest(load_task(tasks_dir() / f"{name}.yaml")).candidates:
            entries[(name, entry.file)] = entry
    rows = []
    for key, row in sorted(by_key.items(), key=lambda kv: order.get(kv[0][0], len(order))):
        label, source = measured_label(entries[key], device)
        # The saved verdict, judged against today's label.
        rows.append({**row, "label": label, "label_source": source,
                     "agrees": agreement(label, row["dynamic"])})
    return rows, device


def print_markdown(rows: list[dict]) -> None:
    print("| task | candidate | GPU label | static | dynamic | both | agrees | cold s | warm s | detail |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        detail = r["detail"].replace("|", "\\|")
        print(f"| {r['task']} | `{r['candidate']}` | {r['label']} | {r['static']} | {r['dynamic']} | "
              f"{r['both']} | {r['agrees']} | {r['cold_s']:.2f} | {r['warm_s']:.2f} | {detail} |")


if __name__ == "__main__":
    main()
