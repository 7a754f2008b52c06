"""How long the correctness gate's inputs take to draw, on the CPU (default) and on the device
(`make_inputs(on_device=True)`), for every task's shapes in one dtype and seed; and whether the
two agree in every tensor's shape, dtype and device (the values differ: other generators).

    python bench/input_generation.py [--device cuda] [--tasks a,b]
"""

from __future__ import annotations

import argparse
import time

import torch

from gates.contract import load_suite
from gates.reference import make_inputs


def draw(task, device: str, on_device: bool) -> tuple[float, list]:
    start = time.perf_counter()
    layout = []
    for dims in task.shapes_for(device):
        inputs = make_inputs(task, dims, task.dtypes[0], 0, device, on_device=on_device)
        layout += [(k, tuple(v.shape), v.dtype, v.device.type) for k, v in inputs.items()
                   if isinstance(v, torch.Tensor)]
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start, layout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tasks", default="")
    args = parser.parse_args()
    suite = load_suite()
    names = args.tasks.split(",") if args.tasks else list(suite)
    print(f"{'task':<22} {'shapes':>6} {'cpu s':>7} {'device s':>9}  same layout")
    total = [0.0, 0.0]
    for name in names:
        task = suite[name]
        cpu_s, cpu_layout = draw(task, args.device, on_device=False)
        dev_s, dev_layout = draw(task, args.device, on_device=True)
        total[0] += cpu_s
        total[1] += dev_s
        print(f"{name:<22} {len(task.shapes_for(args.device)):>6} {cpu_s:>7.2f} {dev_s:>9.3f}  "
              f"{'yes' if cpu_layout == dev_layout else 'NO'}", flush=True)
    print(f"total: {total[0]:.1f} s drawn on the CPU, {total[1]:.2f} s on {args.device}")


if __name__ == "__main__":
    main()
