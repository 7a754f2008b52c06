"""`anthropic:<model>`: the Anthropic Messages API through the official SDK.

Honours ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL. System messages go in the request's top-level
`system` field, as the Messages API wants; there is no seed parameter, so `seed` is ignored.
"""

from __future__ import annotations

import os
from typing import Any

import anthropic

from agentloop.providers.base import HTTPProvider, Message, RetryableError, one_line, status_error

DEFAULT_MAX_TOKENS = 8192
"""The Messages API requires max_tokens; used when the options leave it unset."""


def to_messages_api(messages: list[Message]) -> tuple[str, list[dict[str, str]]]:
    """(system text, turns): system messages joined; consecutive turns of one role merged."""
    system = "\n\n".join(m.content for m in messages if m.role == "system")
    turns: list[dict[str, str]] = []
    for m in messages:
        if m.role == "system":
            continue
        if turns and turns[-1]["role"] == m.role:
            turns[-1]["content"] += "\n\n" + m.content
        else:
            turns.append({"role": m.role, "content": m.content})
    return system, turns


class AnthropicProvider(HTTPProvider):
    """Messages API; the answer is the concatenation of the response's text blocks."""

    name = "anthropic"
    key_var = "ANTHROPIC_API_KEY"

    def __init__(self, model: str = "", **options: Any):
        super().__init__(model, **options)
        self.base_url = os.environ.get("ANTHROPIC_BASE_URL") or None
        kwargs: dict[str, Any] = {"base_url": self.base_url} if self.base_url else {}
        # max_retries=0: the SDK's own retries would multiply ours.
        self.client = anthropic.Anthropic(api_key=self.api_key, max_retries=0,
                                          timeout=self.options.timeout_s, **kwargs)

    def _send(self, messages: list[Message], seed: int | None) -> tuple[str, int, int]:
        system, turns = to_messages_api(messages)
        params: dict[str, Any] = {"max_tokens": self.options.max_tokens or DEFAULT_MAX_TOKENS}
        if system:
            params["system"] = system
        if self.options.temperature is not None:
            params["temperature"] = self.options.temperature
        if self.options.extra_body:
            params["extra_body"] = self.options.extra_body
        try:
            response = self.client.messages.create(model=self.model, messages=turns, **params)
        except anthropic.APIStatusError as exc:
            raise status_error(self.spec, exc.status_code, exc.response.headers, exc.message,
                               self.key_var) from exc
        except anthropic.APIConnectionError as exc:  # timeouts included
            where = self.base_url or "the Anthropic API"
            raise RetryableError(f"{self.spec}: cannot reach {where}: {one_line(exc)}") from exc
        text = "".join(b.text for b in response.content if getattr(b, "type", "") == "text")
        usage = response.usage
        return text, (usage.input_tokens if usage else 0), (usage.output_tokens if usage else 0)
