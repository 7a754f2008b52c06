"""The model check as a picture, in the report's style: per kernel set, the requests whose
logprobs and whose tokens differed between alone and batched serving, and the batched tokens/s."""

from __future__ import annotations

from pathlib import Path

from agentloop.model.check import ModelCheckReport


def plot_report(report: ModelCheckReport, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [s.name for s in report.sets]
    x = range(len(names))
    fig, (left, right) = plt.subplots(1, 2, figsize=(max(6.0, 1.6 * len(names) + 3), 3.6))
    left.bar([i - 0.2 for i in x], [s.differing for s in report.sets], width=0.4, label="logprobs differ")
    left.bar([i + 0.2 for i in x], [s.tokens_differing for s in report.sets], width=0.4,
             label="tokens differ")
    left.set_ylim(0, max(report.requests, 1))
    left.set_ylabel(f"requests of {report.requests}")
    left.set_title("alone vs continuously batched")
    left.legend(fontsize=8)
    right.bar(list(x), [s.batched_tokens_per_s for s in report.sets], color="tab:gray")
    right.set_ylabel("tokens/s (batched)")
    right.set_title(f"on {report.device}")
    for axis in (left, right):
        axis.set_xticks(list(x), names, rotation=20, ha="right", fontsize=8)
    fig.suptitle(report.model, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
