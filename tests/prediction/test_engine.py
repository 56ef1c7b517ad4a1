from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from tiny_specs import tiny

from scaledl.prediction.engine import IterationPredictions, predict_iterations


class SharedPrediction:
    """A method whose layer-wise predictions are shared by equal nodes of different names.

    Two graphs of two nodes: node 1 of each is clamped with one note (the layer-wise stage
    predicts one representative of equal nodes and copies its note to the others).
    """

    def predict_distinct(self, workloads, ids=None, arch_keys=None):
        nodes = pd.DataFrame(
            {
                "layer_name": ["a.embed", "a.proj", "b.embed", "b.linear"],
                "layer_type": ["embedding", "projection", "embedding", "projection"],
            }
        )
        gs = SimpleNamespace(graph=np.array([0, 0, 1, 1]), nodes=nodes)
        preds = pd.DataFrame(
            {
                "used_generic": [False, True, False, True],
                "bounded": ["", "backward 9 ms -> 1 ms (above)"] * 2,
            }
        )
        return np.array([10.0, 20.0]), gs, preds


def test_clamp_notes_name_each_workloads_own_layer():
    got = predict_iterations(SharedPrediction(), [tiny("bert"), tiny("bert", batch_size=4)])
    assert got.bounded == [
        ("a.proj backward 9 ms -> 1 ms (above)",),
        ("b.linear backward 9 ms -> 1 ms (above)",),
    ]
    assert got.generic_types == [("projection",), ("projection",)]
    frame = got.generic_nodes(["w0", "w1"])
    assert frame.columns.tolist() == ["workload_id", "layer_type", "used_generic", "bounded"]
    clamped = frame[frame["bounded"] != ""]
    assert clamped["workload_id"].tolist() == ["w0", "w1"]
    assert not clamped["used_generic"].any()


@pytest.mark.parametrize("bounded", [None, [(), ()]])
def test_no_clamp_no_rows(bounded):
    got = IterationPredictions(np.array([1.0, 2.0]), [(), ("pooler",)], bounded)
    frame = got.generic_nodes(["w0", "w1"])
    assert frame[["workload_id", "layer_type"]].values.tolist() == [["w1", "pooler"]]
