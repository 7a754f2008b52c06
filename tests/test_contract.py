"""The task loader on good and bad files."""

import json
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from agentloop.cli import app
from gates.contract import TaskError, get_task, load_suite, load_task, tasks_dir

SPEC_TASKS = ["rms_norm", "fused_add_rms_norm", "layer_norm", "silu_and_mul", "rotary_embedding",
              "softmax", "log_softmax", "token_logprobs", "greedy_sample", "linear",
              "decode_attention", "per_token_quant_int8", "moe_topk_softmax"]


def test_suite_is_the_spec_suite():
    assert sorted(load_suite()) == sorted(SPEC_TASKS)


def test_shapes_cover_decode_thresholds_and_prefill():
    for task in load_suite().values():
        sizes = {s[task.batch_axis] for s in task.shapes}
        assert sizes & {1, 2, 3, 4, 5, 6, 7, 8}, task.name
        assert {31, 32} <= sizes or {127, 128} <= sizes or {255, 256} <= sizes, task.name
        assert max(sizes) >= (64 if task.name == "decode_attention" else 2048), task.name


@pytest.fixture
def suite_copy(tmp_path):
    src = tasks_dir()
    shutil.copy(src / "rms_norm.yaml", tmp_path / "rms_norm.yaml")
    shutil.copytree(src / "rms_norm", tmp_path / "rms_norm")
    return tmp_path


def _edit(path, change):
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data))


@pytest.mark.parametrize("change,expected", [
    (lambda d: d.update(colour="red"), "colour: unknown key"),
    (lambda d: d.update(reference="rms_norm/missing.py"), "reference: file"),
    (lambda d: d.update(entry="rms_norm_fast"), "does not define function 'rms_norm_fast'"),
    (lambda d: d["args"][0].update(dtype="bf17"), "args[0].dtype: 'bf17' is not allowed"),
    (lambda d: d["args"][0].update(axes=["T", "Q"]), "unknown axis 'Q'"),
    (lambda d: d["args"][0].update(axes=["H", "T"]), "first axis must be the batch axis"),
    (lambda d: d.update(dtypes=["float64"]), "dtypes[0]: 'float64' is not allowed"),
    (lambda d: d.pop("summary"), "summary: Field required"),
    (lambda d: d["tolerance"].pop("float32"), "tolerance: no entry for dtype float32"),
])
def test_bad_task_file_gives_one_line_error_naming_file_and_field(suite_copy, change, expected):
    path = suite_copy / "rms_norm.yaml"
    _edit(path, change)
    with pytest.raises(TaskError) as info:
        load_task(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(path))
    assert expected in message


def test_a_task_is_read_once_until_its_files_change(suite_copy):
    path = suite_copy / "rms_norm.yaml"
    first = load_task(path)
    assert load_task(path) is first and get_task("rms_norm", suite_copy) is first
    _edit(path, lambda d: d.update(summary="edited"))
    assert load_task(path).summary == "edited"
    reference = suite_copy / "rms_norm" / "reference.py"
    reference.write_text(reference.read_text().replace("def rms_norm(", "def rms_norm_renamed("))
    with pytest.raises(TaskError, match="does not define function 'rms_norm'"):
        load_task(path)


def test_invalid_yaml_and_unknown_task(suite_copy):
    (suite_copy / "rms_norm.yaml").write_text("name: [unclosed\n")
    with pytest.raises(TaskError, match="not valid YAML"):
        load_task(suite_copy / "rms_norm.yaml")
    with pytest.raises(TaskError, match="unknown task 'rms_nrom'; known tasks: rms_norm"):
        get_task("rms_nrom", suite_copy)


def test_good_task_loads_with_derived_views():
    task = get_task("rms_norm")
    assert task.batched_args == ["x"]
    assert task.dims_for("cpu", {"T": 3}) == {"H": task.cpu_dims["H"], "T": 3}
    assert task.reference_path.is_file()


def test_cli_tasks_json_lists_the_suite():
    result = CliRunner().invoke(app, ["tasks", "--json"])
    assert result.exit_code == 0, result.output
    names = [row["name"] for row in json.loads(result.output)]
    assert sorted(names) == sorted(SPEC_TASKS)


def test_cli_tasks_reports_a_broken_task_file(suite_copy, monkeypatch):
    _edit(suite_copy / "rms_norm.yaml", lambda d: d.update(colour="red"))
    monkeypatch.setenv("AGENTLOOP_TASKS", str(suite_copy))
    result = CliRunner().invoke(app, ["tasks"])
    assert result.exit_code == 2
    assert "colour: unknown key" in result.output


def test_a_relative_suite_directory_is_made_absolute_so_workers_find_the_reference(suite_copy, monkeypatch):
    monkeypatch.chdir(suite_copy.parent)
    monkeypatch.setenv("AGENTLOOP_TASKS", suite_copy.name)
    task = get_task("rms_norm")
    assert tasks_dir().is_absolute() and task.reference_path.is_absolute() and task.reference_path.is_file()
    assert get_task("rms_norm", suite_copy.name).reference_path.is_absolute()
    rows = Path(__file__).parent / "fixtures" / "rms_norm" / "rows.py"
    result = CliRunner().invoke(app, ["audit", str(rows), "--task", "rms_norm", "--device", "cpu",
                                      "--gate", "correctness"])
    assert result.exit_code == 0, result.output
