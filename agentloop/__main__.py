"""`python -m agentloop ...`: the same CLI as the `agentloop` command."""

from agentloop.cli import app

app(prog_name="agentloop")
