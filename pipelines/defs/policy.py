"""Keep-or-register decision of scheduled retraining (pure functions, no Dagster)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RegistrationDecision:
    """Whether a newly trained predictor becomes the current version, and why.

    Attributes:
        register: save the candidate as a new version (and make it ``latest``).
        reason: one sentence for the run metadata.
        candidate_mre: out-of-distribution MRE of the candidate (``None`` if unknown).
        current_mre: out-of-distribution MRE of the current version (``None`` if none).
    """

    register: bool
    reason: str
    candidate_mre: float | None
    current_mre: float | None


def _finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number, else ``None``."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def decide_registration(
    candidate_mre: float | None, current_mre: float | None, tolerance: float = 0.0
) -> RegistrationDecision:
    """Register the candidate only if its OOD MRE did not get worse than the current version's.

    Args:
        candidate_mre: out-of-distribution mean relative error of the new predictor.
        current_mre: that of the registered ``latest`` version, ``None`` when nothing is
            registered yet (or its manifest has no such metric).
        tolerance: relative slack: the candidate passes while
            ``candidate <= current * (1 + tolerance)``.

    Returns:
        The decision. Without a current version (or one without a finite MRE) the candidate is
        registered; a candidate without a finite MRE is never registered over one that has it.

    Raises:
        ValueError: ``tolerance`` is negative.
    """
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance!r}")
    cand, cur = _finite(candidate_mre), _finite(current_mre)
    if cur is None:
        return RegistrationDecision(
            True, "no current version with a finite OOD MRE: registering the candidate", cand, cur
        )
    if cand is None:
        return RegistrationDecision(
            False,
            f"candidate OOD MRE is not a finite number ({candidate_mre!r}); keeping the current "
            f"version (OOD MRE {cur:.4g})",
            cand,
            cur,
        )
    bound = cur * (1.0 + tolerance)
    if cand <= bound:
        return RegistrationDecision(
            True,
            f"OOD MRE {cand:.4g} <= current {cur:.4g} (tolerance {tolerance:g}): registering",
            cand,
            cur,
        )
    return RegistrationDecision(
        False,
        f"OOD MRE got worse: {cand:.4g} > current {cur:.4g} (tolerance {tolerance:g}); keeping "
        "the current version",
        cand,
        cur,
    )


def ood_mre(metrics: dict[str, Any] | None, method: str = "scaledl") -> float | None:
    """The OOD MRE of ``method`` from evaluation metrics or a bundle manifest's metrics.

    Accepts the compact form ``{"ood_mre": x}`` written with each bundle and the full
    evaluation form ``metrics["splits"]["ood"]["mean"][method]["mre"]``.

    Args:
        metrics: the metrics mapping (``None`` gives ``None``).
        method: the method whose MRE is read from the full form.

    Returns:
        The MRE as a float, or ``None`` when absent or not a finite number.
    """
    if not isinstance(metrics, dict):
        return None
    if "ood_mre" in metrics:
        return _finite(metrics["ood_mre"])
    try:
        return _finite(metrics["splits"]["ood"]["mean"][method]["mre"])
    except (KeyError, TypeError):
        return None
