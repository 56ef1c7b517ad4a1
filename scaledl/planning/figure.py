"""The plan's figure: time to train vs cost, the Pareto front and the deadline pick (PNG)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def plan_figure(
    path: Path,
    *,
    table: pd.DataFrame,
    pareto: pd.DataFrame,
    choice: pd.Series | None,
    deadline_h: float | None,
    epochs: float,
    dataset_size: int,
    price_per_device_hour: float,
) -> Path:
    """Scatter of every candidate's time to train vs cost, log-log, with the front and choice.

    Candidates that fit in memory are dots (hollow when out of the training domain), those that
    do not are grey crosses; the Pareto front is a line through its points with the time
    interval as horizontal error bars, each labelled ``ranks x batch`` (with layouts, the
    layout too); the deadline is a vertical line and the cheapest configuration meeting it a
    star. The arguments are those of a :class:`~scaledl.planning.planner.Plan`
    (:meth:`~scaledl.planning.planner.Plan.plot` draws one).

    Args:
        path: output PNG.
        table: every candidate, the plan's table (time to train h, cost, ``fits_memory``,
            ``in_domain``, ``world_size``, ``batch_size``, ``layout`` when searched).
        pareto: the Pareto front's rows of ``table``, with the time interval columns.
        choice: the cheapest row meeting the deadline (``None``: none).
        deadline_h: the deadline, hours (``None``: none).
        epochs: epochs to train.
        dataset_size: samples per epoch.
        price_per_device_hour: price of one device for one hour.

    Returns:
        ``path``.
    """
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    _candidates(ax, table)
    _front(ax, pareto)
    if deadline_h is not None:
        ax.axvline(deadline_h, c="tab:red", ls="--", lw=1, label="deadline")
    if choice is not None:
        ax.scatter([choice["time_to_train_h"]], [choice["cost"]], marker="*", s=160,
                   c="tab:red", zorder=5, label="cheapest meeting the deadline")  # fmt: skip
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="predicted time to train [h]",
        ylabel=f"cost ({price_per_device_hour:g} per device-hour)",
        title=f"{epochs:g} epochs of {dataset_size} samples: ranks x batch per rank",
    )
    ax.legend(fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _candidates(ax, t) -> None:
    """Every candidate: grey crosses (does not fit), dots (hollow: out of domain)."""
    fit = t["fits_memory"].to_numpy()
    inside = t["in_domain"].to_numpy()
    x, y = t["time_to_train_h"], t["cost"]
    ax.scatter(x[~fit], y[~fit], marker="x", c="0.7", s=14, label="does not fit in memory")
    ax.scatter(x[fit & inside], y[fit & inside], s=14, c="tab:blue", label="fits, in domain")
    ax.scatter(x[fit & ~inside], y[fit & ~inside], s=14, facecolors="none",
               edgecolors="tab:blue", label="fits, out of domain")  # fmt: skip


def _front(ax, front) -> None:
    """The Pareto front with the time interval as error bars, each point labelled."""
    if front.empty:
        return
    x = front["time_to_train_h"].to_numpy()
    y = front["cost"].to_numpy()
    lo, hi = front["time_to_train_h_low"].to_numpy(), front["time_to_train_h_high"].to_numpy()
    xerr = None if np.isnan(lo).all() else np.vstack([x - lo, np.minimum(hi - x, 1e12)])
    ax.errorbar(x, y, xerr=xerr, fmt="-o", c="tab:orange", ms=4, lw=1.2, capsize=2,
                label="Pareto front (time interval)")  # fmt: skip
    layouts = front["layout"] if "layout" in front else None
    for i, row in enumerate(front.itertuples()):
        label = f"{row.world_size}x{row.batch_size}"
        if layouts is not None:
            label += f" {layouts.iloc[i]}"
        ax.annotate(label, (row.time_to_train_h, row.cost), fontsize=6, xytext=(3, 3),
                    textcoords="offset points")  # fmt: skip
