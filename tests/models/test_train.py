import hashlib
from pathlib import Path

import pytest

from scaledl.models.data import ProfileDataError, load_profile_data
from scaledl.models.gnn_training import GNNTrainConfig
from scaledl.models.train import TrainConfig, holdout_ids, train_predictor, validation_ids

PROFILES = Path(__file__).resolve().parents[1] / "evaluation" / "data"
IDS = [hashlib.sha256(str(k).encode()).hexdigest()[:16] for k in range(2000)]
SMALL_GNN = GNNTrainConfig(hidden_channels=16, heads=2, max_epochs=20, patience=5)


def test_holdout_is_stable_when_the_data_grows():
    early = holdout_ids(IDS[:300], 0.2)
    later = holdout_ids(IDS, 0.2)
    assert early == [i for i in later if i in set(IDS[:300])]
    assert holdout_ids(reversed(IDS), 0.2) == later


def test_holdout_share_matches_the_fraction():
    assert abs(len(holdout_ids(IDS, 0.2)) / len(IDS) - 0.2) < 0.03
    assert holdout_ids(IDS, 0.0) == []
    assert set(holdout_ids(IDS, 0.1)) <= set(holdout_ids(IDS, 0.3))
    with pytest.raises(ValueError, match="holdout_fraction"):
        holdout_ids(IDS, 1.0)


def test_training_leaves_the_holdout_out():
    data = load_profile_data(PROFILES)
    held = set(holdout_ids(data.ids, 0.3))
    assert 0 < len(held) < len(data.ids)
    method = train_predictor(data, TrainConfig(gnn=SMALL_GNN, folds=2, holdout_fraction=0.3))
    assert set(method.training_workload_ids_) == set(data.ids) - held


def test_a_holdout_that_leaves_too_little_is_an_error():
    with pytest.raises(ProfileDataError, match="fewer than 2 left"):
        train_predictor(PROFILES, TrainConfig(holdout_fraction=0.999))


def test_validation_ids_seeded():
    ids = [f"w{k}" for k in range(20)]
    assert validation_ids(ids, 0.15, 1) == validation_ids(ids, 0.15, 1)
    assert len(validation_ids(ids, 0.15, 1)) == 3
    assert validation_ids(ids[:3], 0.15, 1) == ()
    with pytest.raises(ValueError, match="validation fraction"):
        validation_ids(ids, 1.0, 0)
