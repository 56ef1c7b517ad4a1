import numpy as np
import pandas as pd
import pytest

from scaledl.evaluation import EvaluationConfig, evaluate
from scaledl.evaluation.results import Metrics, MetricsError, Skipped
from scaledl.models.data import ProfileDataError, read_tables
from scaledl.models.gnn_training import GNNTrainConfig
from scaledl.models.methods import ABLATION_NAMES
from scaledl.profiles.tables import PROFILE_TABLE_NAMES
from scaledl.report.presenter import HtmlReport

pytestmark = pytest.mark.slow  # tens of seconds: handed out first in make test (conftest)

METHODS = ("analytical", "global_gbdt", "additive")


def test_evaluate_end_to_end(profile_dir, tmp_path):
    config = EvaluationConfig(
        methods=METHODS,
        ablations=(),
        n_jobs=1,
        learning_curve_methods=("analytical",),
        learning_curve_sizes=(9,),
        learning_curve_seeds=2,
        include_external=False,
    )
    m = evaluate(profile_dir, tmp_path, config, presenter=HtmlReport())
    assert Metrics.read(tmp_path / "metrics.json").to_dict() == m.to_dict()
    for method in METHODS:
        block = m.splits.id.methods[method]
        assert set(block.per_family) == {"bert", "llama", "vit"}
        assert block.mre == block.iteration.mre > 0
        assert m.mre("ood", method) > 0
        assert m.split("extrapolation").methods[method].iteration.n >= 1
    assert set(m.splits.ood.per_family) == {"bert", "llama", "vit"}
    assert m.splits.ood.per_family["bert"]["additive"].iteration.n == 5
    curves = m.require("learning_curves").headline.samplers
    assert set(curves) >= {"doptimal", "random", "lhs"}
    assert curves["random"].sizes[0] == 9
    assert isinstance(m.external, Skipped) and isinstance(m.gpu, Skipped)
    assert m.fit_counts["additive"] == 1 + 3 + 1 + 1  # id, 3 ood, extrapolation, sweep
    assert m.runtime_s.fit_seconds["additive"] > 0
    rep = m.label_reproducibility
    assert isinstance(rep, Skipped) or 0 <= rep.mre < 1
    pred = pd.read_parquet(tmp_path / "predictions.parquet")
    assert {
        "split",
        "method",
        "seed",
        "workload_id",
        "true_iteration_s",
        "pred_iteration_s",
        "true_epoch_s",
        "pred_epoch_s",
    } <= set(pred.columns)
    vit = pred[(pred["split"] == "ood/vit") & (pred["method"] == "analytical")]
    # One row per model seed and test workload (a seed-independent method repeats its fit).
    assert len(vit) == 5 * config.seeds and sorted(set(vit["seed"])) == list(range(config.seeds))
    assert vit.groupby("workload_id")["pred_iteration_s"].nunique().eq(1).all()
    # Intervals: every method scored on every split, each left-out family calibrated on the
    # other two (10 residuals); no ScaleDL, hence no calibration for a bundle.
    iv = m.intervals
    assert set(iv.id.methods) == set(METHODS) and iv.coverage == 0.9
    bert = iv.ood.per_family["bert"]["additive"].iteration
    assert bert.n == 5 and bert.calibration_size == 10 and 0 <= bert.coverage <= 1
    assert iv.calibration is None and not (tmp_path / "calibration.json").exists()
    assert {"pred_iteration_s_low", "pred_iteration_s_high", "pred_epoch_s_low"} <= set(pred)
    assert m.runtime_s.intervals >= 0
    assert "id='summary'" in (tmp_path / "report.html").read_text()
    html = (tmp_path / "report.html").read_text()
    for name in ("pred_vs_measured", "sweep", "ood_mre", "learning_curves_analytical"):
        assert (tmp_path / "figures" / f"{name}.png").is_file()
        assert f"alt='{name}' src='data:image/png;base64," in html


def test_single_family_skips_ood(profile_data, profile_dir, tmp_path):
    tables = read_tables(profile_dir)
    bert = set(profile_data.labels.loc[profile_data.labels["family"] == "bert", "workload_id"])
    one = tmp_path / "one"
    one.mkdir()
    for name in PROFILE_TABLE_NAMES:
        t = tables[name]
        t[t["workload_id"].isin(bert)].to_parquet(one / f"{name}.parquet", index=False)
    config = EvaluationConfig(
        methods=("analytical",),
        ablations=(),
        n_jobs=1,
        learning_curve_seeds=0,
        include_external=False,
        figures=False,
    )
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "report.html").write_text("an older run's report")
    m = evaluate(one, tmp_path / "out", config)
    assert not (tmp_path / "out" / "report.html").exists()  # no presenter: no report, none stale
    assert isinstance(m.splits.ood, Skipped)
    assert any("OOD skipped" in n for n in m.notes)
    assert m.splits.id.methods["analytical"].iteration.n == 1
    with pytest.raises(MetricsError, match="splits.ood.*fewer than two families"):
        m.mre("ood", "analytical")


def test_seeds_ablations_and_paired_comparisons(profile_dir, tmp_path):
    gnn = GNNTrainConfig(hidden_channels=8, heads=2, num_layers=1, max_epochs=5, patience=5)
    config = EvaluationConfig(
        methods=("scaledl", "additive", "critical_path"),
        ablations=("scaledl_sum_prior",),
        seeds=2,
        n_jobs=1,
        method_params={"scaledl": {"gnn_config": gnn, "folds": 2}},
        learning_curve_seeds=0,
        include_external=False,
        figures=False,
    )
    m = evaluate(profile_dir, tmp_path, config)
    assert m.main_methods == ["scaledl", "additive", "critical_path"]
    assert m.methods[-1] == "scaledl_sum_prior" and set(m.ablations) == {"scaledl_sum_prior"}
    sig = m.significance
    assert set(sig.splits) == {"id", "ood", "ood/bert", "ood/llama", "ood/vit", "extrapolation"}
    ood = sig.splits["ood"]
    assert ood.n_workloads == 15 and ood.seeds == 2
    assert [(c.method_a, c.method_b) for c in ood.comparisons] == [
        ("scaledl", "additive"),
        ("scaledl", "critical_path"),
        ("scaledl", "scaledl_sum_prior"),
        ("critical_path", "additive"),
        ("scaledl_sum_prior", "additive"),
    ]
    for c in ood.comparisons:
        assert c.ci_low <= c.mre_difference <= c.ci_high and c.unit == "workload"
    # The pooled leave-one-family-out comparison weights families equally, as the OOD mean.
    scaledl_vs_additive = ood.find("scaledl", "additive")
    assert len(ood.mre_per_seed["scaledl"]) == 2
    assert scaledl_vs_additive.n_repeats_a == 2 and scaledl_vs_additive.n_repeats_b == 2
    # Seeded methods: 2 fits per split; the others once per split (5 splits), + 1 sweep fit.
    assert m.fit_counts["scaledl"] == 2 * 5 + 1 and m.fit_counts["scaledl_sum_prior"] == 2 * 5
    assert m.fit_counts["additive"] == 5 + 1 and m.fit_counts["critical_path"] == 5 + 1
    assert m.runtime_s.layerwise_stages > 0
    diag = m.require("gnn_diagnosis")
    assert set(diag.splits) == {"id", "ood", "extrapolation"}
    assert set(diag.splits["id"]) == {"scaledl", "scaledl_sum_prior"}
    pred = pd.read_parquet(tmp_path / "predictions.parquet")
    per_seed = pred[(pred["split"] == "id") & (pred["method"] == "additive")]
    assert sorted(per_seed["seed"].unique()) == [0, 1]
    assert (per_seed.groupby("workload_id")["pred_iteration_s"].nunique() == 1).all()
    # A seeded method's split errors are the mean over its seeds.
    assert m.splits.id.methods["scaledl"].mre == pytest.approx(
        np.mean(sig.splits["id"].mre_per_seed["scaledl"])
    )


def test_invalid_dir_names_the_file(tmp_path):
    with pytest.raises(ProfileDataError, match="workloads.parquet"):
        evaluate(tmp_path / "missing", tmp_path / "out", EvaluationConfig(include_external=False))


def test_config_rejects_unknown_method():
    with pytest.raises(ValueError, match="unknown method"):
        EvaluationConfig(methods=("magic",))
    with pytest.raises(ValueError, match="unknown ablation"):
        EvaluationConfig(ablations=("scaledl_no_gnn",))


def test_config_from_preset_sets_every_gnn_method():
    config = EvaluationConfig.from_preset(
        {"seeds": 3, "gnn_max_epochs": 10, "gnn_hidden_channels": 16, "folds": 2}
    )
    assert config.seeds == 3
    for method in ("scaledl", "scaledl_no_edges", "scaledl_sum_prior"):
        params = config.method_params[method]
        assert params["folds"] == 2 and params["gnn_config"].max_epochs == 10
        assert params["gnn_config"].hidden_channels == 16
    assert "folds" not in config.method_params["graph_only"]
    with pytest.raises(ValueError, match="gnn_magic"):
        EvaluationConfig.from_preset({"gnn_magic": 1})


def test_scaledl_evaluation_writes_the_bundle_calibration_and_the_headline(profile_dir, tmp_path):
    from scaledl.models.gnn_training import GNNTrainConfig
    from scaledl.models.intervals import IntervalCalibration
    from scaledl.profiles.fingerprint import tables_sha256

    cheap = {"folds": 2, "gnn_config": GNNTrainConfig(hidden_channels=8, heads=1, max_epochs=5,
                                                      patience=2)}  # fmt: skip
    config = EvaluationConfig(
        methods=("scaledl",), method_params={"scaledl": cheap}, learning_curve_seeds=0,
        include_external=False, ablations=(), seeds=2, n_jobs=1,
    )  # fmt: skip
    m = evaluate(profile_dir, tmp_path, config, presenter=HtmlReport())
    calibration = IntervalCalibration.read(tmp_path / "calibration.json")
    assert calibration.training_data_sha256 == tables_sha256(profile_dir)
    sizes = calibration.sizes()["iteration"]
    assert sizes["unseen_family"] == 15  # every workload once, from a model without its family
    assert sizes == m.intervals.calibration["iteration"]
    assert (tmp_path / "figures" / "headline.png").is_file()
    assert "alt='headline'" in (tmp_path / "report.html").read_text()


def test_the_quick_preset_meets_the_issue_minimums():
    from scaledl.design import load_preset

    config = EvaluationConfig.from_preset(load_preset("quick")["evaluation"])
    assert config.seeds >= 5 and config.learning_curve_seeds >= 10
    assert set(config.ablations) == set(ABLATION_NAMES)
    assert {"doptimal", "random"} <= set(config.learning_curve_samplers)
    # The main splits train the GNN methods as the registered predictor is trained.
    assert not any(config.method_params.get(m) for m in ("scaledl", *ABLATION_NAMES))


def test_the_evaluation_reports_progress_per_stage_and_fold(profile_dir, tmp_path):
    config = EvaluationConfig(
        methods=("analytical",),
        ablations=(),
        seeds=1,
        n_jobs=1,
        learning_curve_methods=("analytical",),
        learning_curve_sizes=(9,),
        learning_curve_seeds=1,
        include_external=False,
        figures=False,
    )
    lines = []
    m = evaluate(profile_dir, tmp_path, config, on_progress=lines.append)
    for stage in ("load", "splits", "intervals", "significance", "sweep", "learning_curve",
                  "external", "figures"):  # fmt: skip
        assert any(line.startswith(f"evaluation stage {stage}: start") for line in lines), stage
        assert any(line.startswith(f"evaluation stage {stage}: done in") for line in lines), stage
    splits = [line for line in lines if line.startswith("evaluation stage splits: ")]
    # One layer-wise-free method on 5 splits (id, 3 families, extrapolation): 5 fits.
    fits = [line for line in splits if " done (" in line]
    assert len(fits) == 5 and fits[-1].startswith("evaluation stage splits: 5/5 done")
    for fold in ("id", "ood/bert", "ood/llama", "ood/vit", "extrapolation"):
        assert any(f"({fold}, analytical, seed(s) 0)" in line for line in fits), fold
    curve = [line for line in lines if line.startswith("evaluation stage learning_curve: ")]
    assert any("analytical, 9 training workloads, seed 0" in line for line in curve)
    assert all("elapsed" in line for line in lines)
    assert m.runtime_s.splits > 0 and m.runtime_s.learning_curve > 0
