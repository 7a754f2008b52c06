"""FlagGems' log_softmax over the last axis (aten's _log_softmax signature)."""

import os

os.environ.setdefault("GEMS_VENDOR", "nvidia")  # else FlagGems probes vendors by running their tools

from flag_gems.ops.log_softmax import log_softmax as _gems_log_softmax  # noqa: E402


def log_softmax(x):
    return _gems_log_softmax(x, -1)
