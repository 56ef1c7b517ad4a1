"""The batched path of Predictor.predict pins the numbers of the per-workload path."""

import numpy as np
import pandas as pd
import pytest
from tiny_specs import tiny_spec

from scaledl.models.intervals import IntervalCalibration
from scaledl.prediction.predictor import load_predictor
from scaledl.registry import register_bundle

pytestmark = pytest.mark.slow

#: Trained families at their sizes and others (in and out of domain), ranks 1 and 2, a
#: family never trained on (llama: generic layer models), a row repeated, many dataset sizes.
ROWS = [
    {"world_size": 1, **spec}
    for spec in [
        tiny_spec("bert", dataset_size=8),
        tiny_spec("bert", dataset_size=1000),
        tiny_spec("bert", seq_len=32, batch_size=4, dataset_size=77),
        tiny_spec("bert", world_size=2, dataset_size=4096),
        tiny_spec("bert", world_size=2, batch_size=8, dataset_size=4096),
        tiny_spec("vit", dataset_size=64),
        tiny_spec("vit", world_size=2, image_size=64, dataset_size=65),
        tiny_spec("t5", batch_size=3, dataset_size=999),
        tiny_spec("llama", dataset_size=50),
        tiny_spec("bert", dataset_size=8),
    ]
]


@pytest.fixture(scope="module")
def predictor(registry_root, tmp_path_factory):
    """The tiny bundle with a calibration (synthetic residuals), so intervals are compared too."""
    rng = np.random.default_rng(0)
    sigmas = {"in_domain": 0.1, "unseen_family": 0.5, "beyond_range": 0.3}
    residuals = {
        t: {s: rng.normal(0, v, 40) for s, v in sigmas.items()} for t in ("iteration", "epoch")
    }
    root = tmp_path_factory.mktemp("batched-registry")
    register_bundle(registry_root / "scaledl" / "v2", root, "scaledl",
                    calibration=IntervalCalibration(residuals))  # fmt: skip
    return load_predictor(root / "scaledl")


def test_batched_predictions_equal_the_per_workload_path(predictor):
    frame = pd.DataFrame(ROWS)
    got = predictor.predict(frame, coverage=0.9)
    # detail=True is the path of every release before the batched one: a graph set of the
    # distinct workloads, one node-prediction and GNN pass over it.
    want, _ = predictor.predict(frame, coverage=0.9, detail=True)
    pd.testing.assert_frame_equal(got, want, rtol=1e-6)
    assert not got["in_domain"].all() and got["used_generic_layer_model"].any()
    alone = pd.concat([predictor.predict([row], coverage=0.9) for row in ROWS], ignore_index=True)
    pd.testing.assert_frame_equal(got, alone, rtol=1e-6)


def test_rows_differing_only_in_dataset_size_share_one_iteration_prediction(predictor, monkeypatch):
    method = predictor.method
    graphs = []
    distinct = method.predict_distinct

    def counting(workloads, *args, **keys):
        graphs.append(len(workloads))
        return distinct(workloads, *args, **keys)

    monkeypatch.setattr(method, "predict_distinct", counting)
    sizes = [8, 9, 100, 12_345, 10**7]
    rows = [tiny_spec("bert", dataset_size=d) for d in sizes] + [tiny_spec("vit")]
    result = predictor.predict(rows)
    assert sum(graphs) == 2  # one bert, one vit iteration, whatever the dataset sizes
    bert = result.iloc[: len(sizes)]
    assert bert["iteration_s"].nunique() == 1
    assert bert["steps_per_epoch"].tolist() == [int(np.ceil(d / 2)) for d in sizes]
    want = method.epoch_model_.predict(bert["iteration_s"], bert["steps_per_epoch"], 2)
    np.testing.assert_allclose(bert["epoch_s"], want, rtol=1e-12)
    assert bert["workload_id"].nunique() == len(sizes)
