"""The provider registry (`provider:model` strings), the retry policy and the price table."""

from __future__ import annotations

import email.utils
import time

import pytest

from agentloop.providers import PROVIDERS, ProviderError, get_provider
from agentloop.providers.base import (
    RetryableError,
    RetryPolicy,
    call_with_retries,
    retry_after_seconds,
    status_error,
)
from agentloop.providers.pricing import DEFAULT_PRICES, cost_usd, load_prices, price_for
from agentloop.providers.replay import ReplayProvider, RunReplayProvider


def test_unknown_provider_lists_the_valid_ones_with_a_suggestion():
    with pytest.raises(ProviderError) as info:
        get_provider("anthropik:claude")
    message = str(info.value)
    assert "did you mean 'anthropic'?" in message and all(name in message for name in PROVIDERS)


def test_spec_parsing():
    assert isinstance(get_provider("replay"), ReplayProvider)
    assert isinstance(get_provider("replay:corpus"), ReplayProvider)
    assert get_provider("replay").spec == "replay"
    with pytest.raises(ProviderError, match="openai needs a model"):
        get_provider("openai")


def test_replay_run_dir_keeps_colons_after_the_first(tmp_path):
    run = tmp_path / "a:b"
    run.mkdir()
    (run / "exchanges.jsonl").write_text("")
    provider = get_provider(f"replay:{run}")
    assert isinstance(provider, RunReplayProvider) and provider.model == str(run)


def test_bad_option_is_one_line():
    with pytest.raises(ProviderError, match="option temprature") as info:
        get_provider("replay", temprature=0.2)
    assert "\n" not in str(info.value)


def test_retry_after_forms():
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < retry_after_seconds({"retry-after": later}) <= 30
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


@pytest.mark.parametrize(("status", "retryable"), [(400, False), (401, False), (403, False), (404, False),
                                                   (408, True), (429, True), (500, True), (529, True)])
def test_status_classification(status, retryable):
    assert isinstance(status_error("x:y", status, {}, "detail", "KEY"), RetryableError) == retryable


def test_waits_honour_retry_after_capped_and_stop_at_the_attempts():
    waits, calls = [], []

    def flaky():
        calls.append(1)
        raise RetryableError("busy", retry_after=100.0 if len(calls) == 1 else None)

    policy = RetryPolicy(attempts=3, backoff_s=0.5, max_wait_s=7)
    with pytest.raises(ProviderError, match="gave up after 3 attempts"):
        call_with_retries(flaky, policy, sleep=waits.append)
    assert len(calls) == 3 and waits[0] == 7 and 0.5 <= waits[1] <= 1.5


def test_final_errors_are_not_retried():
    calls = []

    def denied():
        calls.append(1)
        raise ProviderError("denied")

    with pytest.raises(ProviderError, match="^denied$"):
        call_with_retries(denied, RetryPolicy(attempts=5), sleep=lambda s: None)
    assert len(calls) == 1


def test_prices_by_longest_prefix_and_overridable(tmp_path, monkeypatch):
    assert price_for("gpt-4o-mini-2024-07-18") == DEFAULT_PRICES["gpt-4o-mini"]
    assert price_for("claude-sonnet-4-5-20250929") == DEFAULT_PRICES["claude-sonnet-4"]
    assert cost_usd("unheard-of", 10, 10) is None
    table = tmp_path / "prices.yaml"
    table.write_text("gpt-4o: {input: 1.0, output: 2.0}\nmy-model: {input: 0.5, output: 0.5}\n")
    monkeypatch.setenv("AGENTLOOP_PRICES", str(table))
    assert cost_usd("gpt-4o", 1_000_000, 500_000) == pytest.approx(2.0)
    assert cost_usd("my-model", 2_000_000, 0) == pytest.approx(1.0)
    table.write_text("gpt-4o: {input: 1.0}\n")
    with pytest.raises(ProviderError, match="prices.yaml"):
        load_prices()


def test_anthropic_turns_system_out_and_same_role_merged():
    from agentloop.providers import Message
    from agentloop.providers.anthropic_provider import to_messages_api

    system, turns = to_messages_api([
        Message(role="system", content="a"), Message(role="user", content="b"),
        Message(role="system", content="c"), Message(role="user", content="d"),
        Message(role="assistant", content="e")])
    assert system == "a\n\nc"
    assert turns == [{"role": "user", "content": "b\n\nd"}, {"role": "assistant", "content": "e"}]
