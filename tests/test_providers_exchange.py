"""`exchange:DIR`: requests as JSON files, answered by a thread playing the person."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from agentloop.providers import Message, ProviderError, get_provider

MESSAGES = [Message(role="system", content="You write kernels."),
            Message(role="user", content="task: softmax")]


def _answer_when_asked(directory: Path, n: int, reply: dict, seen: list[dict]) -> threading.Thread:
    """A thread that waits for request n, keeps it, and writes the reply the documented way."""

    def run():
        request = directory / f"{n}.request.json"
        deadline = time.monotonic() + 10
        while not request.is_file() and time.monotonic() < deadline:
            time.sleep(0.02)
        seen.append(json.loads(request.read_text()))
        tmp = directory / f"{n}.response.json.tmp"
        tmp.write_text(json.dumps(reply))
        os.replace(tmp, directory / seen[-1]["respond_with"])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_person_answers_through_files(tmp_path):
    seen: list[dict] = []
    provider = get_provider(f"exchange:{tmp_path}", poll_s=0.02, timeout_s=10)
    thread = _answer_when_asked(tmp_path, 1, {"text": "```python\nx = 1\n```", "output_tokens": 4,
                                              "model": "a person"}, seen)
    completion = provider.complete(MESSAGES, seed=3)
    thread.join()
    assert completion.text == "```python\nx = 1\n```"
    assert (completion.output_tokens, completion.model, completion.provider) == (4, "a person", "exchange")
    (request,) = seen
    assert request["messages"] == [m.model_dump() for m in MESSAGES]
    assert request["seed"] == 3 and request["n"] == 1 and request["respond_with"] == "1.response.json"
    # The next request gets the next number.
    thread = _answer_when_asked(tmp_path, 2, {"text": "second"}, seen)
    assert provider.complete(MESSAGES + [Message(role="user", content="again")]).text == "second"
    thread.join()


def test_no_answer_is_a_one_line_timeout(tmp_path):
    provider = get_provider(f"exchange:{tmp_path}", poll_s=0.02, timeout_s=0.3)
    start = time.monotonic()
    with pytest.raises(ProviderError, match="no answer in .*1.response.json after 0.3 s") as info:
        provider.complete(MESSAGES)
    assert time.monotonic() - start < 3 and "\n" not in str(info.value)
    assert (tmp_path / "1.request.json").is_file()


def test_a_resumed_run_does_not_ask_again(tmp_path):
    # A run killed while waiting: the request is on disk, the person answers later.
    with pytest.raises(ProviderError):
        get_provider(f"exchange:{tmp_path}", poll_s=0.02, timeout_s=0.1).complete(MESSAGES, seed=1)
    (tmp_path / "1.response.json").write_text(json.dumps({"text": "late answer"}))
    resumed = get_provider(f"exchange:{tmp_path}", poll_s=0.02, timeout_s=1)
    assert resumed.complete(MESSAGES, seed=1).text == "late answer"
    assert not (tmp_path / "2.request.json").exists()
    with pytest.raises(ProviderError):  # another seed is another request
        resumed.complete(MESSAGES, seed=2)
    assert (tmp_path / "2.request.json").is_file()


def test_response_without_text_is_reported(tmp_path):
    thread = _answer_when_asked(tmp_path, 1, {"answer": "wrong key"}, [])
    with pytest.raises(ProviderError, match="unreadable.*text"):
        get_provider(f"exchange:{tmp_path}", poll_s=0.02, timeout_s=0.5).complete(MESSAGES)
    thread.join()


def test_a_stray_response_file_is_not_taken_for_a_new_request(tmp_path):
    (tmp_path / "1.response.json").write_text(json.dumps({"text": "stale"}))
    with pytest.raises(ProviderError):
        get_provider(f"exchange:{tmp_path}", poll_s=0.02, timeout_s=0.1).complete(MESSAGES)
    assert (tmp_path / "2.request.json").is_file()


def test_exchange_needs_a_directory():
    with pytest.raises(ProviderError, match="exchange:<dir>"):
        get_provider("exchange")
