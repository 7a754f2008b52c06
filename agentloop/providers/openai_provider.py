"""`openai:<model>`: the OpenAI chat completions API through the official SDK.

Honours OPENAI_API_KEY and OPENAI_BASE_URL, so vLLM, SGLang, Ollama or any compatible server
works: `OPENAI_BASE_URL=http://127.0.0.1:8000/v1 agentloop run ... --model openai:<served model>`.
"""

from __future__ import annotations

import os
from typing import Any

import openai

from agentloop.providers.base import HTTPProvider, Message, RetryableError, one_line, status_error


class OpenAIProvider(HTTPProvider):
    """Chat completions; the request's `seed` is passed through (servers may ignore it)."""

    name = "openai"
    key_var = "OPENAI_API_KEY"

    def __init__(self, model: str = "", **options: Any):
        super().__init__(model, **options)
        self.base_url = os.environ.get("OPENAI_BASE_URL") or None
        kwargs: dict[str, Any] = {"base_url": self.base_url} if self.base_url else {}
        # max_retries=0: the SDK's own retries would multiply ours.
        self.client = openai.OpenAI(api_key=self.api_key, max_retries=0, timeout=self.options.timeout_s,
                                    **kwargs)

    def _send(self, messages: list[Message], seed: int | None) -> tuple[str, int, int]:
        params: dict[str, Any] = {}
        if seed is not None:
            params["seed"] = seed
        if self.options.temperature is not None:
            params["temperature"] = self.options.temperature
        if self.options.max_tokens is not None:
            params["max_completion_tokens"] = self.options.max_tokens
        if self.options.extra_body:
            params["extra_body"] = self.options.extra_body
        try:
            response = self.client.chat.completions.create(
                model=self.model, messages=[{"role": m.role, "content": m.content} for m in messages],
                **params)
        except openai.APIStatusError as exc:
            raise status_error(self.spec, exc.status_code, exc.response.headers, exc.message,
                               self.key_var) from exc
        except openai.APIConnectionError as exc:  # timeouts included
            where = self.base_url or "the OpenAI API"
            raise RetryableError(f"{self.spec}: cannot reach {where}: {one_line(exc)}") from exc
        text = (response.choices[0].message.content or "") if response.choices else ""
        usage = response.usage
        return text, (usage.prompt_tokens if usage else 0), (usage.completion_tokens if usage else 0)
