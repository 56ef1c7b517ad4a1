from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scaledl.external.published_runs import COLUMNS
from scaledl.planning.llm_memory import rank_memory, usable_bytes
from scaledl.planning.llm_plan import (
    RULES,
    LlmPlanError,
    LlmSpace,
    plan_job,
    plan_llm,
    published_correction,
    published_max_gpus,
    read_plan_file,
    step_correction,
    uneven_split,
)
from scaledl.workloads.training_job import ModelShape, TrainingJob

H100 = "NVIDIA H100 80GB HBM3"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "jobs" / "llama3_70b_h100.yaml"
#: A small Llama-like model: 12 heads (tp 8 does not divide them), 4 KV heads, 6 layers.
SMALL = ModelShape(hidden_size=768, num_layers=6, num_heads=12, num_kv_heads=4, ffn_size=3072,
                   vocab_size=32000)  # fmt: skip


@dataclass(frozen=True)
class FakeStep:
    iteration_s: float
    components_s: dict


class FakeCompose:
    """A step time that rewards GPUs and penalises bubbles, recompute and communication."""

    def __init__(self) -> None:
        self.jobs: list[TrainingJob] = []

    def __call__(self, job, kernels, network) -> FakeStep:
        self.jobs.append(job)
        work = 6 * job.model.n_params() * job.tokens_per_step / (job.n_gpus * 1e14)
        work *= {"none": 1.0, "selective": 1.05, "full": 1.33}[job.activation_checkpointing]
        bubble = work * (job.pp_size - 1) / (job.vp_size * job.grad_accum)
        comm = 0.01 * (job.tp_size - 1) + 0.02 * (job.cp_size - 1)
        comm += 0.05 if job.sharding in ("fsdp", "hsdp") else 0.0
        return FakeStep(work + bubble + comm, {"compute_s": work, "pp_bubble_s": bubble,
                                               "comm_s": comm})  # fmt: skip


def plan(model=SMALL, counts=(8,), seq_len=2048, global_batch=16, **kw):
    compose = kw.pop("compose", FakeCompose())
    network = kw.pop("network", object())
    return plan_llm(model, H100, counts, seq_len, global_batch, compose=compose, kernels=object(),
                    network=network, **kw)  # fmt: skip


def test_the_grids_rules_are_counted_in_order():
    # n = 8 over tp 1/2/8/16 x pp 1/4 x vp 1/2 x cp 1/2 = 32 combinations (by hand):
    # gpus: tp 16 (8), tp 8 pp 4 (4), tp 8 cp 2 pp 1 (2), tp 2 pp 4 cp 2 (2) = 16;
    # tp_heads: tp 8 with 12 heads (pp 1, cp 1: vp 1/2) = 2; vp_needs_pp: tp 1/2, pp 1, vp 2 = 4;
    # layers: pp 4 x vp 2 = 8 > 6 layers (tp 1 cp 1/2, tp 2 cp 1) = 3; cp_seq: 2 cp = 4 does not
    # divide 2050 (tp 1 pp 1, tp 1 pp 4, tp 2 pp 1) = 3; left: tp 1/2 x pp 1/4, cp 1, vp 1 = 4.
    space = LlmSpace(tp_sizes=(1, 2, 8, 16), pp_sizes=(1, 4), vp_sizes=(1, 2), cp_sizes=(1, 2),
                     shardings=("zero1",), recomputes=("none",), micro_batches=(1,))  # fmt: skip
    result = plan(seq_len=2050, space=space)
    assert result.searched.combinations == 32
    assert result.searched.refused == {"gpus": 16, "tp_heads": 2, "tp_domain": 0,
                                       "vp_needs_pp": 4, "layers": 3, "cp_seq": 3,
                                       "cp_attention": 0, "batch": 0,
                                       "interleave": 0, "sharding": 0, "hsdp_group": 0,
                                       "memory": 0, "compose": 0}  # fmt: skip
    assert set(result.searched.refused) == {*RULES, "memory", "compose"}
    t = result.table
    assert sorted(zip(t["tp_size"], t["pp_size"], strict=True)) == [(1, 1), (1, 4), (2, 1), (2, 4)]
    assert (t["dp_size"] * t["tp_size"] * t["pp_size"] * t["cp_size"] == t["n_gpus"]).all()
    # pp 4 does not divide 6 layers: an uneven split, the extra layers in the middle stages.
    assert set(t.loc[t["pp_size"] == 4, "layers_per_stage"]) == {(1, 2, 2, 1)}
    assert uneven_split(6, 4) == (1, 2, 2, 1)
    assert uneven_split(7, 2) == (3, 4)
    # Without uneven splits those are refused by the layers rule; micro-batch 3 by the batch.
    strict = plan(seq_len=2050, space=LlmSpace(**{**space.__dict__, "uneven": False,
                                                  "micro_batches": (1, 3)}))  # fmt: skip
    # layers: the 3 above plus pp 4 vp 1 (tp 1 cp 1/2, tp 2 cp 1), each with 2 micro-batches.
    assert strict.searched.refused["layers"] == 2 * (3 + 3)
    assert strict.searched.refused["batch"] == 2  # mb 3 of tp 1/2, pp 1 (16 % 3 dp)
    assert len(strict.table) == 2


def test_tp_domain_interleave_and_sharding_rules():
    model = SMALL.model_copy(update={"num_layers": 8, "num_heads": 16, "num_kv_heads": 4})
    # tp 16 over an 8-GPU NVLink domain is refused; heads 16 divide it.
    space = LlmSpace(tp_sizes=(16,), pp_sizes=(1,), vp_sizes=(1,), cp_sizes=(1,),
                     shardings=("zero1",), recomputes=("none",), micro_batches=(1,))  # fmt: skip
    assert plan(model, counts=(16,), space=space).searched.refused["tp_domain"] == 1
    # Interleaving (pp 2, vp 2) needs the micro-batches per step to be a multiple of pp: a
    # global batch of 3 on one replica is 3 micro-batches.
    space = LlmSpace(tp_sizes=(1,), pp_sizes=(2,), vp_sizes=(2,), cp_sizes=(1,),
                     shardings=("zero1",), recomputes=("none",), micro_batches=(1,))  # fmt: skip
    assert plan(model, counts=(2,), global_batch=3, space=space).searched.refused[
        "interleave"] == 1  # fmt: skip
    assert len(plan(model, counts=(2,), global_batch=4, space=space).table) == 1
    # FSDP/HSDP with one data-parallel rank shard nothing (the zero1 row is that layout); HSDP
    # shards within the NVLink domain: 8 ranks, so 8 GPUs (dp 8) are refused, 16 planned.
    space = LlmSpace(tp_sizes=(1,), pp_sizes=(1,), vp_sizes=(1,), cp_sizes=(1,),
                     shardings=("zero1", "fsdp", "hsdp"), recomputes=("none",),
                     micro_batches=(1,))  # fmt: skip
    result = plan(model, counts=(1, 8, 16), space=space)
    assert result.searched.refused["sharding"] == 2
    assert result.searched.refused["hsdp_group"] == 1
    hsdp = result.table[result.table["sharding"] == "hsdp"]
    assert hsdp[["n_gpus", "shard_group_size"]].values.tolist() == [[16, 8]]


def test_every_candidate_is_a_valid_job_and_memory_matches():
    compose = FakeCompose()
    result = plan(counts=(8, 16), compose=compose)
    assert len(compose.jobs) == result.searched.fitting > 0
    for job in compose.jobs[:: max(1, len(compose.jobs) // 200)]:
        again = TrainingJob.model_validate(job.model_dump())  # the full validation agrees
        assert again == job
    row = result.table[result.table["fits"]].iloc[-1]
    job = next(j for j in compose.jobs if (j.n_gpus, j.tp_size, j.pp_size, j.vp_size, j.cp_size,
               j.sharding, j.activation_checkpointing, j.micro_batch) == tuple(row[
               ["n_gpus", "tp_size", "pp_size", "vp_size", "cp_size", "sharding", "recompute",
                "micro_batch"]]))  # fmt: skip
    memory = rank_memory(job.model, seq_len=job.seq_len, micro_batch=job.micro_batch,
                         grad_accum=job.grad_accum, tp_size=job.tp_size, pp_size=job.pp_size,
                         vp_size=job.vp_size, cp_size=job.cp_size, dp_size=job.dp_size,
                         sequence_parallel=job.sequence_parallel,
                         layers_per_stage=job.layers_per_stage, sharding=job.sharding,
                         shard_group_size=job.shard_group_size,
                         recompute=job.activation_checkpointing)  # fmt: skip
    assert row["memory_gib"] == pytest.approx(memory.total_bytes / 2**30)


def test_layouts_that_do_not_fit_are_refused_with_figures_and_not_composed():
    compose = FakeCompose()
    result = plan(counts=(8,), memory_gib=1.0, headroom=0.2, compose=compose)
    t = result.table
    refused = t[~t["fits"]]
    assert len(refused) == result.searched.refused["memory"] > 0
    assert (refused["memory_gib"] > 0.8).all() and (t.loc[t["fits"], "memory_gib"] <= 0.8).all()
    assert (
        refused["refusal"]
        .str.match(r"does not fit: stage \d+: weights .* > 0\.8 GiB usable$")
        .all()
    )
    assert refused["iteration_s"].isna().all() and t.loc[t["fits"], "iteration_s"].notna().all()
    assert len(compose.jobs) == int(t["fits"].sum())
    text = result.to_text()
    assert "do not fit in 0.8 GiB per rank (1 GiB less 20% headroom)" in text
    nothing = plan(counts=(8,), memory_gib=0.01)
    assert not nothing.table["fits"].any() and nothing.front.empty
    assert nothing.why_none().startswith("no layout fits: searched")
    assert "the least memory per rank: n_gpus=8" in nothing.why_none()


def test_unfused_attention_stores_its_scores_and_runs_no_context_parallelism():
    space = LlmSpace(tp_sizes=(1, 2), pp_sizes=(1,), vp_sizes=(1,), cp_sizes=(1, 2),
                     shardings=("zero1",), recomputes=("none",), micro_batches=(1,))  # fmt: skip
    flash = plan(space=space).table.set_index(["tp_size", "cp_size"])
    unfused = plan(space=space, attention_kernel="unfused")
    assert unfused.searched.refused["cp_attention"] == 2  # tp 1 and 2 with cp 2
    t = unfused.table.set_index(["tp_size", "cp_size"])
    assert set(t.index) == {(1, 1), (2, 1)}
    for key in t.index:  # the s^2 attention scores (Korthikanti et al.'s 5 a s / h term)
        assert t.loc[key, "activations_gib"] > flash.loc[key, "activations_gib"]


def test_pareto_front_and_fastest_per_gpu_count():
    result = plan(counts=(8, 16, 32), global_batch=64, price_per_gpu_hour=2.0, tokens=1e9)
    fit = result.table[result.table["fits"]]
    time_s, cost = fit["iteration_s"].to_numpy(), fit["gpu_hours_per_step"].to_numpy()
    dominated = np.array([np.any((time_s <= t) & (cost <= c) & ((time_s < t) | (cost < c)))
                          for t, c in zip(time_s, cost, strict=True)])  # fmt: skip
    on = fit["pareto"].to_numpy()
    assert on.any() and not np.any(on & dominated)
    # Every non-dominated (time, cost) point has one candidate on the front.
    assert {(t, c) for t, c in zip(time_s[~dominated], cost[~dominated], strict=True)} == set(
        zip(time_s[on], cost[on], strict=True)
    )
    best = result.best_per_gpu_count
    assert best["n_gpus"].tolist() == [8, 16, 32]
    for _, row in best.iterrows():
        assert row["iteration_s"] == fit.loc[fit["n_gpus"] == row["n_gpus"], "iteration_s"].min()
    assert result.front["iteration_s"].is_monotonic_increasing
    steps = 1e9 / (64 * 2048)
    assert fit["train_h"].to_numpy() == pytest.approx(time_s * steps / 3600)
    assert fit["cost"].to_numpy() == pytest.approx(fit["gpu_hours"].to_numpy() * 2.0)
    assert fit["gpu_hours"].to_numpy() == pytest.approx(cost * steps)
    assert {"compute_s", "pp_bubble_s", "comm_s"} <= set(result.table.columns)
    assert "fastest fitting layout per GPU count:" in result.to_text()


def test_a_correction_multiplies_the_composed_step():
    def double(jobs, steps):
        return np.array([2 * s.iteration_s for s in steps])

    plain, corrected = plan(), plan(correction=double)
    assert corrected.table["iteration_s"].to_numpy() == pytest.approx(
        2 * plain.table["iteration_s"].to_numpy(), nan_ok=True
    )
    with pytest.raises(LlmPlanError, match="one positive step time per job"):
        plan(correction=lambda jobs, steps: np.zeros(len(steps)))


def test_bad_inputs_are_named():
    with pytest.raises(LlmPlanError, match="12 is not a multiple of gpus_per_node=8"):
        plan(counts=(8, 12))
    with pytest.raises(LlmPlanError, match="gpu='H1000'"):
        plan_llm(SMALL, "H1000", [8], 2048, 16, compose=FakeCompose(), kernels=1, network=1)
    with pytest.raises(LlmPlanError, match="exceed 2,000,000: narrow the space"):
        plan(counts=tuple(range(8, 8 * 301, 8)), space=LlmSpace(micro_batches=(1, 2, 4, 8)))
    with pytest.raises(LlmPlanError, match="field 'tp_sizes'"):
        LlmSpace(tp_sizes=(0,))
    with pytest.raises(LlmPlanError, match="field 'shardings'.*'zero4'"):
        LlmSpace(shardings=("zero4",))  # zero3 is the job's alias of fsdp
    with pytest.raises(LlmPlanError, match="headroom"):
        plan(headroom=1.5)
    with pytest.raises(LlmPlanError, match="tokens=-1"):
        plan(tokens=-1)
    with pytest.raises(LlmPlanError, match="plan: job: invalid training job: field 'precision'"):
        plan_llm(SMALL, "NVIDIA A100-SXM4-80GB", [8], 2048, 16, precision="fp8",
                 compose=FakeCompose(), kernels=1, network=1)  # fmt: skip


def test_the_example_plan_file(tmp_path):
    request = read_plan_file(EXAMPLE)
    assert request.job.model.n_params() == pytest.approx(70.55e9, rel=1e-3)
    assert request.job.seq_len == 8192 and request.job.gpu == H100
    assert request.gpu_counts == (64, 128, 256, 512, 1024)
    compose = FakeCompose()
    result = plan_job(request.job, request.gpu_counts, space=request.space, compose=compose,
                      kernels=object(), network=object(), **request.options)  # fmt: skip
    assert result.best_per_gpu_count["n_gpus"].tolist() == [64, 128, 256, 512, 1024]
    assert usable_bytes(80.0) == 72 * 2**30
    # Plan files are checked field by field.
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE.read_text().replace("gpu_counts:", "gpu_count:"))
    with pytest.raises(LlmPlanError, match=r"bad.yaml: field 'plan.gpu_count' unknown"):
        read_plan_file(bad)
    bad.write_text(EXAMPLE.read_text().replace("seq_len: 8192", "seq_len: 8193"))
    with pytest.raises(LlmPlanError, match=r"bad.yaml: job.*8193"):
        read_plan_file(bad)
    bad.write_text("job: [1, 2]\n")
    with pytest.raises(LlmPlanError, match="bad.yaml"):
        read_plan_file(bad)


def test_the_real_composition_plans_the_example():
    """compose_step with the H100's fitted kernels and measured network (the defaults)."""
    request = read_plan_file(EXAMPLE)
    space = LlmSpace(tp_sizes=(4, 8), pp_sizes=(4, 8), vp_sizes=(1, 5), cp_sizes=(1, 2),
                     shardings=("zero1",), recomputes=("none", "full"),
                     micro_batches=(1,))  # fmt: skip
    result = plan_job(request.job, (64, 512), space=space)
    best = result.best_per_gpu_count
    assert best["n_gpus"].tolist() == [64, 512]
    assert (best["iteration_s"] > 0).all() and ((best["mfu"] > 0) & (best["mfu"] < 1)).all()
    assert best["iteration_s"].iloc[1] < best["iteration_s"].iloc[0]
    fit = result.table[result.table["fits"]]
    layout = ["n_gpus", "tp_size", "pp_size", "vp_size", "cp_size"]
    both = fit.pivot_table(index=layout, columns="recompute", values="iteration_s").dropna()
    assert len(both) and (both["full"] > both["none"]).all()  # recompute costs a forward


def test_the_jobs_kernels_reach_every_candidate():
    kernels = {"attention_kernel": "flash_attention_2", "elementwise": "eager"}
    compose = FakeCompose()
    plan(compose=compose, **kernels)
    assert compose.jobs
    assert {(j.attention_kernel, j.elementwise) for j in compose.jobs} == {tuple(kernels.values())}
    job = TrainingJob(model=SMALL, seq_len=2048, gpu=H100, n_gpus=8, global_batch=16, **kernels)
    compose = FakeCompose()
    plan_job(job, compose=compose, kernels=object(), network=object())
    assert {(j.attention_kernel, j.elementwise) for j in compose.jobs} == {tuple(kernels.values())}
    with pytest.raises(LlmPlanError, match="attention_kernel"):
        plan(attention_kernel="xformers")


def test_the_learned_correction_multiplies_the_composed_steps(tmp_path):
    """A correction fitted on a few published rows (fewer than the GNN needs: the constant
    fallback, the weighted mean of log(measured / composed)) scales every composed step."""
    source = Path(__file__).resolve().parents[2] / "external" / "scale_runs" / "megatron_lm.csv"
    lines = source.read_text().splitlines(keepends=True)
    subset = tmp_path / "megatron_lm.csv"
    subset.write_text("".join(lines[:9]))  # the header and 8 rows
    model = published_correction([subset])
    assert model.kind == "constant" and 0 < model.n_training_rows <= 8
    space = LlmSpace(tp_sizes=(4, 8), pp_sizes=(4,), vp_sizes=(1,), cp_sizes=(1,),
                     shardings=("zero1",), recomputes=("none",), micro_batches=(1,))  # fmt: skip
    job = read_plan_file(EXAMPLE).job
    plain = plan_job(job, (64,), space=space)
    corrected = plan_job(job, (64,), space=space, correction=step_correction(model))
    assert plain.table["fits"].any()
    assert corrected.table["iteration_s"].to_numpy() == pytest.approx(
        plain.table["iteration_s"].to_numpy() * np.exp(model.constant_log), nan_ok=True
    )
    assert "composed and corrected" in corrected.to_text()


def test_layouts_the_composition_refuses_are_counted_and_shown():
    class NoContextParallel(FakeCompose):
        def __call__(self, job, kernels, network):
            if job.cp_size > 1:
                raise ValueError(f"cp_size={job.cp_size}: not modelled")
            return super().__call__(job, kernels, network)

    result = plan(counts=(8, 16), compose=NoContextParallel())
    t = result.table
    refused = t[t["fits"] & (t["cp_size"] > 1)]
    assert len(refused) == result.searched.refused["compose"] > 0
    assert refused["iteration_s"].isna().all() and not refused["pareto"].any()
    assert refused["refusal"].str.startswith("composition: cp_size=").all()
    assert (result.best_per_gpu_count["cp_size"] == 1).all()
    assert result.searched.composed == result.searched.fitting - len(refused)
    assert f"({len(refused):,} refused by the composition)" in result.to_text()


# ---------------------------------------------------------------- measured steps (calibrate)
#: The published-runs columns of a hand-made measured row of SMALL (the 46-column schema).
_ROW = {"task": "pretrain", "model": "llama small", "hidden_size": "768", "num_layers": "6",
        "num_heads": "12", "num_kv_heads": "4", "ffn_size": "3072", "vocab_size": "32000",
        "seq_len": "2048", "gpu": H100, "n_gpus": "8", "precision": "bf16", "tp": "1", "pp": "1",
        "cp": "1", "vp": "1", "micro_batch": "1", "sharding": "none", "activation_checkpointing":
        "none", "global_batch_samples": "32", "iteration_s": "", "is_latest": "True"}  # fmt: skip


def measured_csv(path, *rows: dict) -> Path:
    """A CSV in the published-runs columns with ``rows`` (each updating :data:`_ROW`)."""
    records = [{c: "" for c in COLUMNS} | _ROW | r for r in rows]
    pd.DataFrame(records, columns=list(COLUMNS)).to_csv(path, index=False)
    return path


class PerGpuCompose(FakeCompose):
    """FakeCompose for the plan; a measured row of SMALL takes n_gpus / 8 seconds."""

    def __init__(self) -> None:
        super().__init__()
        self.networks: list = []

    def __call__(self, job, kernels, network) -> FakeStep:
        if job.model.hidden_size == 768 and job.global_batch == 32:
            self.networks.append(network)
            return FakeStep(job.n_gpus / 8, {"compute_s": job.n_gpus / 8})
        return super().__call__(job, kernels, network)


def test_measured_steps_calibrate_by_the_geometric_mean_and_keep_the_ranking(tmp_path):
    # Predicted 1, 2, 4 s (8, 16, 32 GPUs), measured 2, 8, 4 s: ratios 2, 4, 1, factor 2.
    team = measured_csv(tmp_path / "team.csv", {"n_gpus": "8", "iteration_s": "2"},
                        {"n_gpus": "16", "iteration_s": "8"},
                        {"n_gpus": "32", "iteration_s": "4"},
                        {"gpu": "NVIDIA A100-SXM4-80GB", "iteration_s": "3"},
                        {"n_gpus": "16"})  # fmt: skip
    other = measured_csv(tmp_path / "other.csv", {"gpu": "H1000", "iteration_s": "1"})
    network = object()
    compose = PerGpuCompose()
    result = plan(counts=(8, 16), compose=compose, network=network, measured=[team, other])
    calibration = result.calibration
    assert calibration.factor == pytest.approx(2.0)
    assert calibration.k == 3 and calibration.ratio_range == pytest.approx((1.0, 4.0))
    assert compose.networks == [network] * 3  # the plan's models, same GPU and domain
    t = result.table
    assert t["calibrated_iteration_s"].to_numpy() == pytest.approx(
        2 * t["iteration_s"].to_numpy(), nan_ok=True
    )
    plain = plan(counts=(8, 16))  # one factor: the same best layouts and front
    assert result.best_per_gpu_count.index.tolist() == plain.best_per_gpu_count.index.tolist()
    assert result.front.index.tolist() == plain.front.index.tolist()
    unused = calibration.rows[~calibration.rows["used"]].set_index(["file", "row"])
    assert unused.loc[(str(team), 4), "unused_kind"] == "another GPU"
    assert unused.loc[(str(team), 5), "reason"] == "no measured step (iteration_s blank)"
    quarantined = unused.loc[(str(other), 1), "reason"]
    assert quarantined.startswith("quarantined: field 'gpu' (value H1000): unknown GPU")
    text = result.to_text()
    assert "calibrated on 3 measured steps" in text and "factor 2.000" in text
    assert "range 1.000-4.000" in text and "calibrated x2.000 on 3 measured steps" in text
    assert f"{team} row 4: GPU NVIDIA A100-SXM4-80GB, not the plan's" in text
    assert f"{other} row 1: quarantined: field 'gpu'" in text


def test_measured_steps_of_another_stack_are_flagged(tmp_path):
    rows = [{"n_gpus": n, "iteration_s": "2"} for n in ("8", "16", "32")]
    path = measured_csv(tmp_path / "team.csv", *rows)
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame.assign(attention_kernel="flash_attention_2", elementwise="eager").to_csv(
        path, index=False
    )
    result = plan(counts=(8,), compose=PerGpuCompose(), measured=[path])
    assert result.calibration.other_stack == 3
    text = result.to_text()
    assert "warning: 3 of the 3 measured steps ran another attention kernel" in text
    assert "attention cudnn, fused elementwise operators" in text
    same = plan(counts=(8,), compose=PerGpuCompose(), measured=[path],
                attention_kernel="flash_attention_2", elementwise="eager")  # fmt: skip
    assert same.calibration.other_stack == 0 and "warning" not in same.to_text()


def test_measured_steps_are_corrected_like_the_plan(tmp_path):
    def double(jobs, steps):
        return np.array([2 * s.iteration_s for s in steps])

    team = measured_csv(tmp_path / "team.csv", {"n_gpus": "8", "iteration_s": "2"},
                        {"n_gpus": "16", "iteration_s": "8"},
                        {"n_gpus": "32", "iteration_s": "4"})  # fmt: skip
    result = plan(compose=PerGpuCompose(), measured=team, correction=double)  # one file
    assert result.calibration.factor == pytest.approx(1.0)  # (2 * 4 * 1) ** (1/3) / 2
    assert result.calibration.rows["predicted_s"].tolist() == pytest.approx([2.0, 4.0, 8.0])
    assert result.table["calibrated_iteration_s"].to_numpy() == pytest.approx(
        result.table["iteration_s"].to_numpy(), nan_ok=True
    )


def test_fewer_than_three_usable_measured_rows_are_refused(tmp_path):
    team = measured_csv(tmp_path / "team.csv", {"n_gpus": "8", "iteration_s": "2"},
                        {"n_gpus": "16", "iteration_s": "8"},
                        {"gpu": "NVIDIA A100-SXM4-80GB", "iteration_s": "3"},
                        {"precision": "fp9", "iteration_s": "3"})  # fmt: skip
    compose = PerGpuCompose()
    with pytest.raises(LlmPlanError) as caught:
        plan(compose=compose, measured=[team])
    message = str(caught.value)
    assert "\n" not in message and str(team) in message
    assert "2 usable on NVIDIA H100 80GB HBM3, at least 3 needed" in message
    assert "1 another GPU, 1 quarantined" in message and "24.8% against 24.3%" in message
    assert f"e.g. {team} row 4: quarantined: field 'precision' (value fp9)" in message
    assert not any(j.model.hidden_size == 768 and j.global_batch == 16 for j in compose.jobs)
    bad = tmp_path / "bad.csv"
    bad.write_text("task,model\npretrain,llama\n")
    with pytest.raises(LlmPlanError, match=r"measured steps: .*bad.csv: column\(s\)"):
        plan(compose=PerGpuCompose(), measured=[bad])
    with pytest.raises(LlmPlanError, match="no file given"):
        plan(compose=PerGpuCompose(), measured=[])


def _small_job(num_layers=6, **layout):
    return TrainingJob(model=SMALL.model_copy(update={"num_layers": num_layers}), seq_len=2048,
                       gpu=H100, global_batch=32, **layout)  # fmt: skip


def test_as_given_plans_exactly_the_jobs_layout():
    # An uneven split other than uneven_split's, an HSDP group other than the NVLink domain's
    # (the search would take 8 // (tp cp) = 4) and sequence parallelism off with tp 2.
    job = _small_job(7, n_gpus=32, tp_size=2, pp_size=2, sharding="hsdp", shard_group_size=2,
                     layers_per_stage=(1, 6), sequence_parallel=False,
                     activation_checkpointing="selective", micro_batch=2)  # fmt: skip
    assert uneven_split(7, 2) != (1, 6)
    compose = FakeCompose()
    result = plan_job(job, as_given=True, compose=compose, kernels=object(), network=object())
    assert result.given and len(result.table) == 1 and len(compose.jobs) == 1
    assert compose.jobs[0] == job  # every field of the job, derived ones included
    row = result.table.iloc[0]
    assert (row["n_gpus"], row["shard_group_size"], row["layers_per_stage"]) == (32, 2, (1, 6))
    memory = rank_memory(job.model, seq_len=2048, micro_batch=2, grad_accum=job.grad_accum,
                         tp_size=2, pp_size=2, dp_size=job.dp_size, sequence_parallel=False,
                         layers_per_stage=(1, 6), sharding="hsdp", shard_group_size=2,
                         recompute="selective")  # fmt: skip
    assert row["memory_gib"] == pytest.approx(memory.total_bytes / 2**30)
    assert row["fits"] and row["iteration_s"] == pytest.approx(FakeCompose()(job, 0, 0).iteration_s)
    assert result.given_problem() == "" and row["pareto"]
    text = result.to_text()
    assert "the job's layout as given (32 GPUs, dp8-hsdp2-tp2-pp2-mb2-ga2-selective" in text
    assert "layers per stage [1, 6]" in text and "searched" not in text


def test_as_given_matches_the_searchs_row_for_the_same_layout():
    job = _small_job(n_gpus=16, tp_size=2, pp_size=2, activation_checkpointing="full")
    given = plan_job(job, as_given=True, compose=FakeCompose(), kernels=object(),
                     network=object(), tokens=1e9, price_per_gpu_hour=2.0)  # fmt: skip
    search = plan_job(job, compose=FakeCompose(), kernels=object(), network=object(),
                      tokens=1e9, price_per_gpu_hour=2.0)  # fmt: skip
    t = search.table
    same = t[(t["tp_size"] == 2) & (t["pp_size"] == 2) & (t["vp_size"] == 1) & (t["cp_size"] == 1)
             & (t["sharding"] == "zero1") & (t["recompute"] == "full")
             & (t["micro_batch"] == 1)]  # fmt: skip
    assert len(same) == 1
    columns = ["memory_gib", "iteration_s", "mfu", "gpu_hours_per_step", "train_h", "cost"]
    assert given.table.iloc[0][columns].tolist() == pytest.approx(same.iloc[0][columns].tolist())


def test_as_given_composes_a_layout_that_does_not_fit_and_marks_it():
    job = _small_job(n_gpus=8)
    compose = FakeCompose()
    result = plan_job(job, as_given=True, memory_gib=0.5, compose=compose, kernels=object(),
                      network=object())  # fmt: skip
    row = result.table.iloc[0]
    assert not row["fits"] and row["iteration_s"] > 0 and len(compose.jobs) == 1
    assert result.front.empty and result.best_per_gpu_count.empty
    assert result.searched.refused["memory"] == 1 and result.searched.fitting == 0
    problem = result.given_problem()
    assert problem.startswith("the job's layout does not fit: stage 0: weights")
    assert problem.endswith(f"its step time composed as if it fitted: {row['iteration_s']:.3f} s")
    assert "DOES NOT FIT" in result.to_text()

    class Refuses(FakeCompose):
        def __call__(self, job, kernels, network):
            raise ValueError("not modelled")

    refused = plan_job(job, as_given=True, memory_gib=0.5, compose=Refuses(), kernels=object(),
                       network=object())  # fmt: skip
    assert "does not fit" in refused.given_problem()
    assert refused.given_problem().endswith("composition: not modelled")


def test_as_given_takes_no_gpu_counts_nor_space_and_names_a_refusing_rule():
    job = _small_job(n_gpus=8)
    with pytest.raises(LlmPlanError, match="as given takes no GPU counts nor space"):
        plan_job(job, [16], as_given=True)
    with pytest.raises(LlmPlanError, match="as given takes no GPU counts nor space"):
        plan_job(job, as_given=True, space=LlmSpace())
    # Interleaving needs the micro-batches per step to be a multiple of pp: Megatron refuses it.
    model = SMALL.model_copy(update={"num_layers": 8})
    job = TrainingJob(model=model, seq_len=2048, gpu=H100, n_gpus=2, pp_size=2, vp_size=2,
                      global_batch=3)  # fmt: skip
    result = plan_job(job, as_given=True, compose=FakeCompose(), kernels=object(),
                      network=object())  # fmt: skip
    assert result.table.empty
    assert "the job's layout is refused: searched 1 combinations" in result.given_problem()
    assert "interleave 1" in result.given_problem()


def test_a_gpu_count_without_a_planned_layout_gets_a_line_saying_why():
    # 24 GPUs, global batch 16: dp = 24 / (tp pp cp) is 3, 6, 12 or 24, never dividing 16.
    result = plan(counts=(8, 24))
    assert result.best_per_gpu_count["n_gpus"].tolist() == [8]
    assert list(result.unplanned) == [24]
    why = result.unplanned[24]
    per = result.searched.refused_by_count[24]
    assert sum(per.values()) == result.searched.combinations // 2
    assert why.startswith(f"no valid layout: {sum(per.values()):,} combinations refused, the "
                          f"last rule reached batch {per['batch']:,} (micro_batch x dp must "
                          "divide the global batch 16); earlier rules ")  # fmt: skip
    assert f"gpus {per['gpus']:,} (tp x pp x cp must divide the GPU count)" in why
    assert f"24 GPUs: {why}" in result.to_text()
    # Valid layouts, none fitting; fitting ones, all refused by the composition.
    small = plan(counts=(8, 16), memory_gib=0.01)
    least = small.table.loc[small.table["n_gpus"] == 16, "memory_gib"].min()
    assert small.unplanned[16] == (f"none of the {(small.table['n_gpus'] == 16).sum():,} valid "
                                   f"layouts fits in memory (the least: {least:.1f} GiB per "
                                   "rank)")  # fmt: skip

    class NoSixteen(FakeCompose):
        def __call__(self, job, kernels, network):
            if job.n_gpus == 16:
                raise ValueError("not modelled")
            return super().__call__(job, kernels, network)

    refused = plan(counts=(8, 16), compose=NoSixteen())
    assert list(refused.unplanned) == [16]
    assert refused.unplanned[16].startswith("the composition refused all ")
    assert refused.unplanned[16].endswith("fitting layouts, e.g. composition: not modelled")
    assert refused.searched.refused_by_count[16]["compose"] == refused.searched.refused["compose"]


def test_the_largest_published_gpu_count_is_read_from_the_files(tmp_path):
    assert published_max_gpus() == (6144, 6)  # Megatron-LM's 6,144-GPU row (external/scale_runs)
    (tmp_path / "a.csv").write_text("model,n_gpus\nx,8\ny,64\nz,not a number\n")
    (tmp_path / "b.csv").write_text("n_gpus,gpu\n512,H100\n")
    assert published_max_gpus(tmp_path) == (512, 2)
    assert published_max_gpus(tmp_path / "missing") is None
    (tmp_path / "c.csv").write_text("gpus\n8\n")
    with pytest.raises(ValueError, match=r"c\.csv: published runs: .*n_gpus"):
        published_max_gpus(tmp_path)


def test_gpu_counts_beyond_the_published_runs_are_warned_and_flagged(tmp_path, monkeypatch):
    (tmp_path / "scale_runs").mkdir()
    (tmp_path / "scale_runs" / "runs.csv").write_text("n_gpus\n8\n")
    monkeypatch.setenv("SCALEDL_EXTERNAL_DIR", str(tmp_path))
    result = plan(counts=(8, 16, 32))
    warning = (f"warning: GPU counts 16, 32 exceed the largest published run (8 GPUs, "
               f"{tmp_path / 'scale_runs'}): step times there are extrapolated")  # fmt: skip
    assert len(result.warnings) == 1 and result.warnings[0].startswith(warning)
    assert result.to_text().splitlines()[1] == result.warnings[0]
    t = result.table
    assert t["beyond_published"].tolist() == (t["n_gpus"] > 8).tolist() and t["n_gpus"].eq(8).any()
    assert plan(counts=(8,)).warnings == ()
    given = plan_job(_small_job(n_gpus=16), as_given=True, compose=FakeCompose(),
                     kernels=object(), network=object())  # fmt: skip
    assert given.warnings[0].startswith("warning: GPU count 16 exceeds the largest published run")
    monkeypatch.setenv("SCALEDL_EXTERNAL_DIR", str(tmp_path / "none"))
    assert plan(counts=(8,)).warnings[0].startswith("warning: no published runs under ")


def test_space_takes_the_jobs_sharding_aliases():
    space = LlmSpace(shardings=("distributed_optimizer", "zero1", "fsdp2"))
    assert space.shardings == ("zero1", "fsdp")  # aliases resolved, repeats dropped
    with pytest.raises(LlmPlanError, match=r"field 'shardings' \(value \['zero9'\]\)"):
        LlmSpace(shardings=("zero9",))
