"""NeuSight's predictions as a peer column, on a trimmed pair of label and prediction files."""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scaledl.evaluation.gpu_peer import PEER_METHOD, peer_comparison, peer_rows, peer_targets
from scaledl.external.neusight import NeusightFormatError
from scaledl.external.neusight_peer import load_peer_predictions
from scaledl.report.gpu_report import gpu_markdown, peer_table

REPO = Path(__file__).resolve().parents[2]
GPU_DIR = "NVIDIA_H100_80GB_HBM3"
GPU = "NVIDIA H100 80GB HBM3"
STEMS = (
    "bert_large-train-512-2",
    "bert_large-train-512-8",
    "gpt2_large-inf-1024-4",
    "gpt2_large-inf-1024-8",
    "gpt3_xl-inf-2048-2",
)


@pytest.fixture
def trimmed(tmp_path):
    """Five H100 labels and NeuSight's predictions of four of them (one label unpredicted)."""
    neusight, peer = tmp_path / "neusight", tmp_path / "peer"
    (neusight / "device_configs").mkdir(parents=True)
    (neusight / "label" / GPU_DIR).mkdir(parents=True)
    (peer / "prediction" / GPU_DIR).mkdir(parents=True)
    shutil.copy(REPO / "external/neusight/device_configs" / f"{GPU_DIR}.json",
                neusight / "device_configs")  # fmt: skip
    for stem in STEMS:
        shutil.copy(REPO / "external/neusight/label" / GPU_DIR / f"{stem}.json",
                    neusight / "label" / GPU_DIR)  # fmt: skip
    for stem in STEMS[:-1]:
        shutil.copy(REPO / "external/neusight_peer/prediction" / GPU_DIR / f"{stem}.json",
                    peer / "prediction" / GPU_DIR)  # fmt: skip
    return neusight, peer


def _predictions(neusight: Path) -> pd.DataFrame:
    """ScaleDL rows of both protocols on the labels: 4% over on train, 3% under on inference."""
    rows = []
    for i, stem in enumerate(STEMS):
        model, mode, seq, batch = stem.split("-")
        true = json.loads((neusight / "label" / GPU_DIR / f"{stem}.json").read_text())
        for protocol in ("leave_one_model_out", "leave_one_gpu_out"):
            factor = 1.04 if mode == "train" else 0.97
            rows.append({"protocol": protocol, "held_out": model, "workload_id": f"w{i}",
                         "gpu": GPU, "model": model, "mode": "train" if mode == "train" else
                         "infer", "seq_len": int(seq), "batch_size": int(batch),
                         "method": "scaledl", "true_ms": true["e2e_latency"],
                         "pred_ms": factor * true["e2e_latency"], "device_seen": True})  # fmt: skip
    return pd.DataFrame(rows)


def test_peer_rows_are_neusights_files_on_the_same_rows(trimmed):
    neusight, peer_root = trimmed
    peer = load_peer_predictions(peer_root, neusight)
    assert len(peer) == 4 and set(peer["gpu"]) == {GPU}
    predictions = _predictions(neusight)
    rows, unmatched = peer_rows(predictions, peer)
    assert unmatched == [f"{GPU} gpt3_xl infer 2048 2"]
    assert len(rows) == 8 and set(rows["method"]) == {PEER_METHOD}
    assert not rows["device_seen"].any()
    # NeuSight's relative errors computed from the two files by hand
    expected = []
    for stem in STEMS[:-1]:
        label = json.loads((neusight / "label" / GPU_DIR / f"{stem}.json").read_text())
        pred = json.loads((peer_root / "prediction" / GPU_DIR / f"{stem}.json").read_text())
        expected.append(abs(pred["e2e_latency"] - label["e2e_latency"]) / label["e2e_latency"])
    lomo = rows[rows["protocol"] == "leave_one_model_out"]
    got = ((lomo["pred_ms"] - lomo["true_ms"]).abs() / lomo["true_ms"]).to_numpy()
    assert np.allclose(got, expected)

    comparison = peer_comparison(pd.concat([predictions, rows], ignore_index=True))
    overall = comparison["leave_one_model_out"]["overall"]
    assert overall["n_units"] == 4  # only the rows both predicted
    assert overall["mre_a"] == pytest.approx((0.04 * 2 + 0.03 * 2) / 4)
    assert overall["mre_b"] == pytest.approx(np.mean(expected))
    assert overall["ci_low"] <= overall["mre_difference"] <= overall["ci_high"]
    per_mode = comparison["leave_one_model_out"]["per_mode"]
    assert per_mode["train"]["n_units"] == 2 and per_mode["train"]["mre_a"] == pytest.approx(0.04)
    assert set(comparison["leave_one_gpu_out"]["per_gpu"]) == {GPU}
    half = comparison["leave_one_model_out"]["half_of_peer"]["overall"]
    assert half["mre_b"] == pytest.approx(0.5 * np.mean(expected))

    block = {"source": "test", "method": PEER_METHOD, "comparisons": comparison}
    targets = peer_targets(block)
    assert len(targets) == 4  # two protocols x two modes
    train = next(t for t in targets if "model-out" in t.text and "train" in t.text)
    assert train.met == (0.04 <= 0.5 * np.mean(expected[:2]))
    scaled = train.extra["mre_scaledl"] - 0.5 * train.extra["mre_neusight"]
    assert train.value == pytest.approx(scaled) and train.ci_low <= train.value <= train.ci_high
    assert any(row[1] == f"GPU {GPU}" for row in peer_table(block))


METRICS = {
    "source": "NeuSight",
    "n_workloads": 4,
    "leave_one_model_out": {
        "per_gpu": {GPU: {"scaledl": {"mre": 0.035, "n": 4}}},
        "mean_over_gpus": {"scaledl": 0.035},
        "max_over_gpus": {"scaledl": 0.035},
    },
    "targets": [],
}


def test_markdown_shows_the_peer_only_when_evaluated(trimmed):
    assert "paired on the same rows" not in gpu_markdown(METRICS)
    neusight, peer_root = trimmed
    predictions = _predictions(neusight)
    rows, _ = peer_rows(predictions, load_peer_predictions(peer_root, neusight))
    comparison = peer_comparison(pd.concat([predictions, rows], ignore_index=True))
    text = gpu_markdown({**METRICS, "peer": {"source": "s", "method": PEER_METHOD,
                                             "comparisons": comparison}})  # fmt: skip
    assert "ScaleDL vs neusight" in text and f"GPU {GPU}" in text


def test_a_bad_prediction_file_is_named_with_key_and_value(trimmed):
    neusight, peer_root = trimmed
    bad = peer_root / "prediction" / GPU_DIR / f"{STEMS[0]}.json"
    bad.write_text(json.dumps({"e2e_latency": -3.0}))
    message = r"bert_large-train-512-2.json: key 'e2e_latency' \(value -3.0\)"
    with pytest.raises(NeusightFormatError, match=message):
        load_peer_predictions(peer_root, neusight)
    bad.write_text('{"e2e_latency": Infinity}')
    with pytest.raises(NeusightFormatError, match=r"field 'e2e_latency' \(value Infinity\)"):
        load_peer_predictions(peer_root, neusight)
    bad.unlink()
    (peer_root / "prediction" / "NVIDIA_X").mkdir()
    (peer_root / "prediction" / "NVIDIA_X" / f"{STEMS[0]}.json").write_text('{"e2e_latency": 1}')
    with pytest.raises(NeusightFormatError, match="GPU folder 'NVIDIA_X' has no"):
        load_peer_predictions(peer_root, neusight)
