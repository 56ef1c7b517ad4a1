"""Every target of every evaluation: one table of (evaluation, name, path, comparator, threshold).

Every threshold an evaluation judges its result by is a row of :data:`TARGETS`, and no other
module holds one (``tests/evaluation/test_targets.py`` keeps it so). A row names the result it
is about (:attr:`Target.evaluation`: ``metrics`` for ``metrics.json`` of ``scaledl evaluate``,
its GPU and peer sections included; ``gpu_layouts``, ``layouts``, ``published_runs``,
``reference`` for the result files of the other evaluations; ``label_quality`` for the
reproducibility check of a profile) and the value it is about by its path in that result
(dotted keys; ``key[a,b]`` selects the comparison of ``a`` against ``b`` in ``key``,
``min(key)`` the lowest ``key`` of a list; ``{placeholders}`` such as ``{family}`` are filled
in by the evaluation). Each evaluation selects its rows (:func:`target`, :func:`group`,
:func:`for_evaluation`) and judges them with :meth:`Target.check` (or :meth:`Target.judge`,
which reads the value from the result first). The comparators:

* ``<=`` / ``>=``: the value against the threshold; with ``over`` the value is the ratio
  ``value(path) / value(over)`` ("ScaleDL's MRE >= 6x lower than additive's"), with
  ``against`` the bound is ``threshold x value(against)`` ("ScaleDL's MRE <= NeuSight's"),
  with ``noise_factor`` the threshold is ``max(threshold, noise_factor x label noise floor)``;
* ``better``: a paired comparison whose whole interval lies below 0 (its verdict);
* ``not_worse``: a paired comparison whose difference is <= the threshold and whose interval
  does not lie above 0;
* ``ci_high<`` / ``ci_low<=``: a paired comparison's upper bound below the threshold / lower
  bound at most the threshold;
* ``within``: the value lies in the ``(low, high)`` threshold band.

Every result file holds its judged targets in one shape, :class:`TargetResult` (the row's
name, the worded target, the threshold, the measured number with its interval and further
numbers, the measured text, met or not); :meth:`Target.result` builds one, and
:meth:`TargetResult.from_dict` reads it (and the three shapes files written before it).
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Strict,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

Comparator = Literal["<=", ">=", "better", "not_worse", "ci_high<", "ci_low<=", "within"]
Evaluation = Literal[
    "metrics", "gpu_layouts", "layouts", "published_runs", "reference", "label_quality"
]

#: A number of a result file: a JSON number (an int is taken as a float), never a string or a
#: bool (pydantic strict mode).
StrictNumber = Annotated[float, Strict()]

_SELECT = re.compile(r"^(?P<key>[^\[]+)\[(?P<a>[^,\]]+),(?P<b>[^\]]+)\]$")
_LOWEST = re.compile(r"^min\((?P<key>[^)]+)\)$")


@dataclass(frozen=True)
class Target:
    """One target of one evaluation.

    Attributes:
        name: stable key (``id_mre``, ``gpu_lomo_mean``, ...).
        text: the target as its result words it (:meth:`wording` fills in its fields).
        path: where the value sits in the result of :attr:`evaluation` (see the module
            docstring).
        comparator: how the value is compared (see the module docstring).
        threshold: the bound (a fraction, a factor, or a ``(low, high)`` band).
        over: path of the denominator of a ratio target, or ``None``.
        noise_factor: the threshold is at least this factor times the label noise floor
            (``label_reproducibility.mre``), or ``None``.
        evaluation: the result the target is about (see the module docstring).
        against: path of the value the bound is ``threshold x`` of, or ``None``.
        scale: the factor the baseline is scaled by in the paired comparison the value is
            (``0.5``: ScaleDL's errors against half the peer's), or ``None``.
    """

    name: str
    text: str
    path: str
    comparator: Comparator
    threshold: float | tuple[float, float]
    over: str | None = None
    noise_factor: float | None = None
    evaluation: Evaluation = "metrics"
    against: str | None = None
    scale: float | None = None

    def wording(self, **fields: Any) -> str:
        """:attr:`text` with its fields filled in.

        ``threshold`` and ``scale`` are the row's own (formatted by the text, e.g.
        ``{threshold:.1%}``), ``low``/``high`` the bounds of a band threshold as percentages.

        Args:
            **fields: the other fields of the text (``coverage``, ``name``, ``method`` of the
                interval targets, ``mode`` of the peer targets, ...).
        """
        own: dict[str, Any] = {"threshold": self.threshold, "scale": self.scale}
        if isinstance(self.threshold, tuple):
            own |= {"low": f"{self.threshold[0]:.0%}", "high": f"{self.threshold[1]:.0%}"}
        return self.text.format(**own, **fields)

    def limit(self, noise: float | None = None) -> float:
        """The bound a ``<=``/``>=`` value is compared with (the noise floor applied).

        Args:
            noise: the label noise floor (MRE), when the target has a ``noise_factor``.

        Returns:
            The threshold, or ``max(threshold, noise_factor * noise)``.
        """
        if self.noise_factor is None or noise is None:
            return float(self.threshold)
        return max(float(self.threshold), self.noise_factor * noise)

    def check(
        self, value: Any, noise: float | None = None, base: float | None = None
    ) -> bool | None:
        """Whether ``value`` reaches the target (``None``: not measured).

        Args:
            value: the measured number (``<=``, ``>=``, ``within``) or paired comparison
                (``better``, ``not_worse``, ``ci_high<``, ``ci_low<=``: an object or dict with
                ``mre_difference``, ``ci_low``, ``ci_high`` and ``verdict``).
            noise: the label noise floor, for a target with a ``noise_factor`` (``None``
                there: not measured).
            base: the value at :attr:`against`, for a target with one (``None`` there: not
                measured).

        Returns:
            ``True``/``False``, or ``None`` when the value (or a noise floor or base it needs)
            is missing.
        """
        if (
            value is None
            or (self.noise_factor is not None and noise is None)
            or (self.against is not None and base is None)
        ):
            return None
        if self.comparator in ("<=", ">="):
            bound = self.limit(noise) if self.against is None else float(self.threshold) * base
            return bool(value <= bound) if self.comparator == "<=" else bool(value >= bound)
        if self.comparator == "within":
            low, high = self.threshold
            return bool(low <= value <= high)
        if self.comparator == "better":
            return _field(value, "verdict") == "better"
        if self.comparator == "ci_high<":
            return bool(_field(value, "ci_high") < self.threshold)
        if self.comparator == "ci_low<=":
            return bool(_field(value, "ci_low") <= self.threshold)
        return bool(
            _field(value, "mre_difference") <= self.threshold
            and _field(value, "verdict") != "worse"
        )

    def result(
        self,
        measured: str,
        met: bool | None,
        value: float | None = None,
        ci_low: float | None = None,
        ci_high: float | None = None,
        extra: dict[str, float] | None = None,
        text: str | None = None,
        **fields: Any,
    ) -> TargetResult:
        """The target as judged: a :class:`TargetResult` for a result file.

        Args:
            measured: the measured value worded for a reader.
            met: whether the target is met (``None``: not measured).
            value: the number compared with the threshold (``None``: not measured).
            ci_low: lower 95% bound of ``value`` (paired targets), or ``None``.
            ci_high: upper 95% bound of ``value``, or ``None``.
            extra: further numbers of the entry, by name.
            text: the entry's wording when it is not :meth:`wording` of ``fields`` (an entry
                that joins two rows).
            **fields: the text's fields (:meth:`wording`).
        """
        return TargetResult(
            name=self.name,
            text=self.wording(**fields) if text is None else text,
            threshold=self.threshold,
            value=value,
            ci_low=ci_low,
            ci_high=ci_high,
            extra=extra or {},
            measured=measured,
            met=met,
        )

    def judge(
        self, root: Any, noise: float | None = None, **fields: str
    ) -> tuple[Any, bool | None]:
        """The target's value in ``root`` and whether it reaches the target.

        Args:
            root: the result the target is about (a model or a dict).
            noise: the label noise floor, for a target with a ``noise_factor``.
            **fields: values of the paths' ``{placeholders}``.

        Returns:
            ``(value, reached)`` (:meth:`value`, :meth:`check`; the base read at
            :attr:`against`).
        """
        value = self.value(root, **fields)
        base = None if self.against is None else resolve(root, self.against.format(**fields))
        return value, self.check(value, noise, base)

    def value(self, root: Any, **fields: str) -> Any:
        """The target's value in ``root`` (the metrics, or a section of them as a dict).

        Args:
            root: a :class:`~scaledl.evaluation.results.Metrics`, a section model or a dict.
            **fields: values of the path's ``{placeholders}`` (``family``, ``method``).

        Returns:
            The value, the ratio ``value(path) / value(over)``, or ``None`` when any part of
            the path is missing or skipped.
        """
        value = resolve(root, self.path.format(**fields))
        if self.over is None or value is None:
            return value
        denominator = resolve(root, self.over.format(**fields))
        return None if denominator is None else value / denominator


def resolve(root: Any, path: str) -> Any:
    """Follow a dotted path through models and dicts (``None`` where it breaks off).

    A segment ``key[a,b]`` takes ``key`` and then its comparison of ``a`` against ``b`` (its
    ``find``, or the first of a list, or of a dict's ``comparisons``, with ``method_a == a`` and
    ``method_b == b``); a segment
    ``min(key)`` of a list the lowest ``key`` of its items (``None`` ones left out). A skipped
    section (``{"skipped": reason}``, or a model with a ``skipped`` field) yields ``None``.

    Args:
        root: the metrics, a section model or a dict.
        path: e.g. ``splits.ood.mean.scaledl.mre``.

    Returns:
        The value or ``None``.
    """
    node = root
    for part in path.split("."):
        lowest = _LOWEST.match(part)
        if lowest and isinstance(node, list):
            values = [v for v in (_field(e, lowest["key"]) for e in node) if v is not None]
            node = min(values) if values else None
            continue
        selected = _SELECT.match(part)
        key = selected["key"] if selected else part
        node = node.get(key) if isinstance(node, dict) else getattr(node, key, None)
        if node is not None and selected:
            node = _select(node, selected["a"], selected["b"])
        skipped = node.get("skipped") if isinstance(node, dict) else getattr(node, "skipped", None)
        if node is None or skipped is not None:
            return None
    return node


def _field(node: Any, key: str) -> Any:
    """``node[key]`` of a dict, ``node.key`` of a model."""
    return node[key] if isinstance(node, dict) else getattr(node, key)


def _select(node: Any, a: str, b: str) -> Any:
    """The comparison of ``a`` against ``b`` in ``node`` (``None`` if not made)."""
    if isinstance(node, dict):  # a section as JSON: its comparisons, as its model's ``find``
        node = node.get("comparisons", [])
    elif not isinstance(node, list):
        return node.find(a, b)
    return next((c for c in node if (_field(c, "method_a"), _field(c, "method_b")) == (a, b)), None)


def _beats(base: str, split: str, label: str) -> Target:
    return Target(
        f"beats_{base}_{split}",
        f"ScaleDL beats {base} on {label} (paired 95% interval < 0)",
        f"significance.splits.{split}[scaledl,{base}]",
        "better",
        0.0,
    )


#: Split keys of the paired-comparison targets and how the targets name them.
COMPARISON_SPLITS = {
    "id": "in-distribution",
    "ood": "leave-one-family-out (mean over families)",
    "extrapolation": "extrapolation",
}
#: The baselines ScaleDL has to beat on every split, paired.
TARGET_BASELINES = ("additive", "critical_path")
_OOD = "splits.ood.mean"
_COVERAGE_TEXT = (
    "{coverage} intervals: empirical coverage between {low} and {high} ({name}, {method})"
)
_LOMO = "gpu.leave_one_model_out.mean_over_gpus"

#: Every target, in the order the report lists them.
TARGETS: tuple[Target, ...] = (
    Target("id_mre", "ID MRE <= 3% (ScaleDL, iteration)", "splits.id.methods.scaledl.mre", "<=",
           0.03),
    Target("id_mre_noise", "ID MRE <= max(3%, 1.5 x label reproducibility MRE)",
           "splits.id.methods.scaledl.mre", "<=", 0.03, noise_factor=1.5),
    Target("ood_mre", "OOD MRE <= 8% (ScaleDL, mean over families)", f"{_OOD}.scaledl.mre", "<=",
           0.08),
    *(
        Target(f"ood_{error}_vs_{base}", f"OOD {label} of ScaleDL >= {factor:g}x lower than {base}",
               f"{_OOD}.{base}.{error}", ">=", factor, over=f"{_OOD}.scaledl.{error}")
        for base in ("additive", "analytical")
        for error, label, factor in (("mre", "MRE", 6.0), ("rmse_s", "RMSE", 5.0))
    ),
    *(_beats(base, split, label) for split, label in COMPARISON_SPLITS.items()
      for base in TARGET_BASELINES),
    Target("doptimal_halving",
           "D-optimal reaches random's final MRE with at most half the workloads",
           "learning_curves.headline.halving", "not_worse", 0.0),
    Target("gpu_lomo_mean", "GPU leave-one-model-out MRE, mean over GPUs <= 6% (ScaleDL)",
           f"{_LOMO}.scaledl", "<=", 0.06),
    Target("gpu_lomo_worst", "GPU leave-one-model-out MRE <= 10% on every GPU (ScaleDL)",
           "gpu.leave_one_model_out.max_over_gpus.scaledl", "<=", 0.10),
    Target("gpu_lomo_vs_analytical", "GPU leave-one-model-out MRE >= 2x lower than analytical",
           f"{_LOMO}.analytical", ">=", 2.0, over=f"{_LOMO}.scaledl"),
    Target("gpu_logo_mean", "GPU leave-one-GPU-out MRE, mean <= 12% (ScaleDL, from specs only)",
           "gpu.leave_one_gpu_out.mean_over_gpus.scaledl", "<=", 0.12),
    Target("interval_coverage_id", _COVERAGE_TEXT,
           "intervals.id.methods.{method}.iteration.coverage", "within", (0.85, 0.95)),
    Target("interval_coverage_family", _COVERAGE_TEXT,
           "intervals.ood.per_family.{family}.{method}.iteration.coverage", "within",
           (0.80, 1.0)),
    # The GPU section's peer: ScaleDL's errors paired with `scale` x NeuSight's, per mode.
    Target("neusight_peer_half", "GPU {protocol} MRE <= {scale:g}x NeuSight's ({mode} rows)",
           "gpu.peer.comparisons.{protocol_key}.half_of_peer.per_mode.{mode}.mre_difference",
           "<=", 0.0, scale=0.5),
    # docs/results/gpu_layouts.json: NeuSight's 4-GPU rows ({part}: overall, per_layout.<kind>).
    Target("neusight_layouts",
           "NeuSight's 4-GPU rows ({name}): ScaleDL MRE <= NeuSight's own",
           "summary.{part}.mre_scaledl", "<=", 1.0, evaluation="gpu_layouts",
           against="summary.{part}.mre_neusight"),
    # docs/results/layouts.json: the layout recipe, leave one layout kind out, and the worst
    # model's Kendall tau.
    Target("layouts_mre", "leave-one-layout-out MRE, {kind} held out",
           "folds.{kind}.mre_corrected", "<=", 0.10, evaluation="layouts"),
    Target("layouts_tau", "Kendall tau, predicted vs measured layouts (worst model)",
           "ranking.models.min(tau_corrected)", ">=", 0.8, evaluation="layouts"),
    # docs/results/published_runs.json: leave one source out.
    Target("published_answered",
           "answered share >= {threshold:.1%} of rows with an architecture",
           "coverage.answered_share", ">=", 0.95, evaluation="published_runs"),
    Target("published_mean_mre",
           "MRE mean over sources <= {threshold:.1%} (leave one source out)",
           "protocols.leave_one_source_out.mean_mre.scaledl", "<=", 0.10,
           evaluation="published_runs"),
    Target("published_max_mre", "no source above {threshold:.1%}",
           "protocols.leave_one_source_out.max_mre.scaledl", "<=", 0.20,
           evaluation="published_runs"),
    Target("published_ratio",
           "<= {threshold}x the stronger fitted fixed-MFU rule's MRE ({baseline})",
           "ratio_to_fixed_mfu", "<=", 0.5, evaluation="published_runs"),
    Target("published_ratio_interval", "paired interval below 0",
           "protocols.leave_one_source_out.comparisons[scaledl,{baseline}]", "ci_high<", 0.0,
           evaluation="published_runs"),
    Target("published_tau", "Kendall tau of layouts >= {threshold}",
           "ranking.mean_tau.scaledl", ">=", 0.8, evaluation="published_runs"),
    # docs/results/reference.json: the reference dataset.
    Target("reference_sampler_25", "doptimal@25% better than random@25%",
           "learning_curves.comparisons[doptimal@{size},random@{size}]", "ci_high<", 0.0,
           evaluation="reference"),
    Target("reference_sampler_50", "doptimal@50% better than random@50%",
           "learning_curves.comparisons[doptimal@{size},random@{size}]", "ci_high<", 0.0,
           evaluation="reference"),
    Target("reference_halving", "halving: doptimal@50% not worse than the whole pool",
           "learning_curves.halving_full", "ci_low<=", 0.0, evaluation="reference"),
    Target("reference_sequential", "sequential design better than random augmentation",
           "sequential.comparison", "ci_high<", 0.0, evaluation="reference"),
    Target("reference_lofo", "leave-one-family-out MRE of ScaleDL (mean over families)",
           "out_of_distribution.mean_mre.scaledl", "<=", 0.08, evaluation="reference"),
    Target("reference_interval_coverage",
           "unseen-family interval coverage of ScaleDL, every left-out family (lowest)",
           "out_of_distribution.intervals.per_family.{family}.scaledl.iteration.coverage",
           "within", (0.80, 1.0), evaluation="reference"),
    # A profile's label quality (:func:`scaledl.evaluation.reproducibility.label_quality`): the
    # share of parts kept on a host without other processes, and the launch-to-launch label
    # MRE after the drift correction (twice the 3% target of the label MRE between runs).
    Target("label_kept_share", "parts kept >= {threshold:.0%}", "kept_share", ">=", 0.9,
           evaluation="label_quality"),
    Target("label_launch_mre", "label MRE between launches <= {threshold:.0%}",
           "launch_mre_corrected", "<=", 0.06, evaluation="label_quality"),
)  # fmt: skip

#: :data:`TARGETS` by name.
BY_NAME: dict[str, Target] = {t.name: t for t in TARGETS}


def target(name: str) -> Target:
    """The target called ``name``.

    Raises:
        KeyError: no such target (names the known ones).
    """
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no target {name!r}; targets: {sorted(BY_NAME)}") from None


def group(prefix: str) -> list[Target]:
    """The targets whose name starts with ``prefix`` (``gpu_``, ``beats_``, ...), in order."""
    return [t for t in TARGETS if t.name.startswith(prefix)]


def for_evaluation(evaluation: Evaluation) -> list[Target]:
    """The targets of one evaluation's result (:attr:`Target.evaluation`), in order."""
    return [t for t in TARGETS if t.evaluation == evaluation]


class TargetResult(BaseModel):
    """One target as an evaluation judged it: the one entry shape of every result file.

    Every ``targets`` list of a result file holds these: ``metrics.json`` (``gpu``,
    ``gpu.parallel_layouts``, ``intervals``), ``gpu_layouts.json``, ``layouts.json`` (and its
    ``repeats`` and ``across`` profiles), ``published_runs.json`` and ``reference.json``.
    Written as ``{"name", "text", "threshold", "value", "ci_low", "ci_high", "extra",
    "measured", "met"}`` (:meth:`to_dict`), read by :meth:`from_dict`, built by
    :meth:`Target.result`.

    Attributes:
        name: the row of :data:`TARGETS` judged (:attr:`Target.name`, ``layouts_mre``).
        text: the target as this entry words it (``leave-one-layout-out MRE, tp held out``).
        threshold: the row's bound (:attr:`Target.threshold`): a fraction, a factor, or a
            ``(low, high)`` band.
        value: the number compared with the threshold: a fraction (MRE, coverage, share), a
            factor, a Kendall tau, or the difference of a paired comparison; ``None`` when
            not measured, and in an entry read from a file of the first shape (text only).
        ci_low: lower bound of the 95% interval of ``value`` (a paired difference, a
            coverage), else ``None``.
        ci_high: upper bound of that interval, else ``None``.
        extra: further numbers of the entry by name, in the units of their names (the
            layout fold's ``composed`` MRE, ``mre_neusight``, a joined paired comparison's
            ``difference``/``difference_ci_low``/``difference_ci_high``, counts); ``{}``
            when none.
        measured: the measured value and its context worded for a reader.
        met: whether the target is met; ``None``: not measured.

    The numbers (``threshold``, ``value``, ``ci_low``, ``ci_high``, ``extra``) must be JSON
    numbers (:data:`StrictNumber`): ``"0.5"`` or ``true`` is an error, not coerced.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str
    text: str
    threshold: StrictNumber | tuple[StrictNumber, StrictNumber]
    value: StrictNumber | None = None
    ci_low: StrictNumber | None = None
    ci_high: StrictNumber | None = None
    extra: dict[str, StrictInt | StrictNumber] = {}
    measured: str
    met: StrictBool | None

    @model_validator(mode="before")
    @classmethod
    def _earlier_shapes(cls, data: Any) -> Any:
        """An entry of an earlier shape, in this one (the numbers unchanged)."""
        return upgrade_entry(data) if isinstance(data, dict) and "text" not in data else data

    @field_validator("name")
    @classmethod
    def _a_row(cls, name: str) -> str:
        """The name of a row of :data:`TARGETS`."""
        if name not in BY_NAME:
            raise ValueError("not a row of the targets table (scaledl/evaluation/targets.py)")
        return name

    @classmethod
    def from_dict(cls, data: Any, where: str = "target entry") -> TargetResult:
        """Validate one entry (this shape or an earlier one, see :func:`upgrade_entry`).

        Args:
            data: the parsed JSON object (an entry already validated is returned as is).
            where: what the entry is, named in errors (``reference.json: targets[2]``).

        Raises:
            ValueError: not an object, or a field missing, unknown or of the wrong type
                (naming ``where``, the field and its value).
        """
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise ValueError(f"{where}: not a JSON object: {data!r:.80}")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ValueError(_entry_errors(exc, where)) from None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object written to a result file (every field, ``threshold`` band a list)."""
        return self.model_dump(mode="json")


def target_results(entries: Any, where: str = "targets") -> list[TargetResult]:
    """A result file's ``targets`` list, validated (:meth:`TargetResult.from_dict`).

    Raises:
        ValueError: not a list, or a bad entry (naming ``where[i]``, the field and value).
    """
    if not isinstance(entries, list):
        raise ValueError(f"{where}: not a list: {entries!r:.80}")
    return [TargetResult.from_dict(e, f"{where}[{i}]") for i, e in enumerate(entries)]


#: The names pydantic gives the members of a union field in an error's location.
_UNION_MEMBERS = {"float", "int", "tuple[float, float]"}


def _entry_errors(exc: ValidationError, where: str) -> str:
    """``where: field 'met' is 'yes': <what is wrong>``, one line per field.

    The errors of a union field's members are joined by ``or`` on its line.
    """
    lines: dict[str, str] = {}
    for error in exc.errors():
        path = [str(p) for p in error["loc"] if p not in _UNION_MEMBERS]
        field = ".".join(path) or "<entry>"
        if error["type"] == "missing":
            lines[field] = f"{where}: field {field!r} is missing"
        elif error["type"] == "extra_forbidden":
            lines[field] = f"{where}: field {field!r} is unknown (value {error['input']!r:.80})"
        elif field in lines:
            lines[field] += f" or {error['msg'][0].lower()}{error['msg'][1:]}"
        else:
            lines[field] = f"{where}: field {field!r} is {error['input']!r:.80}: {error['msg']}"
    return "\n".join(lines.values())


#: The keys of the entry shapes written before :class:`TargetResult` (see :func:`upgrade_entry`).
_TEXT_SHAPE = {"target", "measured", "reached"}
_LAYOUT_SHAPE = {"name", "value", "target", "met"}
_REFERENCE_SHAPE = {"name", "value", "ci_low", "ci_high", "threshold", "met"}


def upgrade_entry(data: dict[str, Any]) -> dict[str, Any]:
    """An entry of an earlier shape as a :class:`TargetResult` mapping, every number kept.

    The earlier shapes: ``{"target", "measured", "reached"}`` (text only: ``value`` is
    ``None``), ``{"name", "value", "target", "met"}`` with an optional ``composed`` (the
    layouts', ``target`` the threshold) and ``{"name", "value", "ci_low", "ci_high",
    "threshold", "met"}`` (the reference's). The row is the one :data:`TARGETS` row whose text
    the entry's wording matches (:func:`row_for_text`); an entry of the last two shapes gets a
    plain ``measured`` text of its numbers.

    Args:
        data: the entry.

    Returns:
        The mapping in this shape (an entry of no known shape unchanged, for validation to
        name its fields).

    Raises:
        ValueError: a known shape whose wording matches no row, or several.
    """
    keys = set(data)
    if keys == _TEXT_SHAPE:
        spec = row_for_text(data["target"])
        return {"name": spec.name, "text": data["target"], "threshold": spec.threshold,
                "measured": data["measured"], "met": data["reached"]}  # fmt: skip
    if keys in (_LAYOUT_SHAPE, _LAYOUT_SHAPE | {"composed"}, _REFERENCE_SHAPE):
        text = data["name"]
        extra = {"composed": data["composed"]} if "composed" in data else {}
        numbers = {"value": data["value"], "ci_low": data.get("ci_low"),
                   "ci_high": data.get("ci_high")}  # fmt: skip
        measured = ", ".join(
            f"{k} {v:.4g}" for k, v in (numbers | extra).items() if isinstance(v, int | float)
        )
        return {"name": row_for_text(text).name, "text": text,
                "threshold": data.get("threshold", data.get("target")), **numbers,
                "extra": extra, "measured": measured or "not evaluated",
                "met": data["met"]}  # fmt: skip
    return data


def row_for_text(text: str) -> Target:
    """The row of :data:`TARGETS` whose :meth:`Target.wording` reads ``text``.

    The row's own fields (threshold, scale, band) must read as the row words them; every
    other field matches any text. An entry that joins two rows (``"<first>, <second>"``)
    is the first's.

    Raises:
        ValueError: no row or several rows word ``text`` (naming it).
    """
    rows = [t for t in TARGETS if _wording_pattern(t).fullmatch(text)]
    if not rows:
        rows = [t for t in TARGETS if _wording_pattern(t, joined=True).fullmatch(text)]
    if len(rows) != 1:
        found = [t.name for t in rows] or "none"
        raise ValueError(f"target text {text!r}: matches {found} of the targets table, not one")
    return rows[0]


def _wording_pattern(spec: Target, joined: bool = False) -> re.Pattern[str]:
    """A regex of the row's texts: its own fields filled in, the others any text."""
    own: dict[str, Any] = {"threshold": spec.threshold, "scale": spec.scale}
    if isinstance(spec.threshold, tuple):
        own |= {"low": f"{spec.threshold[0]:.0%}", "high": f"{spec.threshold[1]:.0%}"}
    parts = []
    for literal, field, fmt, _ in string.Formatter().parse(spec.text):
        parts.append(re.escape(literal))
        if field is not None:
            parts.append(re.escape(format(own[field], fmt)) if field in own else ".+?")
    return re.compile("".join(parts) + (", .+" if joined else ""))


def gpu_targets(gpu: dict) -> list[TargetResult]:
    """The GPU targets (``gpu_*`` rows), measured on the ``gpu`` section of ``metrics.json``.

    Args:
        gpu: the section as a dict (:func:`scaledl.evaluation.gpu.evaluate_gpu`).

    Returns:
        Entries for the protocols the section holds (leave one model out: mean, worst GPU
        (``extra``: ``gpus_within``, ``gpus``) and, with the analytical baseline, the ratio
        (``extra``: both MREs); leave one GPU out: mean).
    """
    root = {"gpu": gpu}
    rows = []
    lomo = gpu.get("leave_one_model_out")
    if lomo:
        mean, worst = target("gpu_lomo_mean"), target("gpu_lomo_worst")
        per_gpu = lomo["per_gpu"]
        worst_gpu = max(per_gpu, key=lambda g: per_gpu[g]["scaledl"]["mre"])
        under = sum(worst.check(v["scaledl"]["mre"]) for v in per_gpu.values())
        m, w = mean.value(root), worst.value(root)
        rows += [
            mean.result(f"{m:.1%}", mean.check(m), value=m),
            worst.result(f"worst {w:.1%} ({worst_gpu}); {under}/{len(per_gpu)} GPUs "
                         f"<= {worst.threshold:.0%}", worst.check(w), value=w,
                         extra={"gpus_within": under, "gpus": len(per_gpu)}),
        ]  # fmt: skip
        versus = target("gpu_lomo_vs_analytical")
        if "analytical" in lomo["mean_over_gpus"]:
            r, analytical = versus.value(root), resolve(root, versus.path)
            rows.append(
                versus.result(f"{r:.2f}x ({analytical:.1%} vs {m:.1%})", versus.check(r),
                              value=r, extra={"mre_analytical": analytical, "mre_scaledl": m})
            )  # fmt: skip
    if gpu.get("leave_one_gpu_out"):
        logo = target("gpu_logo_mean")
        value = logo.value(root)
        rows.append(logo.result(f"{value:.1%}", logo.check(value), value=value))
    return rows
