"""The `agentloop` command line.

Heavy modules (torch, LangGraph, matplotlib) are imported inside the commands, after the
cheap checks of their input, so a wrong path or flag is answered at once.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="LLM agents that write fast GPU kernels without breaking batch invariance.")
console = Console(soft_wrap=True)  # paths in messages must not be broken across lines
errors = Console(stderr=True, soft_wrap=True, highlight=False)
progress_console = Console(soft_wrap=True)
"""Where a run's progress goes: quiet with -q (results and errors are still printed)."""


def fail_input(message: str) -> None:
    """Exit 2 with a one-line message: the input could not be used."""
    errors.print(f"[bold red]error:[/] {escape(message)}")  # "[float32, H=256]" is no markup
    raise typer.Exit(2)


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("agentloop")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _show_version(value: bool) -> None:
    if value:
        print(f"agentloop {version()}")
        raise typer.Exit()


@app.callback()
def main(
    show_version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True,
                                      help="Print the version and exit."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Say more: log every stage each loop "
                                                              "starts and every candidate's outcome."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Say less: no progress display, only "
                                                            "results and errors."),
) -> None:
    """LLM agents that write fast GPU kernels without breaking batch invariance."""
    if verbose and quiet:
        fail_input("-v and -q contradict each other; give one")
    progress_console.quiet = quiet
    if verbose:
        from rich.logging import RichHandler

        logging.basicConfig(level=logging.INFO, format="%(message)s",
                            handlers=[RichHandler(console=errors, show_path=False)])


@app.command()
def tasks(as_json: bool = typer.Option(False, "--json", help="Print the suite as JSON.")) -> None:
    """List the task suite."""
    from rich.table import Table

    from gates.contract import TaskError, load_suite

    try:
        suite = load_suite()
    except TaskError as exc:
        fail_input(str(exc))
    def signature(t: Any) -> str:
        return f"{t.entry}(" + ", ".join(f"{a.name}[{','.join(a.axes)}]" if a.kind == "tensor" else a.name
                                         for a in t.args) + ")"

    if as_json:
        rows = [{"name": t.name, "summary": t.summary, "entry": t.entry, "signature": signature(t),
                 "batched": t.batched_args + [o.name for o in t.outputs if o.batched],
                 "dtypes": t.dtypes, "shapes": len(t.shapes)} for t in suite.values()]
        print(json.dumps(rows, indent=2))
        return
    from rich import box

    table = Table(title=f"{len(suite)} tasks", box=box.SIMPLE_HEAD)
    table.add_column("task", no_wrap=True, min_width=max(len(n) for n in suite))  # never cut a name
    # Break lines between arguments and dtypes, never inside one (rich folds only a word wider
    # than its column): each column is at least as wide as its longest word.
    args = lambda t: signature(t)[len(t.entry):] if t.entry == t.name else signature(t)
    longest_arg = max(len(w) for t in suite.values() for w in args(t).split())
    table.add_column("arguments", min_width=longest_arg, max_width=max(longest_arg, 30), overflow="fold")
    widest = max(len(d) for t in suite.values() for d in t.dtypes) + 1
    table.add_column("dtypes", min_width=widest, max_width=widest)
    table.add_column("summary", overflow="fold", min_width=20)
    for t in suite.values():
        # Escaped: rich would take "[T,H]" or "seq_lens[b]" for markup and drop it.
        table.add_row(t.name, escape(args(t)), escape(", ".join(t.dtypes)), escape(t.summary))
    Console(soft_wrap=False).print(table)
    console.print("arguments: the entry function's, named after the task; [axes] of each tensor",
                  highlight=False, markup=False)


def _positive(value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise typer.BadParameter(f"must be a positive number of seconds, not {value:g}")
    return value


@app.command()
def audit(
    candidate: Path | None = typer.Argument(None, help="The candidate kernel file (or give --entry)."),
    task: str = typer.Option(..., "--task", help="Task name, as `agentloop tasks` lists it."),
    entry: str | None = typer.Option(None, "--entry", help="Audit an installed library's callable in "
                                                          "place: package.module:function (it runs caged, "
                                                          "like a candidate)."),
    adapter: Path | None = typer.Option(None, "--adapter", help="With --entry: a file defining the task's "
                                                               "entry on top of the library's callable."),
    device: str | None = typer.Option(None, "--device", help="cpu or cuda (default: cuda if available)."),
    gate: list[str] | None = typer.Option(None, "--gate", help="static, dynamic or correctness; repeat "
                                                             "to run several (default: all)."),
    as_json: bool = typer.Option(False, "--json", help="Print the verdict as JSON."),
    timeout: float | None = typer.Option(None, "--timeout", callback=_positive,
                                         help="Seconds each gate may run the candidate; the audit "
                                              "stops at the first gate that runs out of time."),
    all_gates: bool = typer.Option(False, "--all-gates", help="Run every gate even after one rejected the "
                                                              "candidate with a sandbox (SB) or anti-cheat "
                                                              "(AC) finding (default: skip the rest)."),
) -> None:
    """Run the gates on one candidate: exit 0 accepted, 1 rejected, 2 unusable input."""
    from gates.contract import TaskError, get_task

    if device not in (None, "cpu", "cuda"):
        fail_input(f"unknown device {device!r}; use cpu or cuda")
    try:
        spec = get_task(task)
    except TaskError as exc:
        fail_input(str(exc))
    from gates.audit import GATES, default_device
    from gates.candidate import CandidateError

    unknown = [g for g in gate or [] if g not in GATES]
    if unknown:
        fail_input(f"unknown gate {unknown[0]!r}; gates are {', '.join(GATES)}")
    if device == "cuda" and default_device() != "cuda":
        fail_input("--device cuda: no CUDA device is available here; use --device cpu")
    if adapter is not None and entry is None:
        fail_input("--adapter goes with --entry package.module:function")
    if (candidate is None) == (entry is None):
        fail_input("give a candidate file or --entry package.module:function, not both" if entry
                   else "give a candidate file, or --entry package.module:function")
    with interrupts_raise():
        try:
            if entry is not None:
                from gates.library import resolve_entry

                candidate = resolve_entry(entry, spec, adapter)
            verdict = audit_until_timeout(candidate, spec, gate, device, timeout, all_gates)
        except CandidateError as exc:
            fail_input(str(exc))
        except KeyboardInterrupt:
            errors.print("interrupted", highlight=False)
            raise typer.Exit(130) from None
    from gates.audit import CPU_NOTE

    if as_json:
        from gates.audit import verdict_json

        print(json.dumps(verdict_json(verdict), indent=2))
    else:
        for result in verdict.gates:
            mark = "[green]pass[/]" if result.passed else "[bold red]FAIL[/]"
            covered = f"  [dim]{escape(result.coverage)}[/]" if result.coverage else ""
            console.print(f"{result.gate:<12} {mark}  {result.seconds:6.2f} s{covered}", highlight=False)
        if verdict.verdict == "reject" or "Warnings" in verdict.feedback:
            console.print(verdict.feedback, highlight=False, markup=False, soft_wrap=True)
        if verdict.isolation is not None:
            from gates.judge.isolation import describe_isolation

            console.print(f"[dim]caged: {describe_isolation(verdict.isolation)}[/]", highlight=False)
        colour = "green" if verdict.verdict == "accept" else "bold red"
        where = f" on {verdict.device}" + (f" ({CPU_NOTE})" if verdict.device == "cpu" else "")
        ran = [g for g in verdict.gates if g.coverage]
        covered = "; ".join(f"{g.gate} {g.coverage}" for g in ran) or (
            "static analysis only" if all(g.gate == "static" for g in verdict.gates)
            else "no sizes covered: the gates could not run the candidate")
        console.print(f"[{colour}]{verdict.verdict}[/]{where} ({verdict.seconds:.1f} s): {escape(covered)}",
                      highlight=False)
    raise typer.Exit(0 if verdict.verdict == "accept" else 1)


@contextmanager
def interrupts_raise() -> Iterator[None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt in the main thread while the block runs, even
    where the process was started with SIGINT ignored (a shell's background job); a second
    signal during the clean-up is ignored, so that the workers are still killed."""
    import signal

    def handler(signum: int, frame: Any) -> None:
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
        raise KeyboardInterrupt

    saved = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, old in saved.items():
            signal.signal(s, old)


class GateStatus:
    """The status line of a running audit: the gate, its elapsed seconds, what it last said."""

    def __init__(self) -> None:
        import time

        self.clock = time.monotonic
        self.gate, self.line, self.start = "", "", self.clock()

    def begin(self, gate: str) -> None:
        self.gate, self.line, self.start = gate, "", self.clock()

    def said(self, gate: str, line: str) -> None:
        if gate == self.gate:
            self.line = line

    def __rich__(self) -> str:
        said = f", {self.line}" if self.line else ""
        return escape(f"{self.gate} gate: {self.clock() - self.start:.0f} s{said}")


def audit_until_timeout(candidate: Any, spec: Any, gates: list[str] | None, device: str | None,
                        timeout: float | None, all_gates: bool = False) -> Any:
    """`gates.audit.audit`, gate by gate in one worker, stopping after the first gate that ran
    out of time (a hanging candidate would hang in every gate, each for the whole time-out) or
    could not import the candidate. While a gate runs, a status line on stderr (a terminal only)
    says which gate, for how long, and the dynamic gate's batch."""
    import contextlib
    import time

    from gates.audit import GATES, default_device
    from gates.audit import audit as run_audit
    from gates.feedback import render
    from gates.judge.sandbox import Sandbox
    from gates.library import IMPORT_FAILED
    from gates.verdict import Verdict

    wanted = [g for g in GATES if g in (gates or GATES)]
    start = time.perf_counter()
    results, isolation = [], None
    device = device or default_device()
    status = GateStatus()
    shown = errors.status(status) if errors.is_terminal else contextlib.nullcontext()
    sandbox = None
    try:
        with shown:
            sandbox = Sandbox(device) if any(g != "static" for g in wanted) else None
            for g in wanted:
                status.begin(g)
                one = run_audit(candidate, spec, gates=[g], device=device, timeout=timeout, sandbox=sandbox,
                                progress=status.said, all_gates=all_gates)
                results.extend(one.gates)
                isolation = one.isolation or isolation
                if any((r.error or "").startswith(("timed out", IMPORT_FAILED)) for r in one.gates):
                    break
    finally:
        if sandbox is not None:
            sandbox.close()
    verdict = Verdict(task=spec.name, candidate=str(candidate), seconds=time.perf_counter() - start,
                      verdict="accept" if all(r.passed for r in results) and len(results) == len(wanted)
                      else "reject", gates=results, isolation=isolation, device=device)
    verdict.feedback = render(verdict, spec, device)
    return verdict


def _campaign_for(campaign_file: Path | None, out: Path | None, resume: bool, model: str | None) -> Any:
    """The campaign to run: the file's, or on `--resume` without a file the run's own."""
    from gates.yaml_file import read_mapping

    if campaign_file is None:
        if not resume:
            fail_input("give a campaign file (agentloop run CAMPAIGN.yaml), or --resume --out DIR")
        if out is None:
            fail_input("--resume without a campaign file needs the run directory: --resume --out DIR")
        if not (out / "campaign.yaml").is_file():
            fail_input(f"{out} holds no run to resume (no campaign.yaml); start one with a campaign file")
        campaign_file = out / "campaign.yaml"
    try:
        raw = read_mapping(campaign_file, "campaign file", ValueError)  # before torch is imported
    except ValueError as exc:
        fail_input(str(exc))
    from agentloop.campaign.file import CampaignError, parse_campaign

    try:
        campaign = parse_campaign(raw, str(campaign_file))
    except CampaignError as exc:
        fail_input(str(exc))
    return campaign.with_model(model) if model else campaign


@app.command()
def run(
    campaign_file: Path | None = typer.Argument(None, metavar="[CAMPAIGN.yaml]",
                                                help="The campaign file (with --resume: default the "
                                                     "run's own campaign.yaml)."),
    out: Path | None = typer.Option(None, "--out", help="Run directory (default runs/<campaign name>)."),
    resume: bool = typer.Option(False, "--resume", help="Continue a stopped run in the run directory."),
    campaign_changed: bool = typer.Option(False, "--campaign-changed",
                                          help="With --resume: continue the run under a campaign file "
                                               "that differs from the run's own."),
    model: str | None = typer.Option(None, "--model", help="provider:model for every role, overriding "
                                                          "the campaign's."),
    until_idle: bool = typer.Option(False, "--until-idle",
                                    help="End the run (exit 0) as soon as every loop waits for an "
                                         "exchange: answer; resume it once they are answered."),
    ray: str | None = typer.Option(None, "--ray", metavar="ADDRESS",
                                   help="Evaluate on a Ray cluster: auto (the one `ray start` made), "
                                        "local (a Ray instance for this run) or HOST:PORT; off: the "
                                        "local worker pool. Overrides the campaign's cluster:."),
) -> None:
    """Run an optimisation campaign: every (task, style, mode) cell, then the reports.

    Ctrl-C (or SIGTERM) stops the run within seconds, keeping every finished result and
    checkpoint; a second Ctrl-C exits at once."""
    if out is not None and out.exists() and not out.is_dir():
        fail_input(f"--out {out} is a file, not a directory; choose another --out")
    if resume and out is not None and not (out / "results.sqlite").is_file():
        fail_input(f"{out} holds no run to resume (no results.sqlite); start one without --resume")
    campaign = _campaign_for(campaign_file, out, resume, model)
    out = out or Path("runs") / campaign.name
    from agentloop.campaign.file import CampaignError
    from agentloop.campaign.run import RunStopped, run_campaign
    from agentloop.providers import ProviderError
    from gates.contract import TaskError

    try:
        outcome = run_campaign(campaign, out, resume=resume, console=progress_console, handle_signals=True,
                               until_idle=until_idle, campaign_changed=campaign_changed, ray=ray)
    except (CampaignError, TaskError) as exc:
        fail_input(str(exc))
    except ProviderError as exc:
        errors.print(f"[bold red]error:[/] {exc}; the run so far is saved: continue it with "
                     f"agentloop run --resume --out {out}")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:  # before the run's own handlers were installed: nothing ran yet
        errors.print(f"interrupted; continue with: agentloop run --resume --out {out}")
        raise typer.Exit(130) from None
    except RunStopped as stop:
        print_stopped(stop)
        sys.stdout.flush()
        sys.stderr.flush()
        # Threads cut short (an LLM call, an exchange wait) are not waited for.
        os._exit(0 if stop.reason == "idle" else 130)
    held = "" if outcome.stages_held is None else \
        "; {} of {} in workers in a runner that held their candidate".format(*outcome.stages_held)
    if outcome.memory_retries:
        held += f"; {outcome.memory_retries} run again after the GPU ran out of memory"
    console.print(f"{outcome.ran} of {outcome.loops} loops run in {outcome.seconds:.0f} s (evaluation "
                  f"cache: {outcome.cache_hits} hits, {outcome.cache_misses} stages evaluated{held})",
                  highlight=False)
    for note in outcome.notes:
        console.print(note, highlight=False)
    try:
        print_reports(out)
    except KeyboardInterrupt:
        errors.print(f"interrupted while writing the reports; the run is complete: rebuild them with "
                     f"agentloop report {out}")
        raise typer.Exit(130) from None


def print_reports(out: Path) -> None:
    from agentloop.campaign.run import summary_table
    from agentloop.results.report import ReportError, write_reports

    try:
        summary = write_reports(out)
    except ReportError as exc:  # nothing finished (a run stopped before its first loop ended)
        console.print(f"no report yet: {exc}", highlight=False)
        return
    console.print(summary_table(summary), highlight=False)
    console.print(f"report: {out / 'report.html'}", highlight=False)


def print_stopped(stop: Any) -> None:
    """What a stopped run kept, and how to go on."""
    k = stop.kept
    say = Console(stderr=True, soft_wrap=True, highlight=False)
    if stop.reason == "idle":
        dirs = sorted({str(p.parent) for p, _ in k.waiting})
        say = console
        say.print(f"idle: {_requests_wait(len(k.waiting))} for an answer in "
                  f"{', '.join(dirs) or '-'}; the run ended after {stop.seconds:.0f} s", highlight=False)
    else:
        say.print(f"stopped by {stop.reason} after {stop.seconds:.0f} s; workers killed")
    say.print(f"kept in {k.run_dir}: {k.finished} of {k.loops} loops finished, {k.checkpointed} more at "
              f"their last checkpoint, {k.candidates} candidates recorded", highlight=False)
    say.print(f"continue with: agentloop run --resume --out {k.run_dir}", highlight=False)


@app.command()
def report(run_dir: Path = typer.Argument(..., metavar="DIR", help="A run directory (it holds "
                                                                    "results.sqlite).")) -> None:
    """Rebuild the reports of a run directory: summary.json, report.md, report.html and plots."""
    if not run_dir.is_dir():
        fail_input(f"{run_dir} is not a directory; give a run directory (it holds results.sqlite)")
    if not (run_dir / "results.sqlite").is_file():
        fail_input(f"{run_dir} holds no results.sqlite; give the directory that `agentloop run` wrote")
    from agentloop.campaign.run import summary_table
    from agentloop.results.report import ReportError, write_reports

    try:
        summary = write_reports(run_dir)
    except ReportError as exc:
        fail_input(str(exc))
    console.print(summary_table(summary), highlight=False)
    console.print(f"{len(summary['cells'])} cells; report: {run_dir / 'report.html'}", highlight=False)


@app.command()
def status(run_dir: Path = typer.Argument(..., metavar="DIR", help="A run directory."),
           as_json: bool = typer.Option(False, "--json", help="Print the status as JSON.")) -> None:
    """List a run's loops, the stage each is at, and the exchange requests they wait for."""
    if not (run_dir / "results.sqlite").is_file():
        fail_input(f"{run_dir} holds no run (no results.sqlite); give the directory `agentloop run` wrote")
    from rich.table import Table

    from agentloop.campaign.file import CampaignError
    from agentloop.campaign.status import run_status

    try:
        found = run_status(run_dir)
    except CampaignError as exc:
        fail_input(str(exc))
    if as_json:
        print(found.model_dump_json(indent=2))
        return
    table = Table(title=f"{found.campaign}: {run_dir}")
    table.add_column("loop", no_wrap=True)
    for col in ("state", "candidates", "final / waits for"):
        table.add_column(col, overflow="fold")
    for loop in found.loops:
        table.add_row(loop.loop, loop.state, str(loop.candidates), loop.final or ", ".join(loop.waits_for))
    Console(soft_wrap=False).print(table)
    done = sum(loop.state == "finished" for loop in found.loops)
    console.print(f"{done} of {len(found.loops)} loops finished; exchange "
                  f"{_requests_wait(len(found.waiting))} for an answer", highlight=False)
    for w in found.waiting:
        console.print(f"  {w.request} -> answer in {w.respond_with} ({w.loop or w.task or '?'})",
                      highlight=False)




def _requests_wait(n: int) -> str:
    return f"{n} request waits" if n == 1 else f"{n} requests wait"


def _register() -> None:
    """Commands that live in `agentloop.commands`, on this app."""
    from agentloop.commands import model
    from agentloop.frameworks.endpoint import serve_llm

    app.command("model-check")(model.model_check)
    app.command("export")(model.export)
    app.command("serve-llm")(serve_llm)


_register()

if __name__ == "__main__":
    app()
