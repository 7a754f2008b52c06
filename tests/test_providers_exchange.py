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


# A malformed response file is named, once, and a corrected one is taken ----------------------
def test_a_malformed_response_is_named_once_and_a_corrected_one_is_taken(tmp_path, caplog):
    provider = get_provider(f"exchange:{tmp_path}", poll_s=0.01, timeout_s=10)
    response = tmp_path / "1.response.json"

    def person():
        while not (tmp_path / "1.request.json").is_file():
            time.sleep(0.01)
        response.write_text('{"text": "first"\n "model": "me"}')  # a comma missing
        time.sleep(0.3)  # many polls: still one message for this content
        response.write_text('{"text": "second"')  # another mistake: named too
        time.sleep(0.3)
        tmp = tmp_path / ".1.response.json.tmp"
        tmp.write_text(json.dumps({"text": "corrected"}))
        os.replace(tmp, response)

    thread = threading.Thread(target=person, daemon=True)
    thread.start()
    with caplog.at_level("WARNING", logger="agentloop.exchange"):
        assert provider.complete(MESSAGES).text == "corrected"
    thread.join()
    messages = [r.getMessage() for r in caplog.records if r.name == "agentloop.exchange"]
    assert messages == [
        f"exchange: {response} is not valid JSON (Expecting ',' delimiter: line 2 column 2); "
        "waiting for a corrected file",
        f"exchange: {response} is not valid JSON (Expecting ',' delimiter: line 1 column 18); "
        "waiting for a corrected file"], messages


def test_status_shows_a_malformed_response(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from agentloop.cli import app

    run = _run_dir(tmp_path / "run")
    answers = run / "answers"
    answers.mkdir()
    request = {"n": 1, "respond_with": "1.response.json", "messages": [],
               "meta": {"cell": "refine/baseline/exchange:answers", "task": "rms_norm", "role": "coder"}}
    (answers / "1.request.json").write_text(json.dumps(request))
    (answers / "1.response.json").write_text('{"text": "x",}')
    monkeypatch.chdir(tmp_path)  # anywhere: the run's own exchange folder is read
    result = CliRunner().invoke(app, ["status", str(run), "--json"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    (waiting,) = found["waiting"]
    assert waiting["problem"] == f"{answers / '1.response.json'} is not valid JSON (Expecting property " \
        "name enclosed in double quotes: line 1 column 14)"
    (loop,) = found["loops"]
    assert loop["state"] == f"waiting for a corrected answer: {waiting['problem']}"


# A relative exchange directory is the run directory's ------------------------------------------
def _run_dir(run: Path, model: str = "exchange:answers") -> Path:
    """A run directory as `agentloop run` leaves it before any loop finished."""
    import yaml

    from agentloop.campaign.file import Campaign
    from agentloop.campaign.run import campaign_dump
    from agentloop.results.store import Store

    run.mkdir(parents=True)
    campaign = Campaign(name="x", tasks=["rms_norm"], styles=["refine"], modes=["baseline"], model=model,
                        model_options={"poll_s": 0.02, "timeout_s": 0.2})
    (run / "campaign.yaml").write_text(yaml.safe_dump(campaign_dump(campaign), sort_keys=False))
    Store(run / "results.sqlite").close()
    return run


def test_a_run_resumed_from_another_directory_waits_in_its_own_exchange_folder(tmp_path, monkeypatch):
    from agentloop.campaign.file import load_campaign
    from agentloop.campaign.run import make_providers

    run = _run_dir(tmp_path / "project" / "runs" / "x")
    campaign = load_campaign(run / "campaign.yaml")
    monkeypatch.chdir(tmp_path / "project")
    first = make_providers(campaign, run)["coder"]
    with pytest.raises(ProviderError):  # stopped while waiting
        first.complete(MESSAGES, seed=1)
    assert (run / "answers" / "1.request.json").is_file()
    (run / "answers" / "1.response.json").write_text(json.dumps({"text": "late answer"}))

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    resumed = make_providers(campaign, run)["coder"]
    assert resumed.dir == run / "answers" and resumed.complete(MESSAGES, seed=1).text == "late answer"
    assert not (elsewhere / "answers").exists() and not (run / "answers" / "2.request.json").exists()


def test_a_run_that_asked_beside_the_current_directory_keeps_that_folder(tmp_path, monkeypatch):
    # Started before relative directories were the run's: its requests are in ./answers.
    from agentloop.campaign.file import load_campaign
    from agentloop.campaign.run import make_providers

    run = _run_dir(tmp_path / "runs" / "x")
    (tmp_path / "answers").mkdir()
    (tmp_path / "answers" / "1.request.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    provider = make_providers(load_campaign(run / "campaign.yaml"), run)["coder"]
    assert provider.dir == tmp_path / "answers" and not (run / "answers").exists()
