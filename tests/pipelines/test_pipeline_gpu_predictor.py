"""The gpu_predictor asset: skipped without external data; the manifest's GPU metrics."""

import json

import dagster as dg
from metrics_factory import make_metrics, metrics_dict

from pipelines.defs.assets.gpu_predictor import gpu_metrics_record, gpu_predictor
from pipelines.defs.config import ScaledlSettings
from pipelines.defs.resources import LocalPredictorStore
from scaledl.evaluation.results import Metrics


def test_a_preset_without_external_data_trains_no_gpu_predictor(tmp_path):
    settings = ScaledlSettings(preset="smoke", data_dir=str(tmp_path))
    settings.layout.search_space_path.parent.mkdir(parents=True)
    settings.layout.search_space_path.write_text(
        json.dumps({"name": "smoke", "evaluation": {"include_external": False}})
    )
    out = gpu_predictor(
        context=dg.build_asset_context(), settings=settings, predictor_store=LocalPredictorStore()
    )
    assert "include_external: false" in out.metadata["skipped"]
    assert not settings.layout.predictors_dir.exists()


def test_the_manifest_records_the_gpu_evaluation_or_why_it_was_skipped():
    skipped = gpu_metrics_record(make_metrics(), "m.json")
    assert skipped == {"evaluation": "m.json", "gpu": "skipped: no imported GPU profiles "
                       "(gpu_profiles)"}  # fmt: skip
    body = metrics_dict()
    protocol = {"per_gpu": {"A": {"scaledl": {"mre": 0.1, "n": 2}}},
                "mean_over_gpus": {"scaledl": 0.1}, "max_over_gpus": {"scaledl": 0.1},
                "per_model": {}, "per_mode": {}, "folds": {}}  # fmt: skip
    body["gpu"] = {"source": "s", "n_workloads": 2, "gpus": ["A"], "models": ["m"],
                   "methods": ["scaledl"], "notes": [], "leave_one_model_out": protocol,
                   "operators": {}, "leave_one_gpu_out": None,
                   "not_modelled": {}, "targets": [], "runtime_s": 1.0}  # fmt: skip
    body["gpu"]["peer"] = {"comparisons": {"leave_one_model_out": {"overall": {"n": 2}}}}
    record = gpu_metrics_record(Metrics.from_dict(body, source="<test>"), "m.json")
    assert record["lomo_mean_mre"] == 0.1 and record["logo_mean_mre"] is None
    assert record["peer_lomo"] == {"n": 2}
