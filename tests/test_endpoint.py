"""The campaign's model as an OpenAI-compatible endpoint on loopback (agentloop.frameworks.endpoint),
through the real `openai` SDK over HTTP: answers from our providers, every exchange recorded with
its tokens (exchanges.jsonl and results.sqlite), errors as OpenAI errors, 127.0.0.1 only, and a
taken port as one line and exit 2 from `serve-llm`."""

from __future__ import annotations

import socket

import openai
import pytest
import typer
from typer.testing import CliRunner

from agentloop.frameworks.endpoint import HOST, Endpoint, EndpointError, RecordedProvider, serve_llm
from agentloop.providers import Completion, ProviderError, get_provider, read_exchanges
from agentloop.results.store import Store


def _client(endpoint: Endpoint) -> openai.OpenAI:
    return openai.OpenAI(base_url=endpoint.url, api_key="unused", max_retries=0, timeout=30)


def test_replay_answers_through_the_openai_sdk_and_every_exchange_is_recorded(tmp_path):
    backend = RecordedProvider(get_provider("replay"), tmp_path)
    with Endpoint(backend, model="replay") as endpoint:
        assert endpoint.url.startswith(f"http://{HOST}:")
        client = _client(endpoint)
        answer = client.chat.completions.create(
            model="replay", seed=3,
            messages=[{"role": "system", "content": "You write Triton kernels."},
                      {"role": "user", "content": "task: rms_norm\nWrite the kernel."}])
        text = answer.choices[0].message.content
        assert "def rms_norm" in text and answer.choices[0].finish_reason == "stop"
        assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens
        assert [m.id for m in client.models.list().data] == ["replay"]
    records = read_exchanges(tmp_path)
    assert len(records) == 1 and records[0].seed == 3 and records[0].text == text
    assert records[0].meta == {"cell": "serve-llm", "task": "rms_norm", "role": "coder", "turn": 0}
    rows = Store(tmp_path / "results.sqlite").query("SELECT * FROM exchanges")
    assert len(rows) == 1 and rows[0]["task"] == "rms_norm" and rows[0]["response"] == text
    assert backend.calls == 1 and "1 exchange," in backend.totals()


def test_tokens_and_cost_come_back_and_provider_errors_are_openai_errors(tmp_path):
    def complete(messages, seed):
        if "fail" in messages[-1].content:
            raise ProviderError("fake: the model is down")
        return Completion(text=f"{len(messages)} {seed}", input_tokens=11, output_tokens=7, model="m",
                          provider="fake", cost_usd=0.5)

    with Endpoint(complete) as endpoint:
        client = _client(endpoint)
        answer = client.chat.completions.create(model="x", messages=[
            {"role": "developer", "content": "sys"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]}])
        assert answer.choices[0].message.content == "2 None"
        assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (11, 7)
        with pytest.raises(openai.APIStatusError) as err:
            client.chat.completions.create(model="x", messages=[{"role": "user", "content": "fail"}])
        assert err.value.status_code == 502 and "the model is down" in str(err.value)
        with pytest.raises(openai.BadRequestError, match="streaming"):
            client.chat.completions.create(model="x", stream=True,
                                           messages=[{"role": "user", "content": "a"}])
        with pytest.raises(openai.BadRequestError, match="role"):
            client.chat.completions.create(model="x", messages=[{"role": "tool", "content": "a",
                                                                 "tool_call_id": "1"}])


def test_it_listens_on_loopback_only_and_a_taken_port_is_one_line():
    with Endpoint(lambda m, s: None) as endpoint:
        assert endpoint.server.server_address[0] == "127.0.0.1"
        with pytest.raises(EndpointError, match=rf"^port {endpoint.port} on 127.0.0.1 is taken"):
            Endpoint(lambda m, s: None, port=endpoint.port)


def test_serve_llm_refuses_a_taken_port_with_exit_2(tmp_path):
    app = typer.Typer()
    app.command("serve-llm")(serve_llm)
    app.command("other")(lambda: None)  # a group, as in agentloop's cli
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["serve-llm", "--model", "replay", "--port", str(port),
                                          "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: port {port} on 127.0.0.1 is taken; choose another --port"]


def test_serve_llm_refuses_an_unknown_provider_with_exit_2():
    app = typer.Typer()
    app.command("serve-llm")(serve_llm)
    app.command("other")(lambda: None)
    result = CliRunner().invoke(app, ["serve-llm", "--model", "nosuch:model", "--port", "0"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
