"""The GPU evaluation's targets and report section, from the ``gpu`` block of ``metrics.json``.

Pure functions of the metrics dict (no model imports), so reading a report never loads the
models; the block itself is computed by :func:`scaledl.evaluation.gpu.evaluate_gpu`.
"""

from __future__ import annotations

import html
import json


def gpu_targets(metrics: dict) -> list[dict]:
    """The issue's targets on GPU data, measured.

    Returns:
        Rows ``{"target", "measured", "reached"}``.
    """
    rows = []
    lomo = metrics.get("leave_one_model_out")
    if lomo:
        mean, worst = lomo["mean_over_gpus"], lomo["max_over_gpus"]
        worst_gpu = max(lomo["per_gpu"], key=lambda g: lomo["per_gpu"][g]["scaledl"]["mre"])
        under = sum(v["scaledl"]["mre"] <= 0.10 for v in lomo["per_gpu"].values())
        rows += [
            {"target": "GPU leave-one-model-out MRE, mean over GPUs <= 6% (ScaleDL)",
             "measured": f"{mean['scaledl']:.1%}", "reached": mean["scaledl"] <= 0.06},
            {"target": "GPU leave-one-model-out MRE <= 10% on every GPU (ScaleDL)",
             "measured": f"worst {worst['scaledl']:.1%} ({worst_gpu}); "
             f"{under}/{len(lomo['per_gpu'])} GPUs <= 10%",
             "reached": worst["scaledl"] <= 0.10},
        ]  # fmt: skip
        if "analytical" in mean:
            ratio = mean["analytical"] / mean["scaledl"]
            rows.append(
                {"target": "GPU leave-one-model-out MRE >= 2x lower than analytical",
                 "measured": f"{ratio:.2f}x ({mean['analytical']:.1%} vs {mean['scaledl']:.1%})",
                 "reached": ratio >= 2.0}
            )  # fmt: skip
    logo = metrics.get("leave_one_gpu_out")
    if logo:
        mean = logo["mean_over_gpus"]["scaledl"]
        rows.append(
            {"target": "GPU leave-one-GPU-out MRE, mean <= 12% (ScaleDL, from specs only)",
             "measured": f"{mean:.1%}", "reached": mean <= 0.12}
        )  # fmt: skip
    return rows


def gpu_report_html(gpu: dict) -> str:
    """The report section of the GPU evaluation (HTML fragment)."""
    parts = [
        "<h2>Real GPU data through the pipeline (NeuSight, imported as profiles)</h2>",
        f"<p>Data: {html.escape(gpu['source'])}; {gpu['n_workloads']} workloads, GPUs "
        f"{html.escape(', '.join(gpu['gpus']))}, models {html.escape(', '.join(gpu['models']))}. "
        f"{html.escape(' '.join(gpu.get('notes', [])))}</p>",
    ]
    for key, title in (
        ("leave_one_model_out", "Leave one model out (MRE per GPU)"),
        ("leave_one_gpu_out", "Leave one GPU out (held-out GPU from its specs only)"),
    ):
        block = gpu.get(key)
        if not block:
            continue
        methods = list(block["mean_over_gpus"])
        rows = [
            [html.escape(g), *(f"{v[m]['mre']:.1%}" for m in methods), v[methods[0]]["n"]]
            for g, v in block["per_gpu"].items()
        ]
        rows.append(["mean over GPUs", *(f"{block['mean_over_gpus'][m]:.1%}" for m in methods), ""])
        rows.append(["worst GPU", *(f"{block['max_over_gpus'][m]:.1%}" for m in methods), ""])
        parts.append(f"<h3>{title}</h3>" + _html_table(["GPU", *methods, "n"], rows))
    ops = gpu.get("operators")
    if ops:
        rows = [
            [c, d, f"{v['mre']:.1%}", f"{v['time_weighted']:.1%}", v["n"]]
            for c, per in ops["per_class"].items()
            for d, v in per.items()
        ]
        parts.append(
            "<h3>Operators of held-out models (leave one model out)</h3>"
            + _html_table(["class", "direction", "MRE", "time-weighted", "n"], rows)
        )
    dp = gpu.get("data_parallel")
    if dp and dp.get("rows"):
        rows = [
            [r["gpu"], r["model"], r["global_batch_size"], f"{r['true_ms']:.1f}",
             f"{r['compute_ms']:.1f}", f"{r['allreduce_ms']:.1f}", r["device_seen"]]
            for r in dp["rows"]
        ]  # fmt: skip
        parts.append(
            "<h3>Data parallel (-dp4): per-rank compute + all-reduce (Vidur NCCL)</h3>"
            + _html_table(
                [
                    "GPU",
                    "model",
                    "global batch",
                    "true ms",
                    "compute ms",
                    "all-reduce ms",
                    "GPU trained on",
                ],
                rows,
            )  # fmt: skip
            + f"<p>MRE: {html.escape(json.dumps(dp.get('mre', {})))}; not modelled: "
            f"{html.escape(', '.join(dp['not_modelled']))}</p>"
        )
    peer = gpu.get("peer")
    if peer:
        parts.append(
            f"<h3>ScaleDL vs {html.escape(peer['method'])}, paired on the same rows</h3>"
            f"<p>{html.escape(peer['source'])}; paired 95% bootstrap interval of the MRE "
            "difference (negative: ScaleDL lower).</p>" + _html_table(PEER_HEADER, peer_table(peer))
        )
    rows = [[t["target"], t["measured"], t["reached"]] for t in gpu.get("targets", [])]
    parts.append("<h3>Targets</h3>" + _html_table(["target", "measured", "reached"], rows))
    return "\n".join(parts)


PEER_HEADER = ["protocol", "rows", "n", "ScaleDL", "peer", "difference", "95% CI", "verdict"]


def peer_table(peer: dict) -> list[list]:
    """Rows of the paired ScaleDL-vs-peer table: per protocol, overall, per mode and per GPU.

    Args:
        peer: the ``peer`` block of the GPU metrics (:mod:`scaledl.evaluation.gpu_peer`).

    Returns:
        Rows of :data:`PEER_HEADER` (MREs and differences as percentages).
    """
    rows = []
    for protocol, block in peer["comparisons"].items():
        parts = [("all", block["overall"])]
        parts += [(f"mode {m}", c) for m, c in block["per_mode"].items()]
        parts += [(f"GPU {g}", c) for g, c in block["per_gpu"].items()]
        for label, c in parts:
            if "skipped" in c:
                rows.append([protocol, label, "", "", "", "", "", c["skipped"]])
                continue
            rows.append(
                [protocol, label, c["n_units"], f"{c['mre_a']:.1%}", f"{c['mre_b']:.1%}",
                 f"{100 * c['mre_difference']:+.1f} pt",
                 f"{100 * c['ci_low']:+.1f} to {100 * c['ci_high']:+.1f}", c["verdict"]]
            )  # fmt: skip
    return rows


def gpu_markdown(gpu: dict) -> str:
    """The README's real-GPU block (markdown) from the ``gpu`` section of ``metrics.json``.

    Args:
        gpu: the section (:class:`scaledl.evaluation.results.GpuResults` as a dict).

    Returns:
        Markdown: the iteration MRE per GPU and method under leave one model out (LOMO) and
        leave one GPU out (LOGO) with the mean and worst GPU, the operators of held-out models,
        the data-parallel labels and the targets, every number from ``gpu``.
    """
    lomo, logo = gpu["leave_one_model_out"], gpu.get("leave_one_gpu_out")
    protocols = [("LOMO", lomo)] + ([("LOGO", logo)] if logo else [])
    columns = [
        (name, m)
        for name, block in protocols
        for m in sorted(block["mean_over_gpus"], key=lambda m: m != "scaledl")  # ScaleDL first
    ]
    header = ["GPU", *(f"{name} {m}" for name, m in columns), "workloads"]
    lines = [
        f"Data: {gpu['source']}; {gpu['n_workloads']} imported workloads. Iteration MRE per GPU "
        "(LOMO: leave one model out; LOGO: leave one GPU out, the held-out GPU from its specs):",
        "",
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---" for _ in header) + " |",
    ]
    blocks = dict(protocols)
    for g, per in lomo["per_gpu"].items():
        cells = []
        for name, m in columns:
            entry = blocks[name]["per_gpu"].get(g, {}).get(m)
            cells.append("n/a" if entry is None else f"{entry['mre']:.1%}")
        n = next(iter(per.values()))["n"]
        lines.append(f"| {g} | " + " | ".join(cells) + f" | {n} |")
    for label, key in (("**mean over GPUs**", "mean_over_gpus"), ("worst GPU", "max_over_gpus")):
        cells = [f"{blocks[name][key][m]:.1%}" for name, m in columns]
        if label.startswith("**"):
            cells = [f"**{c}**" for c in cells]
        lines.append(f"| {label} | " + " | ".join(cells) + " | |")
    ops = gpu.get("operators")
    if ops:
        per = "; ".join(
            f"{c} {d} {v['mre']:.1%} / {v['time_weighted']:.1%}"
            for c, dirs in ops["per_class"].items()
            for d, v in dirs.items()
        )
        o = ops["overall"]
        lines += [
            "",
            "Operators of held-out models (LOMO, MRE / time-weighted error): "
            f"{per}; all {o['n']} operators {o['mre']:.1%} / {o['time_weighted']:.1%}.",
        ]
    dp = gpu.get("data_parallel")
    if dp and dp.get("rows"):
        rows = ", ".join(
            f"{r['gpu']} global batch {r['global_batch_size']}: {r['true_ms']:.0f} ms measured, "
            f"{r['compute_ms']:.0f} + {r['allreduce_ms']:.0f} ms predicted"
            + ("" if r["device_seen"] else " (GPU never trained on)")
            for r in dp["rows"]
        )
        mre = dp.get("mre", {})
        lines += [
            "",
            f"Data parallel ({rows}): MRE {mre.get('compute_plus_allreduce', float('nan')):.1%} "
            "with the all-reduce added, "
            f"{mre.get('compute_only', float('nan')):.1%} with it fully overlapped. Not modelled: "
            f"{', '.join(dp['not_modelled'])}.",
        ]
    peer = gpu.get("peer")
    if peer:
        lines += [
            "",
            f"ScaleDL vs {peer['method']} ({peer['source']}), paired on the same rows (95% "
            "bootstrap interval of the MRE difference):",
            "",
            "| " + " | ".join(PEER_HEADER) + " |",
            "| " + " | ".join("---" for _ in PEER_HEADER) + " |",
            *("| " + " | ".join(str(c) for c in row) + " |" for row in peer_table(peer)),
        ]
    lines += ["", "| target (GPU) | measured | reached |", "| --- | --- | --- |"]
    reached = {True: "yes", False: "no", None: "n/a"}
    lines += [
        f"| {t['target']} | {t['measured']} | {reached[t['reached']]} |" for t in gpu["targets"]
    ]
    return "\n".join(lines)


def _html_table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"
