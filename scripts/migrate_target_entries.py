"""Rewrite the ``targets`` of committed result files as :class:`TargetResult` entries.

One-off conversion to the one entry shape (``python scripts/migrate_target_entries.py
docs/results/*.json``). The entries are rebuilt by the evaluations' own target builders from
the sections the file holds (no evaluation is rerun); a profile of ``layouts.json`` that keeps
only its targets (``repeats``, ``across``) has its entries upgraded from their earlier shape.
``reference.json``, ``layouts.json``, ``gpu_layouts.json`` and ``published_runs.json`` are put
in their envelope (:class:`~scaledl.evaluation.envelope.EvaluationResult`: ``evaluation``,
``schema_version`` and ``seconds``, ``null`` where the file kept none; ``published_runs.json``'s
``runtime_s`` becomes its ``seconds``).
Before a file is written, :func:`check` proves that nothing else moved: every key outside the
``targets`` lists and the envelope is equal, every number of the old file is in the new one
unchanged, and each old entry agrees with its new one (row, wording, threshold, met, measured
text or numbers).

Bad input (an unknown file, an entry that disagrees) exits 2 naming the file and entry.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from scaledl.evaluation.coverage import coverage_targets
from scaledl.evaluation.envelope import ENVELOPE_KEYS, EvaluationResult
from scaledl.evaluation.gpu_layouts import layout_targets as gpu_layout_targets
from scaledl.evaluation.gpu_peer import peer_targets
from scaledl.evaluation.profiled_layouts import layout_targets
from scaledl.evaluation.published_runs import PublishedRunsResult, stronger_fixed_mfu
from scaledl.evaluation.published_runs import targets as published_targets
from scaledl.evaluation.reference import target_checks
from scaledl.evaluation.results import Metrics
from scaledl.evaluation.targets import Evaluation, TargetResult, gpu_targets, target_results
from scaledl.io.safe import read_json


def _dicts(entries: list[TargetResult]) -> list[dict[str, Any]]:
    return [t.to_dict() for t in entries]


def _upgraded_layout_entries(entries: list[Any], where: str) -> list[dict[str, Any]]:
    """A layouts profile's entries of the earlier shape, worded as ``layout_targets`` words them."""
    out = []
    for t in target_results(entries, where):
        if t.name == "layouts_mre":
            measured = f"{t.value:.1%} (composed {t.extra['composed']:.1%})"
        else:
            measured = f"{t.value:.2f}"
        out.append(t.model_copy(update={"measured": measured}).to_dict())
    return out


def _layouts(data: dict[str, Any]) -> dict[str, Any]:
    new = {**data, "targets": _dicts(layout_targets(data))}
    # The rebuilt entries and the upgraded ones must word alike, or the profiles would differ.
    if _upgraded_layout_entries(data["targets"], "targets") != new["targets"]:
        raise ValueError("targets: the upgraded entries differ from layout_targets'")
    for key in ("repeats", "across"):
        new[key] = [
            {**p, "targets": _upgraded_layout_entries(p["targets"], f"{key}[{i}].targets")}
            for i, p in enumerate(data.get(key, []))
        ]
    return new


def _metrics(data: dict[str, Any]) -> dict[str, Any]:
    gpu = dict(data["gpu"])
    layouts = {**gpu["parallel_layouts"]}
    layouts["targets"] = _dicts(gpu_layout_targets(layouts["summary"]))
    gpu["parallel_layouts"] = layouts
    gpu["targets"] = _dicts(gpu_targets(gpu) + peer_targets(gpu["peer"])) + layouts["targets"]
    intervals = {**data["intervals"]}
    intervals["targets"] = _dicts(coverage_targets(intervals, intervals["coverage"]))
    return {**data, "gpu": gpu, "intervals": intervals}


def _published_runs(data: dict[str, Any]) -> dict[str, Any]:
    result = PublishedRunsResult.model_validate(data)
    loso = result.protocols["leave_one_source_out"]
    if result.ratio_baseline != stronger_fixed_mfu(loso):
        raise ValueError("ratio_baseline is not the stronger fixed-MFU rule")
    built = published_targets(result.coverage, loso, result.ratio_to_fixed_mfu, result.ranking)
    return result.model_copy(update={"targets": built}).to_dict()  # in its envelope


#: File name -> the evaluation whose envelope the file is written in.
ENVELOPES: dict[str, Evaluation] = {
    "gpu_layouts.json": "gpu_layouts",
    "layouts.json": "layouts",
    "reference.json": "reference",
}
#: File name -> the migration of its parsed JSON.
MIGRATIONS = {
    "gpu_layouts.json": (lambda d: {**d, "targets": _dicts(gpu_layout_targets(d["summary"]))}),
    "layouts.json": _layouts,
    "metrics.json": _metrics,
    "published_runs.json": _published_runs,
    "reference.json": (lambda d: {**d, "targets": _dicts(target_checks(d))}),
}


def _without_targets(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_targets(v) for k, v in node.items() if k != "targets"}
    if isinstance(node, list):
        return [_without_targets(v) for v in node]
    return node


def numbers(node: Any) -> list[float]:
    """Every number (not bool) in a parsed JSON value, in document order."""
    if isinstance(node, bool):
        return []
    if isinstance(node, int | float):
        return [node]
    if isinstance(node, dict):
        return [x for v in node.values() for x in numbers(v)]
    if isinstance(node, list):
        return [x for v in node for x in numbers(v)]
    return []


def _target_lists(node: Any, where: str = "") -> list[tuple[str, list]]:
    if isinstance(node, dict):
        found = [(f"{where}targets", node["targets"])] if "targets" in node else []
        for k, v in node.items():
            if k != "targets":
                found += _target_lists(v, f"{where}{k}.")
        return found
    if isinstance(node, list):
        return [x for i, v in enumerate(node) for x in _target_lists(v, f"{where}[{i}].")]
    return []


def check(old: dict[str, Any], new: dict[str, Any], source: str) -> None:
    """Raise unless ``new`` is ``old`` with only its target entries in the new shape.

    A ``runtime_s`` of ``old`` that ``new`` holds as ``seconds`` (``published_runs.json``)
    counts as unchanged.

    Raises:
        ValueError: a key outside the ``targets`` lists changed, a number of ``old`` is not in
            ``new``, or an old entry disagrees with its new one (naming ``source`` and it).
    """
    if "runtime_s" in old and "runtime_s" not in new:  # published_runs.json: now ``seconds``
        if new.get("seconds") != old["runtime_s"]:
            raise ValueError(f"{source}: field 'seconds' is not the old 'runtime_s'")
        old = {k: v for k, v in old.items() if k != "runtime_s"} | {"seconds": old["runtime_s"]}
    added = {k: new[k] for k in ENVELOPE_KEYS if k in new and k not in old}
    if set(added) - {"evaluation", "schema_version", "seconds"} or added.get("seconds"):
        raise ValueError(f"{source}: the envelope added {added}")
    kept_keys = {k: v for k, v in new.items() if k not in added}
    if _without_targets(old) != _without_targets(kept_keys):
        raise ValueError(f"{source}: a value outside the targets lists changed")
    kept = {float(x) for x in numbers(new)}
    lost = [x for x in numbers(old) if float(x) not in kept and not math.isnan(x)]
    if lost:
        raise ValueError(f"{source}: numbers of the old file missing from the new: {lost[:5]}")
    old_lists, new_lists = _target_lists(old), _target_lists(new)
    if [w for w, _ in old_lists] != [w for w, _ in new_lists]:
        raise ValueError(f"{source}: the targets lists moved")
    for (where, before), (_, after) in zip(old_lists, new_lists, strict=True):
        first, second = target_results(before, where), target_results(after, where)
        if len(first) != len(second):
            raise ValueError(f"{source}: {where}: {len(first)} entries became {len(second)}")
        for i, (a, b) in enumerate(zip(first, second, strict=True)):
            same = ["name", "text", "threshold", "met"]
            same += ["measured"] if a.value is None else ["value", "ci_low", "ci_high", "extra"]
            for field in same:
                if field == "extra":
                    moved = any(b.extra.get(k) != v for k, v in a.extra.items())
                else:
                    moved = getattr(a, field) != getattr(b, field)
                if moved:
                    raise ValueError(
                        f"{source}: {where}[{i}] field {field!r}: {getattr(a, field)!r} became "
                        f"{getattr(b, field)!r}"
                    )


def _write(path: Path, data: dict[str, Any]) -> None:
    """Write as the evaluation writes the file (its model, or indented JSON)."""
    if path.name == "metrics.json":
        Metrics.from_dict(data, str(path)).write(path)
    elif path.name == "published_runs.json":
        PublishedRunsResult.from_dict(data, str(path)).write(path)
    else:
        EvaluationResult.from_dict(data, ENVELOPES[path.name], str(path)).write(path)


def migrate(path: Path) -> dict[str, Any]:
    """The file's content with its entries in the new shape, checked (:func:`check`).

    Raises:
        ValueError: not one of :data:`MIGRATIONS`, or the check fails (naming the file).
    """
    if path.name not in MIGRATIONS:
        raise ValueError(f"{path}: not a result file with targets ({sorted(MIGRATIONS)})")
    old = read_json(path)
    new = MIGRATIONS[path.name](old)
    if path.name in ENVELOPES:
        new = EvaluationResult.of(ENVELOPES[path.name], new).to_dict()
    for where, entries in _target_lists(new):  # every entry of the new shape
        target_results(entries, f"{path}: {where}")
    check(old, new, str(path))
    return new


def main(argv: list[str]) -> int:
    """Migrate each file named in ``argv`` in place; exit 2 naming the first bad one."""
    for name in argv:
        path = Path(name)
        try:
            new = migrate(path)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        _write(path, new)
        print(f"{path}: {sum(len(t) for _, t in _target_lists(new))} target entries written")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
