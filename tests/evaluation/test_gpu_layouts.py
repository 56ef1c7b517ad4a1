"""NeuSight's 4-GPU rows composed from the GPU predictor: tiny synthetic models, real Vidur data."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from gpu_synthetic import TINY_GRID, fitted_synthetic, synthetic_layout_labels, write_synthetic

from scaledl.evaluation.gpu import GpuEvaluationConfig
from scaledl.evaluation.gpu_layouts import (
    evaluate_layout_rows,
    layout_ranking,
    layout_summary,
    layout_targets,
    layout_workload,
)
from scaledl.external.neusight import NeusightFormatError
from scaledl.external.neusight_peer import load_peer_layout_predictions
from scaledl.external.vidur import load_vidur_allreduce
from scaledl.parallel.measured_collectives import MeasuredCollectives, fit_system_allreduce

pytestmark = pytest.mark.slow  # tens of seconds: handed out first in make test (conftest)

REPO = Path(__file__).resolve().parents[2]
GPU = "NVIDIA H100 80GB HBM3"


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    return fitted_synthetic(tmp_path_factory.mktemp("gpu_layouts"))


def test_rows_are_paired_with_the_peer_and_summarised_per_layout(fitted):
    data, method = fitted
    labels = synthetic_layout_labels(data)
    peer = pd.DataFrame(
        {"gpu": GPU, "stem": ["tiny_b-train-32-4-dp2", "tiny_b-train-32-4-tp2"],
         "peer_ms": [1.1, 0.8], "file": "p"}
    )  # fmt: skip
    vidur = load_vidur_allreduce(REPO / "external" / "vidur" / "network")
    result = evaluate_layout_rows(method, labels, vidur, peer)
    rows = {r["layout"]: r for r in result["rows"]}
    assert set(rows) == {"dp2", "tp2", "pp2_1"}
    assert rows["dp2"]["neusight_re"] == pytest.approx(0.1)
    assert rows["pp2_1"]["neusight_re"] is None
    assert result["unmatched"] == [f"{GPU} tiny_b-train-32-4-pp2_1"]
    overall = result["summary"]["overall"]
    assert overall["n"] == 2  # only the rows both predicted
    assert overall["mre_neusight"] == pytest.approx(0.15)
    assert overall["paired"]["n_units"] == 2
    assert "skipped" in result["summary"]["per_layout"]["dp2"]["paired"]
    assert result["targets"][0]["met"] == (overall["mre_scaledl"] <= 0.15)
    assert set(result["collectives"]) == {"h100_dgx"}
    # the earlier split of the tensor-parallel kernels is history (benchmarks/history)
    assert "kernel_split" not in result and "scaledl_divide_ms" not in rows["tp2"]


def test_targets_say_when_no_row_is_paired():
    rows = [{"layout": "tp4", "scaledl_re": 0.1, "neusight_re": None}]
    targets = layout_targets(layout_summary(rows))
    assert targets[0].met is None and targets[0].measured == "no paired row"
    assert targets[0].value is None and targets[0].extra == {}


def test_a_label_without_a_workload_names_the_file_and_field():
    label = SimpleNamespace(file="/x/gpt3_xl-train-2048-4-tp4.json", workload=None)
    with pytest.raises(ValueError, match=r"gpt3_xl-train-2048-4-tp4\.json: field 'workload'"):
        layout_workload(label)
    label.workload = "{not json"
    with pytest.raises(ValueError, match=r"tp4\.json: field 'workload' is not a workload spec"):
        layout_workload(label)


def test_the_peer_layout_predictions_are_neusights_eleven_files():
    peer = load_peer_layout_predictions(
        REPO / "external" / "neusight_peer", REPO / "external" / "neusight"
    )
    labels = sorted((REPO / "external" / "neusight" / "label").glob("*/*-*-*-*-[dtp]p4*.json"))
    assert len(peer) == len(labels) == 11
    assert set(peer["stem"]) == {p.stem for p in labels}
    tp = peer[peer["stem"] == "gpt3_xl-train-2048-4-tp4"]
    assert tp["peer_ms"].iloc[0] == pytest.approx(1047.573299674327)


def test_a_malformed_peer_layout_file_names_the_file_and_key(tmp_path):
    neusight = REPO / "external" / "neusight"
    folder = tmp_path / "prediction" / "NVIDIA_H100_80GB_HBM3"
    folder.mkdir(parents=True)
    (folder / "gpt2_large-train-1024-4-tp4.json").write_text(json.dumps({"fw_latency": 1.0}))
    with pytest.raises(NeusightFormatError, match=r"tp4\.json: key 'e2e_latency' \(value None\)"):
        load_peer_layout_predictions(tmp_path, neusight)


def test_the_system_fit_names_a_missing_system():
    vidur = load_vidur_allreduce(REPO / "external" / "vidur" / "network")
    with pytest.raises(ValueError, match="field 'system' has no 'v100_dgx' rows"):
        fit_system_allreduce(vidur, "v100_dgx")
    model = MeasuredCollectives(fit_system_allreduce(vidur, "h100_dgx"), "h100_dgx")
    assert np.all(model.predict_ms("all_reduce", [1e6, 1e7], 1) == 0)
    assert model.predict_ms("send", 1e7, 2) == pytest.approx(model.predict_ms("all_reduce", 1e7, 2))


def test_evaluate_gpu_adds_the_layouts_and_their_targets(fitted, tmp_path):
    from scaledl.evaluation.gpu import evaluate_gpu
    from scaledl.evaluation.results import GpuResults

    data, _ = fitted
    (tmp_path / "profiles").mkdir()
    directory, _ = write_synthetic(tmp_path / "profiles")
    labels = tmp_path / "parallel_labels.parquet"
    synthetic_layout_labels(data).to_parquet(labels)
    peer = tmp_path / "peer" / "prediction" / "NVIDIA_H100_80GB_HBM3"
    peer.mkdir(parents=True)
    (peer / "tiny_b-train-32-4-tp2.json").write_text(json.dumps({"e2e_latency": 0.9}))
    config = GpuEvaluationConfig(
        operator_params={"grid": TINY_GRID, "min_rows": 5}, leave_one_gpu_out=False,
        parallel_labels=labels, vidur_root=REPO / "external" / "vidur" / "network",
        peer_root=tmp_path / "peer", neusight_root=REPO / "external" / "neusight",
    )  # fmt: skip
    metrics, _ = evaluate_gpu(directory, config)
    layouts = metrics["parallel_layouts"]
    assert len(layouts["rows"]) == 3 and layouts["summary"]["overall"]["n"] == 1
    assert any("4-GPU rows (all)" in t["text"] for t in metrics["targets"])
    # the metrics.json schema accepts the section (a protocol not run is written as null)
    GpuResults.model_validate({"leave_one_gpu_out": None, **metrics})


def test_ranking_counts_the_pairs_each_predictor_orders_as_measured():
    def row(layout, true, ours, theirs, batch=4):
        return {"gpu": "G", "model": "m", "global_batch_size": batch, "layout": layout,
                "true_ms": true, "scaledl_ms": ours, "neusight_ms": theirs}  # fmt: skip

    rows = [row("dp4", 1.0, 2.0, 1.0), row("tp4", 1.5, 1.5, 2.0), row("pp4_1", 3.0, 4.0, None),
            row("dp4", 5.0, 5.0, 5.0, batch=16)]  # fmt: skip
    ranking = layout_ranking(rows)
    (group,) = ranking["groups"]  # the lone batch-16 row has no pair
    assert group["layouts"] == ["dp4", "tp4", "pp4_1"]
    assert (group["pairs"], group["scaledl_right"]) == (3, 2)  # dp4 vs tp4 misordered
    assert (group["neusight_pairs"], group["neusight_right"]) == (1, 1)  # no pp4_1 prediction
    assert (ranking["pairs"], ranking["scaledl_right"], ranking["neusight_right"]) == (3, 2, 1)
