from scaledl.evaluation.targets import gpu_targets
from scaledl.report.gpu_report import gpu_markdown, gpu_report_html


def _block(scaledl: dict[str, float], analytical: float) -> dict:
    per_gpu = {
        g: {"scaledl": {"mre": v, "n": 4}, "analytical": {"mre": analytical, "n": 4}}
        for g, v in scaledl.items()
    }
    return {
        "per_gpu": per_gpu,
        "mean_over_gpus": {"scaledl": sum(scaledl.values()) / len(scaledl),
                           "analytical": analytical},
        "max_over_gpus": {"scaledl": max(scaledl.values()), "analytical": analytical},
    }  # fmt: skip


def test_targets_follow_the_issue_thresholds():
    metrics = {
        "leave_one_model_out": _block({"A": 0.05, "B": 0.06}, analytical=0.2),
        "leave_one_gpu_out": _block({"A": 0.13, "B": 0.12}, analytical=0.3),
    }
    rows = {r.text: r for r in gpu_targets(metrics)}
    assert rows["GPU leave-one-model-out MRE, mean over GPUs <= 6% (ScaleDL)"].met
    every = rows["GPU leave-one-model-out MRE <= 10% on every GPU (ScaleDL)"]
    assert every.met and "2/2 GPUs" in every.measured
    ratio = rows["GPU leave-one-model-out MRE >= 2x lower than analytical"]
    assert ratio.met and ratio.measured.startswith("3.64x")
    logo = rows["GPU leave-one-GPU-out MRE, mean <= 12% (ScaleDL, from specs only)"]
    assert logo.met is False and logo.measured == "12.5%"
    worse = gpu_targets({"leave_one_model_out": _block({"A": 0.05, "B": 0.11}, 0.1)})
    assert [r.met for r in worse] == [False, False, False]


def test_report_section_lists_gpus_notes_and_targets():
    gpu = {
        "source": "NeuSight",
        "n_workloads": 2,
        "gpus": ["A", "B"],
        "models": ["m"],
        "notes": ["fallback used"],
        "leave_one_model_out": _block({"A": 0.05, "B": 0.08}, analytical=0.2),
    }
    gpu["targets"] = [t.to_dict() for t in gpu_targets(gpu)]
    html = gpu_report_html(gpu)
    assert "Leave one model out" in html and "<td>A</td>" in html and "5.0%" in html
    assert "fallback used" in html and "Targets" in html
    assert "<td>NO</td>" in html  # reached written by the shared formatting module
    escaped = gpu_report_html({**gpu, "gpus": ["<b>A</b>"]})
    assert "&lt;b&gt;A&lt;/b&gt;" in escaped and "<b>A</b>" not in escaped


def test_markdown_tables_every_gpu_protocol_and_target():
    gpu = {
        "source": "NeuSight",
        "n_workloads": 8,
        "leave_one_model_out": _block({"A": 0.05, "B": 0.08}, analytical=0.2),
        "leave_one_gpu_out": _block({"A": 0.13}, analytical=0.3),
        "operators": {
            "per_class": {"matmul": {"forward": {"mre": 0.1, "time_weighted": 0.05, "n": 3}}},
            "overall": {"mre": 0.1, "time_weighted": 0.05, "n": 3},
        },
    }
    gpu["targets"] = [t.to_dict() for t in gpu_targets(gpu)]
    lomo = gpu["leave_one_model_out"]  # stored in any order: ScaleDL's column comes first
    lomo["mean_over_gpus"] = dict(reversed(list(lomo["mean_over_gpus"].items())))
    text = gpu_markdown(gpu)
    header = "| GPU | LOMO scaledl | LOMO analytical | LOGO scaledl | LOGO analytical | workloads |"
    assert header in text
    assert "| A | 5.0% | 20.0% | 13.0% | 30.0% | 4 |" in text
    assert "| B | 8.0% | 20.0% | n/a | n/a | 4 |" in text  # B never held out as a GPU
    assert "| **mean over GPUs** | **6.5%** | **20.0%** | **13.0%** | **30.0%** | |" in text
    assert "matmul forward 10.0% / 5.0%; all 3 operators 10.0% / 5.0%" in text
    assert "Data parallel (" not in text  # the 4-GPU rows are the layouts section's
    assert "| GPU leave-one-model-out MRE, mean over GPUs <= 6% (ScaleDL) | 6.5% | no |" in text
