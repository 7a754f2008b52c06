"""The prompt templates (`prompts/<role>.<mode>.j2`, Jinja2) and the task brief they render.

    prompts = Prompts()
    messages = prompts.messages("coder", "bi-aware", **task_brief(task, "cpu"))

A role template defines a `system` block and a `user` block; a follow-up turn (`feedback`,
`revise`) defines only `user`. Nothing prompt-like lives in code: this module only loads the
templates and gathers the facts about a task they show.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import jinja2

from agentloop.evaluation.benchmark import bench_dims
from agentloop.providers import Message
from gates.contract import Task

Mode = Literal["baseline", "bi-aware"]
MODES: tuple[Mode, ...] = ("baseline", "bi-aware")


class PromptError(ValueError):
    """A template that is missing or does not render; the message is one line."""


def prompts_dir() -> Path:
    """The templates' directory: $AGENTLOOP_PROMPTS, else `prompts/` of this checkout."""
    env = os.environ.get("AGENTLOOP_PROMPTS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "prompts"


_FENCED = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n]*\n.*?(?:^ {0,3}\1[ \t]*$|\Z)", re.MULTILINE | re.DOTALL)


def without_code(text: str, placeholder: str = "") -> str:
    """Text with its fenced code blocks replaced by a placeholder (the `without_code` filter:
    a planner's or reviewer's answer shown to the coder, whose job the kernel is)."""
    return _FENCED.sub(placeholder, text).strip()


def task_brief(task: Task, device: str) -> dict[str, Any]:
    """What the templates show about a task on a device (the variables of `_task.j2` and
    `_contract.j2`); the wording is the templates'."""
    ragged_axis, ragged_arg = next(iter((task.ragged or {}).items()), (None, None))
    return {
        "task": task,
        "device": device,
        "shapes": task.shapes_for(device),
        "bench_shapes": bench_dims(task, device),
        "reference": task.reference_path.read_text().strip(),
        "ragged": ragged_axis,
        "ragged_arg": ragged_arg,
    }


class Prompts:
    """The templates of one prompts directory."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory else prompts_dir()
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(self.directory), undefined=jinja2.StrictUndefined,
            trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
        self.env.filters["without_code"] = without_code

    def _template(self, role: str, mode: Mode) -> jinja2.Template:
        name = f"{role}.{mode}.j2"
        try:
            return self.env.get_template(name)
        except jinja2.TemplateNotFound:
            raise PromptError(f"no prompt template {self.directory / name}") from None
        except jinja2.TemplateSyntaxError as exc:
            raise PromptError(f"{exc.filename or name} line {exc.lineno}: {exc.message}") from None

    def block(self, role: str, mode: Mode, block: str, **variables: Any) -> str | None:
        """One block of a role's template rendered, or None when the template has no such block."""
        template = self._template(role, mode)
        render = template.blocks.get(block)
        if render is None:
            return None
        try:
            text = "".join(render(template.new_context(variables)))
        except jinja2.UndefinedError as exc:
            raise PromptError(f"{role}.{mode}.j2: {exc.message}") from None
        return text.strip() + "\n"

    def messages(self, role: str, mode: Mode, **variables: Any) -> list[Message]:
        """A role's opening messages: its system block (when it has one) and its user block."""
        system = self.block(role, mode, "system", **variables)
        user = self.block(role, mode, "user", **variables)
        if user is None:
            raise PromptError(f"{role}.{mode}.j2 has no user block")
        opening = [Message(role="system", content=system)] if system else []
        return opening + [Message(role="user", content=user)]

    def turn(self, role: str, mode: Mode, **variables: Any) -> Message:
        """A later user turn (feedback, a review to act on)."""
        user = self.block(role, mode, "user", **variables)
        if user is None:
            raise PromptError(f"{role}.{mode}.j2 has no user block")
        return Message(role="user", content=user)
