"""The `agentloop` command line."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from gates.contract import TaskError, get_task, load_suite

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="LLM agents that write fast GPU kernels without breaking batch invariance.")
console = Console(soft_wrap=True)  # paths in messages must not be broken across lines


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


@app.command()
def audit(
    candidate: Path = typer.Argument(..., help="The candidate kernel file."),
    task: str = typer.Option(..., "--task", help="Task name, as `agentloop tasks` lists it."),
    device: str | None = typer.Option(None, "--device", help="cpu or cuda (default: cuda if available)."),
    gate: list[str] | None = typer.Option(None, "--gate", help="static, dynamic or correctness; repeat "
                                                             "to run several (default: all)."),
    as_json: bool = typer.Option(False, "--json", help="Print the verdict as JSON."),
    timeout: float | None = typer.Option(None, "--timeout", help="Seconds each gate may run the candidate."),
) -> None:
    """Run the gates on one candidate: exit 0 accepted, 1 rejected, 2 unusable input."""
    from gates.audit import GATES, default_device
    from gates.audit import audit as run_audit
    from gates.candidate import CandidateError

    try:
        spec = get_task(task)
    except TaskError as exc:
        fail_input(str(exc))
    unknown = [g for g in gate or [] if g not in GATES]
    if unknown:
        fail_input(f"unknown gate {unknown[0]!r}; gates are {', '.join(GATES)}")
    if device not in (None, "cpu", "cuda"):
        fail_input(f"unknown device {device!r}; use cpu or cuda")
    if device == "cuda" and default_device() != "cuda":
        fail_input("--device cuda: no CUDA device is available here; use --device cpu")
    try:
        verdict = run_audit(candidate, spec, gates=gate, device=device, timeout=timeout)
    except CandidateError as exc:
        fail_input(str(exc))
    if as_json:
        from gates.audit import verdict_json

        print(json.dumps(verdict_json(verdict), indent=2))
    else:
        for result in verdict.gates:
            mark = "[green]pass[/]" if result.passed else "[bold red]FAIL[/]"
            console.print(f"{result.gate:<12} {mark}  {result.seconds:6.2f} s", highlight=False)
        if verdict.verdict == "reject" or "Warnings" in verdict.feedback:
            console.print(verdict.feedback, highlight=False, markup=False, soft_wrap=True)
        colour = "green" if verdict.verdict == "accept" else "bold red"
        console.print(f"[{colour}]{verdict.verdict}[/] ({verdict.seconds:.1f} s)", highlight=False)
    raise typer.Exit(0 if verdict.verdict == "accept" else 1)


@app.command()
def run(
    campaign_file: Path = typer.Argument(..., metavar="CAMPAIGN.yaml", help="The campaign file."),
    out: Path | None = typer.Option(None, "--out", help="Run directory (default runs/<campaign name>)."),
    resume: bool = typer.Option(False, "--resume", help="Continue a killed run in the run directory."),
    model: str | None = typer.Option(None, "--model", help="provider:model for every role, overriding "
                                                          "the campaign's."),
) -> None:
    """Run an optimisation campaign: every (task, style, mode) cell, then the reports."""
    from agentloop.campaign import CampaignError, load_campaign
    from agentloop.providers import ProviderError
    from agentloop.report import write_reports
    from agentloop.runner import run_campaign, summary_table

    try:
        campaign = load_campaign(campaign_file)
    except CampaignError as exc:
        fail_input(str(exc))
    if model:
        campaign = campaign.with_model(model)
    out = out or Path("runs") / campaign.name
    try:
        outcome = run_campaign(campaign, out, resume=resume, console=console)
    except (CampaignError, TaskError) as exc:
        fail_input(str(exc))
    except ProviderError as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {exc}; the run so far is saved: continue it with "
                                   f"--resume --out {out}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        Console(stderr=True).print(f"interrupted; continue the run with --resume --out {out}",
                                   highlight=False)
        raise typer.Exit(130) from None
    console.print(f"{outcome.ran} of {outcome.loops} loops run in {outcome.seconds:.0f} s "
                  f"(evaluation cache: {outcome.cache_hits} hits, {outcome.cache_misses} stages evaluated)",
                  highlight=False)
    console.print(summary_table(write_reports(out)), highlight=False)
    console.print(f"report: {out / 'report.html'}", highlight=False)


@app.command()
def report(run_dir: Path = typer.Argument(..., metavar="DIR", help="A run directory (it holds "
                                                                    "results.sqlite).")) -> None:
    """Rebuild the reports of a run directory: summary.json, report.md, report.html and plots."""
    from agentloop.report import ReportError, write_reports
    from agentloop.runner import summary_table

    try:
        summary = write_reports(run_dir)
    except ReportError as exc:
        fail_input(str(exc))
    console.print(summary_table(summary), highlight=False)
    console.print(f"{len(summary['cells'])} cells; report: {run_dir / 'report.html'}", highlight=False)


if __name__ == "__main__":
    app()
