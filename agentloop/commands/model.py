"""`agentloop model-check` and `agentloop export`: kernel sets composed into a model, and written out
as a package. Registered on the command line's app by `agentloop.cli`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

console = Console(soft_wrap=True)
errors = Console(stderr=True, soft_wrap=True, highlight=False)

DEFAULT_SETS = ["eager", "corpus"]


def _fail(message: str) -> None:
    errors.print(f"[bold red]error:[/] {escape(message)}")
    raise typer.Exit(2)


def _device(device: str | None) -> str:
    if device is None:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        _fail(f"--device {device}: use cpu or cuda")
    return device


def model_check(
    sets: list[str] = typer.Option(None, "--set", metavar="SPEC", help="A kernel set, repeatable: eager, "
                                   "compiled, reference, corpus, run:DIR[:MODE], archive[:FILE], files:DIR "
                                   "or files:TASK=PATH,..., entry:TASK=pkg.mod:fn; NAME=SPEC names it. "
                                   "Default: eager and corpus."),
    config: str = typer.Option("tiny-llama", "--config", metavar="NAME|PATH",
                               help="A bundled config (tiny-llama, tiny-moe, llama-h200), a config.json, or "
                                    "a directory with config.json and *.safetensors (real weights)."),
    requests: int = typer.Option(16, "--requests", min=1, help="Requests to serve (fillers come on top)."),
    new_tokens: int = typer.Option(32, "--new-tokens", min=1, help="Greedy tokens per request."),
    seed: int = typer.Option(0, "--seed", help="Seeds prompts, arrivals and random weights."),
    device: str = typer.Option(None, "--device", help="cpu or cuda (default: cuda when a GPU is visible)."),
    gate_shapes: bool = typer.Option(False, "--gate-shapes", help="Also run the dynamic gate on each kernel "
                                     "at the shapes the model called it with."),
    serving: bool = typer.Option(False, "--serving", help="Also time each set with its kernels in a caged "
                                 "serving process of their own (the end-to-end batch-invariance tax); the "
                                 "check's tokens/s include the cage's crossing per op call."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    plot: Path = typer.Option(None, "--plot", metavar="PNG", help="Write a plot of what differed."),
) -> None:
    """Serve requests alone and continuously batched on each kernel set, compare every request's
    tokens and logprobs bit for bit, and name the first op that diverged. Exit 0: every request
    reproducible; 1: some request differs; 2: the input could not be used."""
    from agentloop.model.check import exit_status
    from agentloop.model.config import ModelInputError
    from agentloop.model.session import check_sets

    device = _device(device)
    try:
        report = check_sets(sets or DEFAULT_SETS, config, requests=requests, new_tokens=new_tokens, seed=seed,
                            device=device, gate_shapes=gate_shapes, serving=serving,
                            progress=None if as_json else lambda s: errors.print(escape(s)))
    except ModelInputError as exc:
        _fail(str(exc))
    if plot is not None:
        from agentloop.model.plot import plot_report

        plot_report(report, plot)
    if as_json:
        sys.stdout.write(json.dumps(report.model_dump(mode="json"), indent=1) + "\n")
    else:
        from agentloop.model.check import render_table
        from agentloop.model.session import render_details

        console.print(render_table(report))
        for line in render_details(report):
            console.print(escape(line), highlight=False)
    raise typer.Exit(exit_status(report))


def export(
    spec: str = typer.Argument(..., metavar="SET", help="The kernel set to export (as model-check's --set)."),
    out: Path = typer.Option(Path("exported"), "--out", help="Where the package goes (OUT/NAME, and "
                             "OUT/pyproject.toml so `pip install OUT` installs it)."),
    name: str = typer.Option("bi_kernels", "--name", help="The package's import name."),
    namespace: str = typer.Option(None, "--namespace", help="The custom ops' namespace (default: the name)."),
    tasks: str = typer.Option(None, "--tasks", help="Comma-separated tasks (default: all the set has)."),
    device: str = typer.Option(None, "--device", help="Whose verdicts to take for the corpus (cpu or cuda)."),
    force: bool = typer.Option(False, "--force", help="Replace OUT/NAME if it exists."),
) -> None:
    """Write a kernel set as a self-contained package: kernel files, manifest.json, torch.library
    custom ops with fake implementations, and set_batch_invariant_mode() routing ATen ops."""
    from agentloop.export.build import export_set
    from agentloop.export.package import ExportError
    from agentloop.model.config import ModelInputError

    chosen = [t.strip() for t in tasks.split(",") if t.strip()] if tasks else None
    try:
        package = export_set(spec, out, name, device=_device(device), tasks=chosen, namespace=namespace,
                             force=force)
    except (ExportError, ModelInputError) as exc:
        _fail(str(exc))
    manifest = json.loads((package / "manifest.json").read_text())
    console.print(f"wrote {package}: {len(manifest['kernels'])} kernels "
                  f"({', '.join(k['task'] for k in manifest['kernels'])}); ATen ops routed: "
                  f"{', '.join(manifest['routed_aten_ops']) or 'none'}", highlight=False)
    if manifest["not_exported"]:
        console.print(f"not in the set (eager torch): {', '.join(manifest['not_exported'])}", highlight=False)
