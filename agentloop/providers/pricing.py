"""The price table: USD per million input and output tokens, by model name.

Prices change; the defaults below are list prices at the time of writing. Override or extend
them with a YAML file named by $AGENTLOOP_PRICES, or pass `prices=` to a provider:

    gpt-4o: {input: 2.50, output: 10.00}
    my-local-model: {input: 0, output: 0}

A model is priced by the longest table key its name starts with, so `claude-sonnet-4-5-20250929`
uses `claude-sonnet-4-5`. A model with no entry has an unknown cost (None), not zero.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from agentloop.providers.errors import ProviderError


class Price(BaseModel):
    """USD per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    input: float
    output: float


DEFAULT_PRICES: dict[str, Price] = {name: Price(input=i, output=o) for name, (i, o) in {
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-5": (1.25, 10.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
    "o3": (2.00, 8.00),
    "o3-mini": (1.10, 4.40),
    "o4-mini": (1.10, 4.40),
    "claude-opus-4": (15.00, 75.00),
    "claude-opus-4-5": (5.00, 25.00),
    "claude-sonnet-4": (3.00, 15.00),
    "claude-3-7-sonnet": (3.00, 15.00),
    "claude-3-5-sonnet": (3.00, 15.00),
    "claude-haiku-4-5": (1.00, 5.00),
    "claude-3-5-haiku": (0.80, 4.00),
}.items()}


def load_prices(path: str | Path | None = None) -> dict[str, Price]:
    """The default table updated with a YAML file (path, else $AGENTLOOP_PRICES, else none)."""
    path = path or os.environ.get("AGENTLOOP_PRICES")
    table = dict(DEFAULT_PRICES)
    if not path:
        return table
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(raw, dict):
            raise ValueError("expected a mapping of model -> {input, output}")
        table.update({str(k): Price.model_validate(v) for k, v in raw.items()})
    except (OSError, yaml.YAMLError, ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ProviderError(f"price table {path}: {first}") from None
    return table


def price_for(model: str, prices: dict[str, Price] | None = None) -> Price | None:
    """The entry for a model: exact name, else the longest key the name starts with."""
    table = prices if prices is not None else load_prices()
    if model in table:
        return table[model]
    keys = [k for k in table if model.startswith(k)]
    return table[max(keys, key=len)] if keys else None


def cost_usd(model: str, input_tokens: int, output_tokens: int,
             prices: dict[str, Price] | None = None) -> float | None:
    """What a call cost, or None when the model has no price."""
    price = price_for(model, prices)
    if price is None:
        return None
    return (input_tokens * price.input + output_tokens * price.output) / 1e6
