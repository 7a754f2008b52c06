"""FlagGems' softmax over the last axis (aten's _softmax signature)."""

import os

os.environ.setdefault("GEMS_VENDOR", "nvidia")  # else FlagGems probes vendors by running their tools

from flag_gems.ops.softmax import softmax as _gems_softmax  # noqa: E402


def softmax(x):
    return _gems_softmax(x, -1)
