"""The static gate against the corpus's measured GPU labels: the confusion matrix must clear
at least 90% of batch-variant candidates caught and at most 10% of invariant ones flagged."""

from gates.contract import load_suite
from gates.corpus import load_manifest, manifest_path
from gates.static import static_gate


def corpus_confusion() -> dict[str, dict[str, list[str]]]:
    """{label: {"flagged": [...], "passed": [...]}} over every manifest entry of the suite;
    entries whose GPU measurement is disputed go under "disputed"."""
    matrix: dict[str, dict[str, list[str]]] = {}
    for task in load_suite().values():
        if not manifest_path(task).is_file():
            continue
        for entry in load_manifest(task).candidates:
            path = task.candidates_dir / entry.file
            result = static_gate(path.read_text(), task, str(path))
            flagged = any(f.severity == "error" for f in result.findings)
            label = "disputed" if entry.disputed else entry.measured_gpu_label
            cell = matrix.setdefault(label, {"flagged": [], "passed": []})
            cell["flagged" if flagged else "passed"].append(f"{task.name}/{entry.file}")
    return matrix


def test_confusion_matrix_on_measured_gpu_labels():
    matrix = corpus_confusion()
    variant, invariant = matrix.get("variant"), matrix.get("invariant")
    assert variant and invariant, "the corpus needs both variant and invariant candidates"
    n_var = len(variant["flagged"]) + len(variant["passed"])
    n_inv = len(invariant["flagged"]) + len(invariant["passed"])
    caught = len(variant["flagged"]) / n_var
    false_alarms = len(invariant["flagged"]) / n_inv
    assert caught >= 0.90, f"caught {caught:.0%} of variant; missed: {variant['passed']}"
    assert false_alarms <= 0.10, f"flagged {false_alarms:.0%} of invariant: {invariant['flagged']}"


def test_only_contradicted_measurements_can_be_disputed():
    for task in load_suite().values():
        for entry in load_manifest(task).candidates:
            if entry.disputed:
                assert entry.gpu is not None and entry.gpu.label != entry.expected, entry.file
                assert len(entry.disputed) > 20, entry.file
