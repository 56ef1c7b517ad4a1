"""One result type for every evaluation: its kind, version, targets, seconds and sections.

Every evaluation's result is one :class:`EvaluationResult`: the fields every evaluation has,
and the evaluation's own sections beside them; :func:`read_result` reads any of the five result
files into one. ``reference.json`` (:func:`scaledl.evaluation.reference.evaluate_reference`),
``layouts.json`` (:func:`scaledl.evaluation.profiled_layouts.evaluate_layouts`),
``gpu_layouts.json`` (:func:`scaledl.evaluation.gpu_layouts.evaluate_layout_rows`) and
``published_runs.json`` (:func:`scaledl.evaluation.published_runs.evaluate_published_runs`,
its sections typed by :class:`~scaledl.evaluation.published_runs.PublishedRunsResult`) are
written as it, the sections at the top level of the JSON object so the paths of
:data:`scaledl.evaluation.targets.TARGETS` read them as they are::

    {"evaluation": "reference", "schema_version": 1,
     <section>: ..., ...,
     "targets": [TargetResult, ...], "seconds": {stage: s, ..., "total": s} | null}

``metrics.json`` (``scaledl evaluate``) keeps its own file format, schema version 2 of
:class:`~scaledl.evaluation.results.Metrics`, its targets in its sections (``gpu.targets``,
which holds ``gpu.parallel_layouts.targets`` too, and ``intervals.targets``) and its seconds in
``runtime_s``; :meth:`EvaluationResult.from_metrics` gives its result (evaluation ``metrics``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scaledl.evaluation.published_runs import PublishedRunsResult
from scaledl.evaluation.results import Metrics, Skipped
from scaledl.evaluation.targets import Evaluation, TargetResult, target_results
from scaledl.io.atomic import write_atomic
from scaledl.io.safe import read_json

#: Version of the envelope written by this ScaleDL.
RESULT_SCHEMA_VERSION = 1
#: The keys of the envelope; every other top-level key is a section of the evaluation.
ENVELOPE_KEYS = ("evaluation", "schema_version", "targets", "seconds")
#: The evaluations with a result file :func:`read_result` reads (``label_quality`` has none).
RESULT_EVALUATIONS: tuple[Evaluation, ...] = (
    "metrics", "gpu_layouts", "layouts", "published_runs", "reference",
)  # fmt: skip


@dataclass(frozen=True)
class Sections:
    """The sections (top-level keys besides the envelope's) of one evaluation's result.

    Attributes:
        required: the sections its evaluation function always returns.
        optional: the sections a command or script adds to some results (``repeats`` of
            ``scaledl reference evaluate-layouts``, ``variants`` of the history script, ...).
    """

    required: frozenset[str]
    optional: frozenset[str] = frozenset()

    def problems(self, keys: set[str]) -> list[str]:
        """What is wrong with a result holding the sections ``keys`` (``[]``: nothing).

        Returns:
            ``missing 'a', 'b'`` and ``unknown 'c'`` phrases, sorted by name.
        """
        missing = sorted(self.required - keys)
        unknown = sorted(keys - self.required - self.optional)
        return [
            f"{what} {', '.join(map(repr, names))}"
            for what, names in (("missing", missing), ("unknown", unknown))
            if names
        ]


def _typed_sections(fields: dict[str, Any], drop: set[str], add: set[str]) -> Sections:
    """The sections of a result typed by a pydantic model (its fields less ``drop``)."""
    kept = {name: f for name, f in fields.items() if name not in drop}
    required = {name for name, f in kept.items() if f.is_required()} | add
    return Sections(frozenset(required), frozenset(set(kept) - required))


#: The sections of each evaluation's result (:class:`Sections`): a file is the evaluation's
#: its ``evaluation`` field names only when it holds that evaluation's sections.
SECTIONS: dict[Evaluation, Sections] = {
    "reference": Sections(frozenset({
        "dataset", "config", "in_distribution", "out_of_distribution", "learning_curves",
        "sequential",
    })),
    "layouts": Sections(
        frozenset({"dataset", "measured_utc", "n_workloads", "n_by_kind", "headline", "folds",
                   "ranking", "workloads"}),
        frozenset({"repeats", "across", "evaluated_on", "variants"}),
    ),
    "gpu_layouts": Sections(
        frozenset({"label_source", "peer_source", "rows", "not_modelled", "unmatched",
                   "collectives", "summary", "ranking"}),
        frozenset({"profiles", "n_training_workloads", "kernel_split"}),
    ),
    "published_runs": _typed_sections(
        PublishedRunsResult.model_fields, set(ENVELOPE_KEYS), set()
    ),
    # metrics.json as its envelope (EvaluationResult.from_metrics(...).to_dict()).
    "metrics": _typed_sections(
        Metrics.model_fields, {"schema_version", "runtime_s"}, {"fit_seconds"}
    ),
}  # fmt: skip


@dataclass(frozen=True)
class EvaluationResult:
    """One evaluation's result file (module docstring).

    Attributes:
        evaluation: the evaluation (one of :data:`RESULT_EVALUATIONS`), as the targets table
            names it.
        targets: its targets, judged.
        seconds: wall seconds per stage and ``total``; ``None`` when not timed (a file
            converted from before the envelope).
        sections: the evaluation's own content by top-level key (``summary``, ``folds``, ...).
        schema_version: :data:`RESULT_SCHEMA_VERSION`.
    """

    evaluation: Evaluation
    targets: list[TargetResult]
    seconds: dict[str, float] | None = None
    sections: dict[str, Any] = field(default_factory=dict)
    schema_version: int = RESULT_SCHEMA_VERSION

    @classmethod
    def of(
        cls, evaluation: Evaluation, result: dict[str, Any], seconds: dict[str, float] | None = None
    ) -> EvaluationResult:
        """The envelope of an evaluation's result as its function returns it.

        Args:
            evaluation: the evaluation.
            result: its sections with ``targets`` (entries or their dicts) and, when it times
                itself, ``seconds``.
            seconds: the seconds, when the caller timed it (``result`` has none then).

        Raises:
            ValueError: a bad target entry or seconds, or seconds given twice.
        """
        if seconds is not None and result.get("seconds") is not None:
            raise ValueError(f"{evaluation}: seconds given twice (the result holds its own)")
        data = {**result, "evaluation": evaluation}
        if seconds is not None:
            data["seconds"] = seconds
        return cls.from_dict(data, evaluation, f"<{evaluation} result>")

    @classmethod
    def from_metrics(cls, metrics: Metrics) -> EvaluationResult:
        """The result of ``scaledl evaluate`` (``metrics.json``), evaluation ``metrics``.

        Its targets are the entries of ``gpu.targets`` (which holds those of
        ``gpu.parallel_layouts.targets``) and ``intervals.targets``, in that order; its seconds
        are the stages' of ``runtime_s`` with ``total``; the sections are its other top-level
        fields as JSON, without those ``targets`` lists (each entry is in :attr:`targets` once)
        and with ``fit_seconds`` (``runtime_s.fit_seconds``: method -> its fits' seconds, which
        overlap the stages).

        Args:
            metrics: the metrics (:meth:`~scaledl.evaluation.results.Metrics.read`).
        """
        data = metrics.to_dict()
        runtime = data.pop("runtime_s")
        del data["schema_version"]
        targets: list[TargetResult] = []
        if not isinstance(metrics.gpu, Skipped):
            targets += metrics.gpu.targets
            del data["gpu"]["targets"]
            if data["gpu"]["parallel_layouts"] is not None:
                data["gpu"]["parallel_layouts"].pop("targets", None)
        targets += metrics.intervals.targets
        del data["intervals"]["targets"]
        return cls(
            evaluation="metrics",
            targets=targets,
            seconds={k: v for k, v in runtime.items() if k != "fit_seconds"},
            sections={**data, "fit_seconds": runtime["fit_seconds"]},
        )

    @classmethod
    def from_dict(
        cls, data: Any, evaluation: Evaluation, source: str = "<result>"
    ) -> EvaluationResult:
        """Validate a result file's parsed JSON.

        A file written before the envelope (no ``evaluation``, ``schema_version`` or
        ``seconds``; target entries of an earlier shape) reads as this evaluation's, not timed.
        The file's sections must be the evaluation's (:data:`SECTIONS`: every required one,
        no unknown one), so a file relabelled as another evaluation is refused.

        Args:
            data: the JSON object.
            evaluation: the evaluation the file must be.
            source: where it came from, named in errors.

        Raises:
            ValueError: not an object, another evaluation, another version, no ``targets``,
                sections that are not the evaluation's (naming the missing and unknown ones),
                a bad entry or a seconds value that is not a finite number (naming ``source``,
                the field and its value).
        """
        if evaluation not in SECTIONS:
            raise ValueError(f"{source}: no evaluation {evaluation!r} ({RESULT_EVALUATIONS})")
        if not isinstance(data, dict):
            raise ValueError(f"{source}: not a JSON object")
        kind = data.get("evaluation", evaluation)
        if kind != evaluation:
            raise ValueError(f"{source}: field 'evaluation' is {kind!r}, expected {evaluation!r}")
        version = data.get("schema_version", RESULT_SCHEMA_VERSION)
        if version != RESULT_SCHEMA_VERSION:
            raise ValueError(
                f"{source}: field 'schema_version' is {version!r}; this ScaleDL reads "
                f"{RESULT_SCHEMA_VERSION} (re-run the evaluation)"
            )
        if "targets" not in data:
            raise ValueError(f"{source}: field 'targets' is missing")
        sections = check_sections(data, evaluation, source)
        seconds = data.get("seconds")
        if seconds is not None and not (
            isinstance(seconds, dict)
            and all(
                isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                for v in seconds.values()
            )
        ):
            raise ValueError(
                f"{source}: field 'seconds' is {seconds!r:.80}: expected stage -> finite seconds"
            )
        return cls(
            evaluation=evaluation,
            targets=target_results(data["targets"], f"{source}: targets"),
            seconds=seconds,
            sections=sections,
            schema_version=version,
        )

    @classmethod
    def read(cls, path: Path | str, evaluation: Evaluation) -> EvaluationResult:
        """Read and validate a result file (:func:`scaledl.io.safe.read_json`).

        Raises:
            FileNotFoundError: no such file.
            ValueError: unsafe, not JSON, or not this evaluation's result (naming the file).
        """
        return cls.from_dict(read_json(path), evaluation, str(path))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the envelope: its keys first, the sections, targets, seconds."""
        return {
            "evaluation": self.evaluation,
            "schema_version": self.schema_version,
            **self.sections,
            "targets": [t.to_dict() for t in self.targets],
            "seconds": self.seconds,
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as indented JSON, ending in a newline."""
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def write(self, path: Path | str) -> Path:
        """Write :meth:`to_json` atomically (:mod:`scaledl.io.atomic`); returns ``path``."""
        return write_atomic(Path(path), self.to_json())


def check_sections(data: dict[str, Any], evaluation: Evaluation, source: str) -> dict[str, Any]:
    """The sections of a result file's JSON object, checked to be ``evaluation``'s.

    Args:
        data: the JSON object.
        evaluation: the evaluation it is read as (one of :data:`SECTIONS`).
        source: where it came from, named in errors.

    Returns:
        Its top-level keys other than :data:`ENVELOPE_KEYS`, with their values.

    Raises:
        ValueError: a required section missing or an unknown one (naming ``source``, the
            ``evaluation`` field, its value and the sections).
    """
    sections = {k: v for k, v in data.items() if k not in ENVELOPE_KEYS}
    problems = SECTIONS[evaluation].problems(set(sections))
    if problems:
        named = "is" if "evaluation" in data else "is missing, read as"
        raise ValueError(
            f"{source}: field 'evaluation' {named} {evaluation!r}, but the file's sections "
            f"are not a {evaluation} result's: {'; '.join(problems)}"
        )
    return sections


def read_result(path: Path | str, evaluation: Evaluation | None = None) -> EvaluationResult:
    """Read any evaluation's result file (:func:`scaledl.io.safe.read_json`) as its result.

    The file's ``evaluation`` field says which evaluation wrote it. A file without one is
    ``evaluation``'s when that is given (``metrics.json``, or a file written before the
    envelope); otherwise it is ``metrics.json`` when it has a ``schema_version`` and no
    ``targets`` (:meth:`EvaluationResult.from_metrics`; another version than the metrics
    schema's is an error), or a ``published_runs.json`` of the shape before the envelope when it
    holds ``runtime_s`` and ``protocols``. ``published_runs.json`` and ``metrics.json`` are
    validated by their typed models (:class:`~scaledl.evaluation.published_runs.
    PublishedRunsResult`, :class:`~scaledl.evaluation.results.Metrics`), the others by the
    envelope; every file's sections must be its evaluation's (:data:`SECTIONS`), so a file
    whose ``evaluation`` field was changed to another evaluation is refused, and the numbers of
    its target entries must be JSON numbers (:class:`~scaledl.evaluation.targets.TargetResult`).

    Args:
        path: the file.
        evaluation: the evaluation the file must be, or ``None`` for any.

    Returns:
        The result.

    Raises:
        FileNotFoundError: no such file.
        ValueError: unsafe, not JSON, not a result file, another evaluation than
            ``evaluation``, or not matching its schema (naming the file and the field).
    """
    data = read_json(path)
    source = str(path)
    if not isinstance(data, dict):
        raise ValueError(f"{source}: not a JSON object (a result file is one)")
    kind = data.get("evaluation", evaluation)
    if kind is None and "schema_version" in data and "targets" not in data:
        kind = "metrics"
    elif kind is None and {"runtime_s", "protocols"} <= set(data):
        kind = "published_runs"
    if kind is None:
        raise ValueError(
            f"{source}: field 'evaluation' is missing (a result file names its evaluation: "
            f"{', '.join(RESULT_EVALUATIONS)})"
        )
    if kind not in RESULT_EVALUATIONS:
        raise ValueError(
            f"{source}: field 'evaluation' is {kind!r}: not one of {', '.join(RESULT_EVALUATIONS)}"
        )
    if evaluation is not None and kind != evaluation:
        raise ValueError(f"{source}: field 'evaluation' is {kind!r}, expected {evaluation!r}")
    if kind == "metrics" and "evaluation" not in data:  # metrics.json, schema version 2
        return EvaluationResult.from_metrics(Metrics.from_dict(data, source))
    if kind == "published_runs":
        if "evaluation" in data:  # in the envelope: its sections first, then its model
            check_sections(data, kind, source)
        data = PublishedRunsResult.from_dict(data, source).to_dict()
    return EvaluationResult.from_dict(data, kind, source)
