"""LLM providers addressed as `provider:model`: openai, anthropic, replay, exchange.

    provider = get_provider("openai:gpt-4o", temperature=0.2)
    completion = provider.complete([Message(role="user", content="task: rms_norm\\n...")], seed=0)

The registry maps a short name to a lazily imported class (or factory), so an SDK is imported
only when its provider is used.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from pydantic import ValidationError

from agentloop.providers.base import (
    Completion,
    Message,
    MissingKeyError,
    Provider,
    ProviderError,
    RetryPolicy,
    request_hash,
)
from agentloop.providers.record import ExchangeRecord, ExchangeRecorder, RecordingProvider, read_exchanges

PROVIDERS: dict[str, str] = {
    "openai": "agentloop.providers.openai_provider:OpenAIProvider",
    "anthropic": "agentloop.providers.anthropic_provider:AnthropicProvider",
    "replay": "agentloop.providers.replay:replay_provider",
    "exchange": "agentloop.providers.exchange:ExchangeProvider",
}


def provider_factory(name: str) -> Any:
    """The class (or factory) registered under a short name."""
    if name not in PROVIDERS:
        near = difflib.get_close_matches(name, PROVIDERS, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise ProviderError(f"unknown provider {name!r}; {hint}valid providers: {', '.join(PROVIDERS)}")
    module, attr = PROVIDERS[name].split(":")
    return getattr(importlib.import_module(module), attr)


def get_provider(spec: str, **options: Any) -> Provider:
    """The provider for `provider:model` (e.g. "openai:gpt-4o", "replay", "exchange:/tmp/x")."""
    name, model = (spec.strip().split(":", 1) + [""])[:2]
    factory = provider_factory(name)
    try:
        return factory(model, **options)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ProviderError(f"{spec}: option {where}: {err['msg']}") from None


__all__ = [
    "PROVIDERS", "Completion", "ExchangeRecord", "ExchangeRecorder", "Message", "MissingKeyError",
    "Provider", "ProviderError", "RecordingProvider", "RetryPolicy", "get_provider", "provider_factory",
    "read_exchanges", "request_hash",
]
