"""The model check's figures: per kernel set, requests whose logprobs / tokens differ between alone
and continuously batched serving, the finder's first divergent op, batched tokens/s, and the wall
time of the set's whole check (both schedules twice, the finder included); with --serving, each
set's batched tokens/s with its kernels in a caged serving process (column "served": the
end-to-end batch-invariance tax, without the check's cage crossing per op call); --served-only
times each set in its serving process without checking it (its tokens then compared with nothing).

    python bench/model_check.py --config tiny-llama --device cpu --set eager --set corpus
    python bench/model_check.py --config llama-h200 --device cuda --set eager --set compiled \\
        --set corpus --set baseline=run:RUN_DIR:baseline --set bi-aware=run:RUN_DIR:bi-aware --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentloop.model.session import check_sets, serve_sets  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="tiny-llama")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--set", dest="sets", action="append", default=[])
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--gate-shapes", action="store_true")
    parser.add_argument("--twins", choices=("auto", "on", "off"), default="auto",
                        help="copies of a caged set's runners for its first runs (auto: on a GPU)")
    parser.add_argument("--serving", action="store_true", help="also time each set in a serving process")
    parser.add_argument("--served-only", action="store_true",
                        help="only time each set in a serving process (no check: tokens not compared)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.served_only:
        return served_only(args)
    rows, reports = [], []
    for spec in args.sets or ["eager", "corpus"]:
        start = time.perf_counter()
        report = check_sets([spec], args.config, requests=args.requests, new_tokens=args.new_tokens,
                            device=args.device, gate_shapes=args.gate_shapes,
                            serving=args.serving,
                            twin_runs={"auto": None, "on": True, "off": False}[args.twins])
        seconds = time.perf_counter() - start
        s = report.sets[0]
        first = next((c.divergence.describe() for c in s.requests if c.divergence is not None), "-")
        served = s.serving.tokens_per_s if s.serving and not s.serving.error else float("nan")
        if s.serving and (s.serving.error or s.serving.tokens_match is False):
            print(f"{s.name}: serving process: {s.serving.error or 'tokens NOT as in the check'}", flush=True)
        rows.append((s.name, s.differing, s.tokens_differing, s.nondeterministic, s.batched_tokens_per_s,
                     served, seconds, s.error or first))
        reports.append({**report.model_dump(mode="json"), "seconds": seconds})
        phases = ", ".join(f"{k} {v:.1f}" for k, v in s.phases.items())
        print(f"{s.name}: logprobs differ {s.differing}/{report.requests}, tokens differ "
              f"{s.tokens_differing}/{report.requests}, nondeterministic {s.nondeterministic}, "
              f"{s.batched_tokens_per_s:.0f} tokens/s batched, {seconds:.1f} s ({phases}); "
              f"first: {s.error or first}", flush=True)
    print(f"\n{report.model} on {args.device}, {args.requests} requests x {args.new_tokens} tokens")
    print(f"{'set':<24}{'logprobs':>9}{'tokens':>8}{'nondet':>7}{'tok/s':>9}{'served':>9}{'s':>7}  "
          f"first divergence")
    for name, d, t, n, tps, served, sec, first in rows:
        print(f"{name:<24}{d:>9}{t:>8}{n:>7}{tps:>9.0f}{served:>9.0f}{sec:>7.1f}  {first[:150]}")
    if args.json:
        args.json.write_text(json.dumps(reports, indent=1) + "\n")
    return 0


def served_only(args: argparse.Namespace) -> int:
    speeds = {}
    for spec in args.sets or ["eager", "corpus"]:
        start = time.perf_counter()
        for name, sv in serve_sets([spec], args.config, requests=args.requests, new_tokens=args.new_tokens,
                                   device=args.device).items():
            speeds[name] = {**sv.model_dump(mode="json"), "seconds_with_start": time.perf_counter() - start}
            said = f"failed: {sv.error}" if sv.error else (
                f"{sv.tokens_per_s:.0f} tokens/s served ({sv.tokens} tokens in {sv.seconds:.2f} s; "
                "tokens not compared)")
            print(f"{name}: {said}", flush=True)
    if args.json:
        record = {"config": args.config, "device": args.device, "requests": args.requests,
                  "new_tokens": args.new_tokens, "served": speeds}
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
