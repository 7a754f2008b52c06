"""The campaign file (`tasks/campaigns/<name>.yaml`, docs/reference/files.md) loaded into pydantic models.

A campaign runs every (task, style, mode) combination: each (style, mode, provider) is a
*cell*, and each cell runs one optimisation loop per task.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentloop.evaluation.stages import STAGE_TIMEOUTS, EvalSettings, Stage
from agentloop.loop.cell import Budget, Cell
from agentloop.loop.prompts import MODES, Mode
from agentloop.loop.styles import (
    DEFAULT_STYLES,
    EvolveSettings,
    OpenEvolveSettings,
    RefineSettings,
    Role,
    StyleName,
    TeamSettings,
)
from agentloop.loop.styles.openevolve import missing_extra
from agentloop.results.archive import ArchiveOptions
from gates.contract import TaskError, load_suite
from gates.yaml_file import one_line, read_mapping


class CampaignError(ValueError):
    """A campaign file that cannot be used; the message is one line naming the file and the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EvalOptions(_Strict):
    """How candidates are evaluated (part of the evaluation-cache key)."""

    stage_timeout_s: dict[Stage, float] = Field(default_factory=dict)
    """Per-stage wall-clock limits overriding the defaults (compile 120, static 30, dynamic 300,
    correctness 300, benchmark 600; on a CPU dynamic 240 and correctness 120)."""
    cuda_graph: bool = False
    """Benchmark with CUDA-graph replay."""
    compile_reference: bool = False
    """Also time a torch.compile'd reference as a second baseline."""
    production_baselines: bool = True
    """Time the task's production baselines (`baselines:` in its task file) beside candidate and
    reference; false times only those two (shorter benchmarks, no `production_speedup`)."""


class Cluster(_Strict):
    """Evaluation on a Ray cluster instead of this machine's worker pool (`pip install
    'agentloop[ray]'`): actors that each own one GPU (or CPUs on a cpu campaign) and run the same
    sandboxed evaluation as the local pool. Where evaluations run never changes their results, so
    a run may be resumed with or without a cluster."""

    ray: str
    """The cluster: auto (the one `ray start` made, as RAY_ADDRESS or this machine says), local (a
    Ray instance started for this run alone), or HOST:PORT of its head node."""
    actors: int | None = Field(default=None, ge=1)
    """Evaluation actors; default one per GPU of the cluster (cuda), or one per `cpus_per_actor`
    CPUs (cpu), counted when the run starts; actors are added as nodes join."""
    workers_per_actor: int = Field(default=1, ge=1)
    """Judge worker processes in each actor, side by side on its GPU; a benchmark still runs alone
    on the GPU."""
    cpus_per_actor: float = Field(default=1.0, gt=0)
    """CPUs each actor reserves for its workers and their runners."""
    timing_device: str | None = None
    """The device type that times every benchmark (e.g. "NVIDIA H200"), so that speedups are only
    compared within one type; default the most common type among the actors at start."""


class Campaign(_Strict):
    """An optimisation campaign."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    """Names the run directory (`runs/<name>` by default)."""
    tasks: list[str] | Literal["all"]
    """Task names, or "all" for the whole suite."""
    styles: list[StyleName] = Field(default_factory=lambda: list(DEFAULT_STYLES))
    """Agent styles: refine (one conversation), evolve (a population), team (planner, coder,
    reviewer)."""
    modes: list[Mode] = Field(default_factory=lambda: list(MODES))
    """baseline (the BI gates observe only) and bi-aware (they reject, and the prompts carry BI
    guidance)."""
    model: str = "replay"
    """provider:model of every role: replay, openai:<model>, anthropic:<model>, exchange:<dir>."""
    roles: dict[Role, str] = Field(default_factory=dict)
    """provider:model per role (planner, coder, reviewer), overriding `model` for that role."""
    model_options: dict[str, Any] = Field(default_factory=dict)
    """Options passed to the providers (temperature, max_tokens, timeout_s, retry, ...)."""
    budget: Budget = Field(default_factory=Budget)
    """When each loop stops."""
    device: Literal["cpu", "cuda"] = "cpu"
    """Where candidates are evaluated: cuda, or cpu through Triton's interpreter (CPU timings are
    not a measure of kernel speed)."""
    seed: int = 0
    """Fixes each candidate's sampling seed (and replay's choices)."""
    workers: int | None = Field(default=None, ge=1)
    """Evaluation worker processes; default one per GPU on cuda, two on a CPU."""
    parallel: int | None = Field(default=None, ge=1)
    """Loops run at the same time; default twice the number of workers (one loop's LLM calls
    overlap another's evaluation)."""
    cluster: Cluster | None = None
    """Evaluate on a Ray cluster (`cluster: {ray: auto}`); absent: the local worker pool."""
    evaluation: EvalOptions = Field(default_factory=EvalOptions, alias="eval")
    """The file's `eval:` key."""
    archive: ArchiveOptions = Field(default_factory=ArchiveOptions)
    """The kernel archive: where accepted kernels are added across runs, and `seed_kernels`, how
    many of its best kernels each loop starts from (docs/guide.md)."""
    refine: RefineSettings = Field(default_factory=RefineSettings)
    """Settings of the refine style."""
    evolve: EvolveSettings = Field(default_factory=EvolveSettings)
    """Settings of the evolve style."""
    team: TeamSettings = Field(default_factory=TeamSettings)
    """Settings of the team style."""
    openevolve: OpenEvolveSettings = Field(default_factory=OpenEvolveSettings)
    """Settings of the openevolve style (OpenEvolve's controller on the campaign's model and gates)."""

    @field_validator("styles", "modes", "tasks")
    @classmethod
    def _distinct(cls, values: Any) -> Any:
        if isinstance(values, list):
            if not values:
                raise ValueError("must name at least one")
            twice = [v for i, v in enumerate(values) if v in values[:i]]
            if twice:
                raise ValueError(f"{twice[0]!r} is listed twice")
        return values

    def task_names(self) -> list[str]:
        """The campaign's tasks, in its order (the suite's order for "all")."""
        return list(load_suite()) if self.tasks == "all" else list(self.tasks)

    def with_model(self, spec: str) -> Campaign:
        """This campaign with one provider:model for every role (`--model`)."""
        return self.model_copy(update={"model": spec, "roles": {}})

    def role_model(self, role: Role) -> str:
        return self.roles.get(role, self.model)

    def cells(self) -> list[Cell]:
        return [Cell(style=s, mode=m, provider=self.model) for s in self.styles for m in self.modes]

    def eval_settings(self) -> EvalSettings:
        timeouts = {**STAGE_TIMEOUTS[self.device], **self.evaluation.stage_timeout_s}
        return EvalSettings(device=self.device, stage_timeout_s=timeouts,
                            cuda_graph=self.evaluation.cuda_graph,
                            compile_reference=self.evaluation.compile_reference,
                            production_baselines=self.evaluation.production_baselines)


def _one_line(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p))
    if loc == ("tasks",) and err["type"] in ("list_type", "literal_error"):
        # The union (a list of names or "all") reports a branch's error; say what is allowed.
        return f"tasks: {err.get('input')!r} is not allowed (a list of task names, or \"all\")"
    return one_line(exc)


def parse_campaign(raw: Any, where: str = "campaign") -> Campaign:
    """Validate a campaign mapping; CampaignError with a one-line message."""
    if not isinstance(raw, dict):
        raise CampaignError(f"{where}: a campaign file must be a mapping of keys")
    try:
        campaign = Campaign.model_validate(raw)
    except ValidationError as exc:
        raise CampaignError(f"{where}: {_one_line(exc)}") from None
    if "openevolve" in campaign.styles and (missing := missing_extra()):
        raise CampaignError(f"{where}: styles: {missing}")
    if campaign.tasks != "all":
        try:
            suite = load_suite()
        except TaskError as exc:
            raise CampaignError(str(exc)) from None
        unknown = [t for t in campaign.tasks if t not in suite]
        if unknown:
            raise CampaignError(f"{where}: tasks: unknown task {unknown[0]!r}; "
                                f"known tasks: {', '.join(suite)}")
    return campaign


def load_campaign(path: str | Path) -> Campaign:
    """Load and validate a campaign file; CampaignError with a one-line message."""
    path = Path(path)
    raw = read_mapping(path, "campaign file", CampaignError)
    return parse_campaign(raw, str(path))
