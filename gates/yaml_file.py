"""Reading the project's YAML files (tasks, campaigns) with one-line errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError


def read_mapping(path: Path, what: str, error: type[Exception]) -> dict[str, Any]:
    """The mapping in a YAML file; `error` with a one-line message naming the file otherwise."""
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise error(f"{path}:{where} not valid YAML") from None
    if not isinstance(raw, dict):
        raise error(f"{path}: a {what} must be a mapping of keys")
    return raw


def field_path(loc: tuple) -> str:
    """A pydantic error location as `args[0].dtype`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def one_line(exc: ValidationError) -> str:
    """The first error of a validation as `field: what is wrong`."""
    err = exc.errors()[0]
    # Drop pydantic's markers for dict keys and union branches ("[key]", "list[str]").
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p))
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    elif err["type"] == "literal_error":
        msg = f"{err.get('input')!r} is not allowed ({msg[msg.find('Input should be') + 16:]})"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    return f"{field_path(loc) or '(top level)'}: {msg}"
