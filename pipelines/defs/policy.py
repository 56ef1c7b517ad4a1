"""Keep-or-register decision of scheduled retraining (no Dagster here).

The candidate (the newly trained predictor) and the current version are compared on the same
*held-out* workloads: the validated workloads that neither was trained on. Training keeps a
stable share of the workloads out (:func:`scaledl.models.train.holdout_ids`), so these exist
however the data grew. On them the iteration-time relative errors of both predictors are
compared paired (:func:`scaledl.stats.significance.paired_comparison`: MRE difference with
a 95% paired bootstrap interval). The candidate is registered when it is *better* or *not
distinguishable*, and kept out only when it is *worse*: comparing each predictor's own MRE on a
different split or on older data (what this replaced) decided by chance, two identical runs
differing by 15 points.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scaledl.prediction.predictor import Predictor
    from scaledl.stats.significance import Comparison


@dataclass(frozen=True)
class RegistrationDecision:
    """Whether a newly trained predictor becomes the current version, and why.

    Attributes:
        register: save the candidate as a new version (and make it ``latest``).
        reason: one sentence for the run metadata.
        comparison: candidate (A) versus current (B) on the held-out workloads, ``None`` when
            there was nothing (usable) to compare with or too few held-out workloads.
    """

    register: bool
    reason: str
    comparison: Comparison | None = None


def decide_registration(
    *,
    has_current: bool,
    comparison: Comparison | None = None,
    current_unusable: str = "",
    not_compared: str = "",
) -> RegistrationDecision:
    """Register the candidate unless it is worse than the current version on held-out workloads.

    Args:
        has_current: a version is registered.
        comparison: candidate (A) versus current (B), when it could be made.
        current_unusable: why the current version cannot load or predict these workloads (it
            is then replaced).
        not_compared: why no comparison was made although the current version is usable (too
            few held-out workloads: the current version is then kept).

    Returns:
        The decision.
    """
    if not has_current:
        return RegistrationDecision(True, "no registered version: registering the candidate")
    if current_unusable:
        return RegistrationDecision(
            True, f"the current version is unusable ({current_unusable}): registering"
        )
    if comparison is None:
        return RegistrationDecision(
            False, f"no paired comparison ({not_compared}); keeping the current version"
        )
    if comparison.verdict == "worse":
        return RegistrationDecision(
            False, f"{comparison.describe()}; keeping the current version", comparison
        )
    return RegistrationDecision(True, f"{comparison.describe()}; registering", comparison)


def held_out_ids(
    validated_ids: list[str], candidate_ids: list[str], current_ids: list[str]
) -> list[str]:
    """Validated workloads neither predictor was trained on, in validated order.

    Args:
        validated_ids: the validated workloads (with measured labels).
        candidate_ids: the candidate's training workloads.
        current_ids: the current version's training workloads (empty when its bundle does not
            record them: then only the candidate's are excluded).

    Returns:
        The held-out workload ids.
    """
    seen = set(candidate_ids) | set(current_ids)
    return [i for i in validated_ids if i not in seen]


def compare_on_held_out(
    candidate: Predictor,
    current: Predictor,
    validated_dir: Path,
    confidence_level: float = 0.95,
) -> tuple[Comparison | None, str]:
    """Compare candidate and current on the validated workloads neither was trained on.

    Args:
        candidate: the newly trained predictor.
        current: the registered version.
        validated_dir: the validated profile tables (labels: measured iteration time).
        confidence_level: coverage of the paired interval.

    Returns:
        ``(comparison, note)``: the comparison (``None`` with fewer than two held-out
        workloads) and a note for the metadata (what was compared, or why nothing was).

    Raises:
        scaledl.workloads.fields.WorkloadError: the current version cannot predict these
            workloads (another device).
        scaledl.registry.BundleError: a predictor's GNN cannot be built.
    """
    from scaledl.models.data import load_profile_data
    from scaledl.stats.metrics import relative_errors
    from scaledl.stats.significance import MIN_WORKLOADS, paired_comparison

    data = load_profile_data(Path(validated_dir))
    ids = held_out_ids(data.ids, candidate.training_workload_ids, current.training_workload_ids)
    note = f"{len(ids)} held-out workloads of {len(data.ids)} validated"
    if not current.training_workload_ids:
        note += (
            "; the current version does not record its training workloads (older bundle): it "
            "may have seen some of them"
        )
    if len(ids) < MIN_WORKLOADS:
        return None, f"{note}: fewer than {MIN_WORKLOADS} to compare (raise holdout_fraction)"
    workloads = [data.workloads[i] for i in ids]
    true_s = data.labels.set_index("workload_id").loc[ids, "iteration_ms"].to_numpy() / 1000.0
    errors: dict[str, Any] = {}
    for name, predictor in (("candidate", candidate), ("current", current)):
        predicted = predictor.predict(workloads)["iteration_s"].to_numpy()
        errors[name] = relative_errors(predicted, true_s)
    comparison = paired_comparison(
        errors["candidate"],
        errors["current"],
        method_a=f"candidate {candidate.version}",
        method_b=f"current {current.version}",
        confidence_level=confidence_level,
    )
    return comparison, note
