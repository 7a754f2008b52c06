"""The static gate against the corpus's trusted GPU labels (the measurement, else the expected
label while a GPU measurement is pending): at most 5% of invariant candidates rejected (an error
finding), at least 90% of variant ones rejected, and every variant one reported, as an error or as
a possible hazard (a warning) that the dynamic gate then confirms."""

from gates.contract import load_suite
from gates.corpus import load_manifest, manifest_path
from gates.static import static_gate


def corpus_confusion() -> dict[str, dict[str, list[str]]]:
    """{label: {"error": [...], "warning": [...], "clean": [...]}} over every manifest entry of the
    suite; entries whose GPU measurement is disputed go under "disputed"."""
    matrix: dict[str, dict[str, list[str]]] = {}
    for task in load_suite().values():
        if not manifest_path(task).is_file():
            continue
        for entry in load_manifest(task).candidates:
            path = task.candidates_dir / entry.file
            severities = {f.severity for f in static_gate(path.read_text(), task, str(path)).findings}
            verdict = "error" if "error" in severities else "warning" if severities else "clean"
            label = "disputed" if entry.disputed else entry.measured_gpu_label
            cell = matrix.setdefault(label, {"error": [], "warning": [], "clean": []})
            cell[verdict].append(f"{task.name}/{entry.file}")
    return matrix


def test_confusion_matrix_on_trusted_gpu_labels():
    matrix = corpus_confusion()
    variant, invariant = matrix.get("variant"), matrix.get("invariant")
    assert variant and invariant, "the corpus needs both variant and invariant candidates"
    n_var = sum(len(v) for v in variant.values())
    n_inv = sum(len(v) for v in invariant.values())
    caught = len(variant["error"]) / n_var
    false_rejects = len(invariant["error"]) / n_inv
    assert not variant["clean"], f"variant candidates without any finding: {variant['clean']}"
    assert caught >= 0.90, f"rejected {caught:.0%} of variant; warned only: {variant['warning']}"
    assert false_rejects <= 0.05, f"rejected {false_rejects:.0%} of invariant: {invariant['error']}"


def test_only_contradicted_measurements_can_be_disputed():
    for task in load_suite().values():
        for entry in load_manifest(task).candidates:
            if entry.disputed:
                assert entry.gpu is not None and entry.gpu.label != entry.expected, entry.file
                assert len(entry.disputed) > 20, entry.file
