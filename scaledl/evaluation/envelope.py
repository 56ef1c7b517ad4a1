"""The envelope of an evaluation's result file: its kind, version, targets and seconds.

``reference.json`` (:func:`scaledl.evaluation.reference.evaluate_reference`), ``layouts.json``
(:func:`scaledl.evaluation.profiled_layouts.evaluate_layouts`) and ``gpu_layouts.json``
(:func:`scaledl.evaluation.gpu_layouts.evaluate_layout_rows`) are each one
:class:`EvaluationResult`: the fields every evaluation has, and the evaluation's own sections
beside them, at the top level of the JSON object so the paths of
:data:`scaledl.evaluation.targets.TARGETS` read them as they are::

    {"evaluation": "reference", "schema_version": 1,
     <section>: ..., ...,
     "targets": [TargetResult, ...], "seconds": {stage: s, ..., "total": s} | null}

``metrics.json`` and ``published_runs.json`` keep their own typed models
(:class:`~scaledl.evaluation.results.Metrics`,
:class:`~scaledl.evaluation.published_runs.PublishedRunsResult`), with the same
:class:`~scaledl.evaluation.targets.TargetResult` entries.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from scaledl.evaluation.targets import Evaluation, TargetResult, target_results
from scaledl.io.atomic import write_atomic
from scaledl.io.safe import read_json

#: Version of the envelope written by this ScaleDL.
RESULT_SCHEMA_VERSION = 1
#: The keys of the envelope; every other top-level key is a section of the evaluation.
ENVELOPE_KEYS = ("evaluation", "schema_version", "targets", "seconds")


@dataclass(frozen=True)
class EvaluationResult:
    """One evaluation's result file (module docstring).

    Attributes:
        evaluation: the evaluation (a :data:`~scaledl.evaluation.targets.Evaluation`:
            ``reference``, ``layouts``, ``gpu_layouts``), as the targets table names it.
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
    def from_dict(
        cls, data: Any, evaluation: Evaluation, source: str = "<result>"
    ) -> EvaluationResult:
        """Validate a result file's parsed JSON.

        A file written before the envelope (no ``evaluation``, ``schema_version`` or
        ``seconds``; target entries of an earlier shape) reads as this evaluation's, not timed.

        Args:
            data: the JSON object.
            evaluation: the evaluation the file must be.
            source: where it came from, named in errors.

        Raises:
            ValueError: not an object, another evaluation, another version, no ``targets``,
                a bad entry or a seconds value that is not a finite number (naming ``source``,
                the field and its value).
        """
        if evaluation not in get_args(Evaluation):
            raise ValueError(f"{source}: no evaluation {evaluation!r} ({get_args(Evaluation)})")
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
            sections={k: v for k, v in data.items() if k not in ENVELOPE_KEYS},
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
        """The JSON object of the file: the envelope first, the sections, targets, seconds."""
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
