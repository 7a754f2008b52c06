"""FlagGems' argmax over the vocabulary as the task's greedy_sample (int64 token ids)."""

import os

os.environ.setdefault("GEMS_VENDOR", "nvidia")  # else FlagGems probes vendors by running their tools

from flag_gems.ops.argmax import argmax  # noqa: E402


def greedy_sample(logits):
    return argmax(logits, dim=-1)
