"""The frame right above the candidate's entry: a function whose file and module name say
nothing of the judge ("worker.py", module "worker"), so a candidate that reads the name of its
caller (through `warnings`' stack levels or `logging`'s caller lookup, which the audit hook
cannot refuse without refusing honest code) sees a serving worker, the same in every stage.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

_MODULE_CODE = compile("def forward(*args):\n    return _entry(*args)\n", "worker.py", "exec")
CODE = next(c for c in _MODULE_CODE.co_consts if hasattr(c, "co_code"))
"""The code of every `forward`: the audit hook trusts this object, not whatever bears its file name."""


def calling(entry: Callable[..., Any]) -> Callable[..., Any]:
    """`entry` behind one frame of neutral names."""
    namespace: dict[str, Any] = {"__name__": "worker", "__builtins__": builtins, "_entry": entry}
    exec(_MODULE_CODE, namespace)  # noqa: S102 - our own two lines
    return namespace["forward"]
