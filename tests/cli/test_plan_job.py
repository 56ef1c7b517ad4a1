import re
from dataclasses import fields
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from scaledl.cli import app
from scaledl.cli.plan_job import SPACE_FIELDS
from scaledl.planning.llm_plan import LlmSpace

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "jobs" / "llama3_70b_h100.yaml"
NARROW = ["--space", "tp_sizes=4,8", "--space", "pp_sizes=4,8", "--space", "vp_sizes=1,5",
          "--space", "cp_sizes=1,2", "--space", "shardings=zero1",
          "--space", "recomputes=none,full", "--space", "micro_batches=1"]  # fmt: skip


def invoke(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result, " ".join(result.output.split())  # one line: messages wrap at the width


def test_space_fields_match_the_planner():
    assert SPACE_FIELDS == tuple(f.name for f in fields(LlmSpace))


def test_plan_job_prints_the_best_layouts_and_writes_every_one(tmp_path):
    out = tmp_path / "plan.csv"
    result, text = invoke("plan-job", EXAMPLE, "--gpus", "64,512", *NARROW, "--out", out)
    assert result.exit_code == 0, text
    assert "searched 64 combinations" in text  # 2 GPU counts x 2 x 2 x 2 x 2 x 1 x 2 x 1
    assert "fastest fitting layout per GPU count:" in text and "Pareto front" in text
    table = pd.read_csv(out)
    assert set(table["n_gpus"]) == {64, 512} and table["fits"].any()
    assert {"memory_gib", "refusal", "iteration_s", "mfu", "train_h"} <= set(table.columns)


def test_plan_job_refuses_bad_input_in_one_line(tmp_path):
    result, text = invoke("plan-job", EXAMPLE, "--space", "tp=1,2")
    assert result.exit_code == 2 and "--space 'tp=1,2': expected field=values" in text, text
    assert "Traceback" not in result.output
    result, text = invoke("plan-job", EXAMPLE, "--gpus", "64,100")
    assert result.exit_code == 2 and "100 is not a multiple of gpus_per_node=8" in text, text
    result, text = invoke("plan-job", tmp_path / "missing.yaml")
    assert result.exit_code == 2 and "missing.yaml" in text, text
    # Nothing fits in 10 GB: exit 2 with the layout needing the least memory and its figures.
    result, text = invoke("plan-job", EXAMPLE, "--gpus", "64", *NARROW, "--memory-gib", "10")
    assert result.exit_code == 2 and "no layout fits: searched 32 combinations" in text, text
    assert "the least memory per rank: n_gpus=64" in text and "GiB usable" in text


MEASURED = EXAMPLE.parent / "measured_example.csv"


def test_plan_job_calibrates_on_the_example_measured_steps(tmp_path):
    out = tmp_path / "plan.csv"
    result, text = invoke("plan-job", EXAMPLE, "--gpus", "64", *NARROW, "--measured", MEASURED,
                          "--out", out)  # fmt: skip
    assert result.exit_code == 0, text
    match = re.search(r"calibrated on 5 measured steps on NVIDIA H100 80GB HBM3: factor "
                      r"([0-9.]+) \(geometric mean of measured / predicted; range "
                      r"([0-9.]+)-([0-9.]+)\)", text)  # fmt: skip
    assert match, text
    factor, low, high = map(float, match.groups())
    assert low <= factor <= high
    assert f"{MEASURED} row 6: GPU NVIDIA GB200, not the plan's" in text  # the GB200 row
    table = pd.read_csv(out)
    fit = table[table["iteration_s"].notna()]
    ratio = fit["calibrated_iteration_s"] / fit["iteration_s"]
    assert len(fit) and ratio.to_numpy() == pytest.approx(factor, abs=5e-4)


def test_plan_job_refuses_too_few_measured_steps_and_names_bad_rows(tmp_path):
    lines = MEASURED.read_text().splitlines(keepends=True)
    few = tmp_path / "few.csv"
    few.write_text("".join(lines[:3]))  # the header and 2 H100 rows
    result, text = invoke("plan-job", EXAMPLE, "--gpus", "64", *NARROW, "--measured", few)
    assert result.exit_code == 2 and "Traceback" not in result.output, text
    assert f"measured steps ({few}): 2 usable on NVIDIA H100 80GB HBM3, at least 3" in text
    assert len(result.output.strip().splitlines()) == 1
    bad = tmp_path / "bad.csv"
    bad.write_text("".join(lines).replace("H100-SXM-80GB (DGX-H100)", "H1000", 1))
    result, text = invoke("plan-job", EXAMPLE, "--gpus", "64", *NARROW, "--measured", bad)
    assert result.exit_code == 0, text
    assert "calibrated on 4 measured steps" in text
    assert f"{bad} row 1: quarantined: field 'gpu' (value H1000): unknown GPU" in text
    result, text = invoke("plan-job", EXAMPLE, "--measured", bad, "--out", bad)
    assert result.exit_code == 2 and "--measured" in text and "--out" in text, text


def test_plan_job_as_given_prints_the_jobs_own_layout(tmp_path):
    out = tmp_path / "given.csv"
    result, text = invoke("plan-job", EXAMPLE, "--as-given", "--out", out)
    assert result.exit_code == 0, text
    assert "the job's layout as given (64 GPUs, dp2-zero1-tp4-pp4-vp5-cp2-mb1-ga256)" in text
    table = pd.read_csv(out)
    assert len(table) == 1 and table["fits"].all() and table["iteration_s"].iloc[0] > 0
    assert table[["tp_size", "pp_size", "vp_size", "cp_size"]].values.tolist() == [[4, 4, 5, 2]]
    # Too little memory: the row marked, its figures and the composed step, exit 2.
    result, text = invoke("plan-job", EXAMPLE, "--as-given", "--memory-gib", "40")
    assert result.exit_code == 2 and "DOES NOT FIT" in text, text
    assert re.search(r"error: the job's layout does not fit: stage \d+: weights .* > 36\.0 "
                     r"GiB usable; its step time composed as if it fitted: [0-9.]+ s",
                     text)  # fmt: skip
    result, text = invoke("plan-job", EXAMPLE, "--as-given", "--gpus", "128")
    assert result.exit_code == 2 and "Traceback" not in result.output, text
    assert (
        text
        == "error: --as-given plans the job's own layout on its n_gpus: give no --gpus or --space"
    )


def test_plan_job_says_why_a_gpu_count_has_no_layout():
    result, text = invoke("plan-job", EXAMPLE, "--gpus", "64,72", *NARROW)
    assert result.exit_code == 0, text
    assert ("72 GPUs: no valid layout: 32 combinations refused, the last rule reached gpus 32 "
            "(tp x pp x cp must divide the GPU count)") in text  # fmt: skip
