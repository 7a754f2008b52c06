"""The `agentloop` command line."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from gates.contract import TaskError, load_suite

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="LLM agents that write fast GPU kernels without breaking batch invariance.")
console = Console()


def fail_input(message: str) -> None:
    """Exit 2 with a one-line message: the input could not be used."""
    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


@app.command()
def tasks(as_json: bool = typer.Option(False, "--json", help="Print the suite as JSON.")) -> None:
    """List the task suite."""
    try:
        suite = load_suite()
    except TaskError as exc:
        fail_input(str(exc))
    if as_json:
        rows = [{"name": t.name, "summary": t.summary, "entry": t.entry,
                 "batched": t.batched_args + [o.name for o in t.outputs if o.batched],
                 "dtypes": t.dtypes, "shapes": len(t.shapes)} for t in suite.values()]
        print(json.dumps(rows, indent=2))
        return
    table = Table(title=f"{len(suite)} tasks")
    for col in ("task", "entry signature", "dtypes", "summary"):
        table.add_column(col)
    for t in suite.values():
        sig = ", ".join(f"{a.name}[{','.join(a.axes)}]" if a.kind == "tensor" else a.name for a in t.args)
        table.add_row(t.name, f"{t.entry}({sig})", ",".join(t.dtypes), t.summary)
    console.print(table)


if __name__ == "__main__":
    app()
