"""The evaluation's sweep: one representative workload's epoch time as batch or sequence varies.

The methods are fitted on every profiled workload and predict copies of a representative
workload of the sweep family (the most common architecture and world size, median tokens per
step) over a power-of-two grid of batch sizes and of sequence lengths; the measured workloads
of the same architecture are recorded beside the curves (the ``sweep`` section and figure).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from scaledl.models.train import validation_ids
from scaledl.workloads.spec import Workload

if TYPE_CHECKING:
    from scaledl.evaluation.stages import EvaluationRun

#: The architecture of the representative's group.
_ARCHITECTURE = ["hidden_size", "num_layers", "world_size", "mode"]


def sweep_workloads(base: Workload, field_name: str, values) -> list[Workload]:
    """Copies of a workload with one field varied.

    Args:
        base: the representative workload.
        field_name: ``"batch_size"`` or ``"seq_len"``.
        values: the values of that field.

    Returns:
        One validated workload per value.
    """
    record = {k: v for k, v in base.to_record().items() if k != "workload_id"}
    return [
        Workload.parse({**record, field_name: int(v)}, source=f"sweep {field_name}={v}")
        for v in values
    ]


def _representative(run: EvaluationRun, labels: pd.DataFrame) -> tuple[Workload, pd.DataFrame,
                                                                         pd.DataFrame]:  # fmt: skip
    """The family's most common (world size, architecture) group and its median-size workload.

    Returns:
        ``(base, group, table)``: the representative, its group's records and the family's.
    """
    data = run.data
    table = pd.DataFrame([data.workloads[i].to_record() for i in labels["workload_id"]])
    key = table.groupby(_ARCHITECTURE, dropna=False).size().idxmax()
    group = table[(table[_ARCHITECTURE] == pd.Series(key, index=_ARCHITECTURE)).all(axis=1)]
    tokens = group["batch_size"] * group["seq_len"]
    middle = group.iloc[int(np.argsort(tokens.to_numpy())[len(group) // 2])]
    return data.workloads[middle["workload_id"]], group, table


def sweep_stage(run: EvaluationRun) -> Any:
    """Fit the methods on all workloads and predict the representative over the sweep grids.

    Returns:
        The ``sweep`` section (skipped, with a note, when the sweep family has no workload).
    """
    data, config = run.data, run.config
    family, methods = config.sweep_family, list(config.methods)
    labels = data.labels[data.labels["family"] == family]
    if labels.empty:
        note = f"no {family!r} workloads: sweep figure skipped"
        run.notes.append(note)
        return run.section("sweep", {"skipped": note})
    base, group, table = _representative(run, labels)
    val_ids = validation_ids(data.ids, config.val_fraction, config.seed)
    models = {m: run.fit(m, data, val_ids) for m in methods}
    measured_s = data.labels.set_index("workload_id")["epoch_s"]
    out: dict = {"family": family, "base_workload": base.workload_id, "sweeps": {}}
    for field_name, other in (("batch_size", "seq_len"), ("seq_len", "batch_size")):
        measured = group[group[other] == getattr(base, other)]
        lo, hi = int(table[field_name].min()), int(table[field_name].max())
        grid = sorted({int(v) for v in 2 ** np.arange(np.floor(np.log2(lo)), np.log2(2 * hi) + 1)})
        workloads = sweep_workloads(base, field_name, grid)
        out["sweeps"][field_name] = {
            "values": grid,
            "pred_epoch_s": {m: models[m].predict(workloads)["epoch_s"].tolist() for m in methods},
            "measured_values": measured[field_name].astype(int).tolist(),
            "measured_epoch_s": measured_s.loc[measured["workload_id"]].tolist(),
        }
    return run.section("sweep", out)
