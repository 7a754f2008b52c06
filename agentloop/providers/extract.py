"""Code extraction from an LLM's answer.

Answers hold prose and fenced blocks (```python, ``` or ~~~, possibly indented in a list, the last
one possibly never closed). `extract_code` picks the block that is the candidate: among Python
blocks (tagged python/py or untagged), the last one that defines the entry function, else the
largest. An answer that is bare Python (no fences) is taken whole. An answer without code gives
None, which the caller turns into feedback.
"""

from __future__ import annotations

import ast
import re

from pydantic import BaseModel

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n]*?)[ \t]*$")
_PYTHON_TAGS = {"", "python", "py", "python3", "py3", "triton", "ipython"}


class CodeBlock(BaseModel):
    """One fenced block of an answer."""

    language: str
    """The fence's language tag, lower-cased; "" when untagged."""
    code: str
    closed: bool = True
    """False for a block the answer never closed (it runs to the end)."""

    @property
    def is_python(self) -> bool:
        return self.language in _PYTHON_TAGS


def code_blocks(answer: str) -> list[CodeBlock]:
    """Every fenced block of an answer, in order."""
    lines = answer.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    blocks: list[CodeBlock] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        # A backtick fence's info string cannot contain backticks (CommonMark); `x` inline is not a fence.
        if not m or (m["fence"][0] == "`" and "`" in m["info"]):
            i += 1
            continue
        fence, indent = m["fence"], len(m["indent"])
        language = m["info"].split()[0].lower().lstrip("{.").rstrip("}") if m["info"] else ""
        body: list[str] = []
        closed = False
        i += 1
        while i < len(lines):
            line = lines[i]
            stripped = line.lstrip(" ")
            if (len(line) - len(stripped) <= 3 and stripped.startswith(fence[0] * len(fence))
                    and not stripped.strip(fence[0]).strip()):
                closed = True
                i += 1
                break
            # Content of an indented fence loses up to the fence's indentation.
            body.append(line[min(indent, len(line) - len(line.lstrip(" "))):])
            i += 1
        blocks.append(CodeBlock(language=language, code="\n".join(body).strip("\n") + "\n", closed=closed))
    return blocks


def _defines(code: str, entry: str) -> bool:
    return re.search(rf"^\s*(async\s+)?def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE) is not None


def _bare_python(answer: str) -> str | None:
    """The whole answer, when it is Python source with a definition or import (no fences)."""
    text = answer.strip()
    if not text:
        return None
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
    return text + "\n" if any(isinstance(node, kinds) for node in tree.body) else None


def extract_code(answer: str, entry: str | None = None) -> str | None:
    """The candidate source in an answer, or None when it holds no code."""
    python = [b for b in code_blocks(answer) if b.is_python and b.code.strip()]
    if not python:
        return _bare_python(answer) if "```" not in answer and "~~~" not in answer else None
    if entry:
        defining = [b for b in python if _defines(b.code, entry)]
        if defining:
            return defining[-1].code
    # Largest block; among equals the last, the answer's final word.
    best = max(range(len(python)), key=lambda k: (len(python[k].code.strip()), k))
    return python[best].code
