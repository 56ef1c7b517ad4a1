"""ScaleDL's error on the committed 15-workload slice (tests/evaluation/data), pinned.

Protocol: 5-fold cross-validation stratified by family (seed 0), every workload predicted once
by a predictor trained as ``scaledl train`` trains it (:class:`~scaledl.models.train.TrainConfig`
defaults: folds, GNN settings, stratified validation ids) on the other folds; the score is the
iteration-time MRE over the 15 out-of-fold predictions. The fit is seeded and single-threaded,
so the figure repeats exactly on one machine; the tolerance absorbs other BLAS builds and
torch versions while failing a predictor whose error grew by half (a regression to 2x the
error, or to the analytical baseline's, fails).
"""

import numpy as np
from sklearn.model_selection import StratifiedKFold

from scaledl.models.methods import GraphMethod, make_method
from scaledl.models.train import TrainConfig, stratified_val_ids
from scaledl.stats.metrics import relative_errors

#: Out-of-fold iteration MRE of ScaleDL on the slice, measured 2026-12-01 (the same to 4 digits
#: in two runs; the analytical baseline scores 0.7133 and the additive one 0.3021 by the same
#: protocol). Re-measure and update it with the change when a model change is meant to move it.
PINNED_MRE = 0.3316
#: A measured MRE above PINNED_MRE * TOLERANCE fails.
TOLERANCE = 1.3
FOLDS = 5


def out_of_fold_mre(data, make) -> float:
    """MRE of iteration time over out-of-fold predictions of ``make()`` fitted per fold."""
    ids = np.array(data.ids)
    family = data.labels["family"].to_numpy()
    errors = []
    for train, test in StratifiedKFold(FOLDS, shuffle=True, random_state=0).split(ids, family):
        fold = data.subset(list(ids[train]))
        config = TrainConfig()
        method = make(config).fit(fold, stratified_val_ids(fold, config.val_fraction, config.seed))
        held = data.subset(list(ids[test]))
        pred = method.predict([held.workloads[i] for i in held.ids])
        errors.extend(
            relative_errors(pred["iteration_s"].to_numpy() * 1000, held.labels["iteration_ms"])
        )
    assert len(errors) == len(ids)
    return float(np.mean(errors))


def scaledl(config: TrainConfig) -> GraphMethod:
    return GraphMethod(mode="scaledl", folds=config.folds, gnn_config=config.gnn)


def test_scaledl_error_on_the_committed_slice_is_pinned(profile_data):
    mre = out_of_fold_mre(profile_data, scaledl)
    assert mre <= PINNED_MRE * TOLERANCE, f"out-of-fold MRE {mre:.4f} (pinned {PINNED_MRE:.4f})"


def test_the_pin_fails_an_analytical_level_error(profile_data):
    """The tolerance is tight enough to fail a predictor as poor as the analytical model."""
    mre = out_of_fold_mre(profile_data, lambda config: make_method("analytical"))
    assert mre > PINNED_MRE * TOLERANCE
