"""The project's accuracy targets: one table of (name, path in the metrics, comparator, threshold).

Every target the report, the README block and the interval section of ``metrics.json`` state
is a row of :data:`TARGETS`, and nowhere else holds a threshold. A row names the value it is
about by its path in ``metrics.json`` (dotted keys; ``[a,b]`` selects the comparison of ``a``
against ``b`` in a split's comparisons; ``{family}`` is expanded over the left-out families),
and :meth:`Target.check` applies its comparator:

* ``<=`` / ``>=``: the value against the threshold; with ``over`` the value is the ratio
  ``value(path) / value(over)`` ("ScaleDL's MRE >= 6x lower than additive's"), with
  ``noise_factor`` the threshold is ``max(threshold, noise_factor x label noise floor)``;
* ``better``: a paired comparison whose whole interval lies below 0;
* ``not_worse``: a paired comparison whose difference is <= the threshold and whose interval
  does not lie above 0;
* ``within``: the value lies in the ``(low, high)`` threshold band.

How a measured value is worded is presentation (:mod:`scaledl.report.targets`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

Comparator = Literal["<=", ">=", "better", "not_worse", "within"]

_SELECT = re.compile(r"^(?P<key>[^\[]+)\[(?P<a>[^,\]]+),(?P<b>[^\]]+)\]$")


@dataclass(frozen=True)
class Target:
    """One accuracy target.

    Attributes:
        name: stable key (``id_mre``, ``gpu_lomo_mean``, ...).
        text: the target as the report words it (:meth:`wording` fills in its fields).
        path: where the value sits in ``metrics.json`` (see the module docstring).
        comparator: how the value is compared (see the module docstring).
        threshold: the bound (a fraction, a factor, or a ``(low, high)`` band).
        over: path of the denominator of a ratio target, or ``None``.
        noise_factor: the threshold is at least this factor times the label noise floor
            (``label_reproducibility.mre``), or ``None``.
    """

    name: str
    text: str
    path: str
    comparator: Comparator
    threshold: float | tuple[float, float]
    over: str | None = None
    noise_factor: float | None = None

    def wording(self, **fields: Any) -> str:
        """:attr:`text` with its fields filled in: ``low``/``high`` from a band threshold.

        Args:
            **fields: the other fields of the text (``coverage``, ``name``, ``method`` of the
                interval targets).
        """
        if isinstance(self.threshold, tuple):
            fields = {"low": f"{self.threshold[0]:.0%}", "high": f"{self.threshold[1]:.0%}",
                      **fields}  # fmt: skip
        return self.text.format(**fields)

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

    def check(self, value: Any, noise: float | None = None) -> bool | None:
        """Whether ``value`` reaches the target (``None``: not measured).

        Args:
            value: the measured number (``<=``, ``>=``, ``within``) or comparison
                (``better``, ``not_worse``: an object with ``mre_difference`` and ``verdict``).
            noise: the label noise floor, for a target with a ``noise_factor`` (``None``
                there: not measured).

        Returns:
            ``True``/``False``, or ``None`` when the value (or a noise floor it needs) is
            missing.
        """
        if value is None or (self.noise_factor is not None and noise is None):
            return None
        if self.comparator == "<=":
            return value <= self.limit(noise)
        if self.comparator == ">=":
            return value >= self.limit(noise)
        if self.comparator == "within":
            low, high = self.threshold
            return low <= value <= high
        if self.comparator == "better":
            return value.verdict == "better"
        return value.mre_difference <= self.threshold and value.verdict != "worse"

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

    A segment ``key[a,b]`` takes ``key`` and then its comparison of ``a`` against ``b``
    (``find``). A skipped section (``{"skipped": reason}``, or a model with a ``skipped``
    field) yields ``None``.

    Args:
        root: the metrics, a section model or a dict.
        path: e.g. ``splits.ood.mean.scaledl.mre``.

    Returns:
        The value or ``None``.
    """
    node = root
    for part in path.split("."):
        selected = _SELECT.match(part)
        key = selected["key"] if selected else part
        node = node.get(key) if isinstance(node, dict) else getattr(node, key, None)
        if node is not None and selected:
            node = node.find(selected["a"], selected["b"])
        skipped = node.get("skipped") if isinstance(node, dict) else getattr(node, "skipped", None)
        if node is None or skipped is not None:
            return None
    return node


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


def gpu_targets(metrics: dict) -> list[dict]:
    """The issue's targets on GPU data, measured.

    Returns:
        Rows ``{"target", "measured", "reached"}``.
    """
    rows = []
    lomo = metrics.get("leave_one_model_out")
    if lomo:
        mean, worst = lomo["mean_over_gpus"], lomo["max_over_gpus"]
        worst_gpu = max(lomo["per_gpu"], key=lambda g: lomo["per_gpu"][g]["scaledl"]["mre"])
        under = sum(v["scaledl"]["mre"] <= 0.10 for v in lomo["per_gpu"].values())
        rows += [
            {"target": "GPU leave-one-model-out MRE, mean over GPUs <= 6% (ScaleDL)",
             "measured": f"{mean['scaledl']:.1%}", "reached": mean["scaledl"] <= 0.06},
            {"target": "GPU leave-one-model-out MRE <= 10% on every GPU (ScaleDL)",
             "measured": f"worst {worst['scaledl']:.1%} ({worst_gpu}); "
             f"{under}/{len(lomo['per_gpu'])} GPUs <= 10%",
             "reached": worst["scaledl"] <= 0.10},
        ]  # fmt: skip
        if "analytical" in mean:
            ratio = mean["analytical"] / mean["scaledl"]
            rows.append(
                {"target": "GPU leave-one-model-out MRE >= 2x lower than analytical",
                 "measured": f"{ratio:.2f}x ({mean['analytical']:.1%} vs {mean['scaledl']:.1%})",
                 "reached": ratio >= 2.0}
            )  # fmt: skip
    logo = metrics.get("leave_one_gpu_out")
    if logo:
        mean = logo["mean_over_gpus"]["scaledl"]
        rows.append(
            {"target": "GPU leave-one-GPU-out MRE, mean <= 12% (ScaleDL, from specs only)",
             "measured": f"{mean:.1%}", "reached": mean <= 0.12}
        )  # fmt: skip
    return rows
