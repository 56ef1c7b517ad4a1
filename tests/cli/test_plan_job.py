from dataclasses import fields
from pathlib import Path

import pandas as pd
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
