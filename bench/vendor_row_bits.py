"""Which batch sizes change a row's bits in a vendor reduction (a GPU fact the corpus relies on).

    python bench/vendor_row_bits.py [--device cuda] [--hidden 4096]

For torch.linalg.vector_norm(x, dim=-1), x.float().pow(2).mean(-1) and x.sum(-1), float32 rows
of length H: batches of B rows are prefixes of one random matrix, so row r is the same data in
every batch of more than r rows; for rows 0 and 8 the printed groups list the batch sizes whose
result for that row has the same bits. One group means batch-invariant over the sizes tried.
"""

from __future__ import annotations

import argparse

import torch

SIZES = [*range(1, 17), 24, 31, 32, 48, 63, 64, 96, 127, 128, 192, 255, 256, 384, 511, 512, 513,
         640, 768, 1024, 1025, 1536, 2048, 3072, 4096, 8192]

OPS = {
    "vector_norm": lambda x: torch.linalg.vector_norm(x, ord=2, dim=-1, dtype=torch.float32),
    "pow2_mean": lambda x: x.pow(2).mean(-1),
    "sum": lambda x: x.sum(-1),
}


def groups(device: str, hidden: int, op, row: int) -> list[list[int]]:
    gen = torch.Generator(device="cpu").manual_seed(0)
    rows = torch.randn(max(SIZES), hidden, generator=gen).to(device)
    seen: dict[bytes, list[int]] = {}
    for b in (b for b in SIZES if b > row):
        value = op(rows[:b].clone())[row]
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        seen.setdefault(value.cpu().numpy().tobytes(), []).append(b)
    return list(seen.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--hidden", type=int, action="append", help="row length H (repeatable; default 4096)")
    args = parser.parse_args()
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"device {name}; torch {torch.__version__}")
    for hidden in args.hidden or [4096]:
        for label, op in OPS.items():
            for row in (0, 8):
                found = groups(args.device, hidden, op, row)
                text = "  ".join("{" + ",".join(map(str, g)) + "}" for g in found)
                print(f"H={hidden:<6} {label:<12} row {row}: {len(found)} group(s): {text}")


if __name__ == "__main__":
    main()
