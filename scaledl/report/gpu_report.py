"""The GPU evaluation's report section and README block, from ``metrics.json``'s ``gpu`` block.

Pure functions of the metrics dict (no model imports), so reading a report never loads the
models; the block itself is computed by :func:`scaledl.evaluation.gpu.evaluate_gpu`, its
targets by :func:`scaledl.evaluation.targets.gpu_targets`. The HTML
section is the jinja2 template ``gpu_section.html.j2`` (:mod:`scaledl.io.render`); the
README block is markdown; both take their cells from the same table functions here, numbers
written by :mod:`scaledl.report.formatting`.
"""

from __future__ import annotations

from typing import Any

from scaledl.evaluation.targets import target_results
from scaledl.io.render import render
from scaledl.report.blocks.gpu_layouts import KIND_HEADER, ROW_HEADER, kind_cells, row_cells
from scaledl.report.formatting import pct, reached_text

#: The two protocols: key in the metrics, HTML title, short name in the README block.
PROTOCOLS = (
    ("leave_one_model_out", "Leave one model out (MRE per GPU)", "LOMO"),
    ("leave_one_gpu_out", "Leave one GPU out (held-out GPU from its specs only)", "LOGO"),
)
OPERATOR_HEADER = ["class", "direction", "MRE", "time-weighted", "n"]


def _methods(block: dict) -> list[str]:
    """A protocol's methods, ScaleDL first (the metrics store them in any order)."""
    return sorted(block["mean_over_gpus"], key=lambda m: m != "scaledl")


def protocol_rows(block: dict) -> list[list[Any]]:
    """One protocol's table: a row per GPU (MRE per method, workloads), mean and worst GPU.

    Args:
        block: ``leave_one_model_out`` or ``leave_one_gpu_out`` of the GPU metrics.

    Returns:
        Rows ``[GPU, *MRE per method of _methods(block), n]``.
    """
    methods = _methods(block)
    rows: list[list[Any]] = [
        [g, *(pct(v[m]["mre"]) for m in methods), v[methods[0]]["n"]]
        for g, v in block["per_gpu"].items()
    ]
    rows.append(["mean over GPUs", *(pct(block["mean_over_gpus"][m]) for m in methods), ""])
    rows.append(["worst GPU", *(pct(block["max_over_gpus"][m]) for m in methods), ""])
    return rows


def operator_rows(ops: dict) -> list[list[Any]]:
    """Rows of :data:`OPERATOR_HEADER`: held-out models' operator errors per class, direction."""
    return [
        [c, d, pct(v["mre"]), pct(v["time_weighted"]), v["n"]]
        for c, per in ops["per_class"].items()
        for d, v in per.items()
    ]


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
                [protocol, label, c["n_units"], pct(c["mre_a"]), pct(c["mre_b"]),
                 f"{100 * c['mre_difference']:+.1f} pt",
                 f"{100 * c['ci_low']:+.1f} to {100 * c['ci_high']:+.1f}", c["verdict"]]
            )  # fmt: skip
    return rows


def gpu_report_html(gpu: dict) -> str:
    """The report section of the GPU evaluation (HTML fragment, ``gpu_section.html.j2``).

    Args:
        gpu: the ``gpu`` section of ``metrics.json``.

    Returns:
        The escaped HTML fragment.
    """
    protocols = [
        {"title": title, "header": ["GPU", *_methods(gpu[key]), "n"],
         "rows": protocol_rows(gpu[key])}
        for key, title, _ in PROTOCOLS
        if gpu.get(key)
    ]  # fmt: skip
    peer = gpu.get("peer")
    return render(
        "gpu_section.html.j2",
        gpu=gpu,
        protocols=protocols,
        operators={"header": OPERATOR_HEADER, "rows": operator_rows(gpu["operators"])}
        if gpu.get("operators")
        else None,
        peer={**peer, "header": PEER_HEADER, "rows": peer_table(peer)} if peer else None,
        layouts=_layouts_tables(gpu.get("parallel_layouts")),
        targets=[
            [t.text, t.measured, reached_text(t.met)]
            for t in target_results(gpu.get("targets", []), "gpu.targets")
        ],
    )


def _layouts_tables(layouts: dict | None) -> dict | None:
    """The 4-GPU section's tables (rows and per-kind pairing), ``None`` without the section."""
    if not layouts:
        return None
    return {**layouts, "row_header": ROW_HEADER, "rows": row_cells(layouts),
            "kind_header": KIND_HEADER, "kinds": kind_cells(layouts["summary"])}  # fmt: skip


def _markdown_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A markdown table; an empty cell is written ``| |``."""

    def line(cells: list[Any]) -> str:
        return "|" + "".join(f" {c} |" if str(c) else " |" for c in cells)

    return [line(header), line(["---"] * len(header)), *(line(row) for row in rows)]


def _markdown_errors(gpu: dict) -> list[str]:
    """The README's per-GPU table: both protocols side by side, ScaleDL's columns first."""
    blocks = {name: gpu[key] for key, _, name in PROTOCOLS if gpu.get(key)}
    columns = [(name, m) for name, block in blocks.items() for m in _methods(block)]
    rows = []
    for g, per in gpu["leave_one_model_out"]["per_gpu"].items():
        cells = []
        for name, m in columns:
            entry = blocks[name]["per_gpu"].get(g, {}).get(m)
            cells.append("n/a" if entry is None else pct(entry["mre"]))
        rows.append([g, *cells, next(iter(per.values()))["n"]])
    for label, key in (("**mean over GPUs**", "mean_over_gpus"), ("worst GPU", "max_over_gpus")):
        cells = [pct(blocks[name][key][m]) for name, m in columns]
        if label.startswith("**"):
            cells = [f"**{c}**" for c in cells]
        rows.append([label, *cells, ""])
    header = ["GPU", *(f"{name} {m}" for name, m in columns), "workloads"]
    return _markdown_table(header, rows)


def _markdown_operators(ops: dict) -> list[str]:
    per = "; ".join(
        f"{c} {d} {pct(v['mre'])} / {pct(v['time_weighted'])}"
        for c, dirs in ops["per_class"].items()
        for d, v in dirs.items()
    )
    o = ops["overall"]
    return [
        "",
        "Operators of held-out models (LOMO, MRE / time-weighted error): "
        f"{per}; all {o['n']} operators {pct(o['mre'])} / {pct(o['time_weighted'])}.",
    ]


def layouts_summary_line(layouts: dict) -> str:
    """One sentence: ScaleDL's and NeuSight's MRE on the 4-GPU rows, per layout kind and all.

    Args:
        layouts: the ``parallel_layouts`` section
            (:func:`scaledl.evaluation.gpu_layouts.evaluate_layout_rows`).
    """
    summary = layouts["summary"]
    parts = []
    for name, s in [*summary["per_layout"].items(), ("all", summary["overall"])]:
        if s["mre_scaledl"] is None or s["mre_neusight"] is None:
            parts.append(f"{name} n/a")
            continue
        parts.append(f"{name} {pct(s['mre_scaledl'])} vs {pct(s['mre_neusight'])} ({s['n']} rows)")
    return (
        "4-GPU rows (Megatron-LM dp4/tp4/pp4_1, composed by `scaledl/parallel/megatron.py`, "
        "evaluated by `scaledl/evaluation/gpu_layouts.py`), "
        f"ScaleDL vs NeuSight MRE: {'; '.join(parts)}."
    )


def gpu_markdown(gpu: dict) -> str:
    """The README's real-GPU block (markdown) from the ``gpu`` section of ``metrics.json``.

    Args:
        gpu: the section (:class:`scaledl.evaluation.results.GpuResults` as a dict).

    Returns:
        Markdown: the iteration MRE per GPU and method under leave one model out (LOMO) and
        leave one GPU out (LOGO) with the mean and worst GPU, the operators of held-out models,
        the 4-GPU layouts line, the paired peer table and the
        targets, every number from ``gpu``.
    """
    lines = [
        f"Data: {gpu['source']}; {gpu['n_workloads']} imported workloads. Iteration MRE per GPU "
        "(LOMO: leave one model out; LOGO: leave one GPU out, the held-out GPU from its specs):",
        "",
        *_markdown_errors(gpu),
    ]
    if gpu.get("operators"):
        lines += _markdown_operators(gpu["operators"])
    if gpu.get("parallel_layouts"):
        lines += ["", layouts_summary_line(gpu["parallel_layouts"])]
    peer = gpu.get("peer")
    if peer:
        lines += [
            "",
            f"ScaleDL vs {peer['method']} ({peer['source']}), paired on the same rows (95% "
            "bootstrap interval of the MRE difference):",
            "",
            *_markdown_table(PEER_HEADER, peer_table(peer)),
        ]
    targets = [
        [t.text, t.measured, reached_text(t.met, markdown=True)]
        for t in target_results(gpu["targets"], "gpu.targets")
    ]
    lines += ["", *_markdown_table(["target (GPU)", "measured", "reached"], targets)]
    return "\n".join(lines)
