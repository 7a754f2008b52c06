"""docs/reference/ holds the command-line and file interfaces generated from the code: a change to
a command, an option, or a field of a file's pydantic model fails here until the documents are
regenerated (`python -m agentloop.interfaces`)."""

from __future__ import annotations

import re

from agentloop.interfaces import DOCS, DOCUMENTS, field_docs


def test_reference_documents_match_the_code():
    for name, render in DOCUMENTS.items():
        text = re.sub(r"[ \t]+\n", "\n", render())
        assert (DOCS / name).read_text() == text, f"docs/reference/{name} is out of date: " \
            "run python -m agentloop.interfaces"


def test_every_campaign_key_is_documented():
    from agentloop.campaign.file import Campaign, EvalOptions
    from agentloop.loop.cell import Budget

    for model in (Campaign, Budget, EvalOptions):
        docs = field_docs(model)
        assert not [name for name in model.model_fields if not docs.get(name)], model.__name__


def test_a_new_option_shows_up_as_drift(monkeypatch):
    import typer

    from agentloop import cli

    before = DOCUMENTS["cli.md"]()

    @cli.app.command("extra")
    def extra(flag: bool = typer.Option(False, "--flag", help="A new flag.")) -> None:
        """A command added after the documents were written."""

    try:
        assert DOCUMENTS["cli.md"]() != before
    finally:
        cli.app.registered_commands.pop()
    assert DOCUMENTS["cli.md"]() == before
