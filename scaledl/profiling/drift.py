"""Host-drift correction of launch labels: a slowdown model fitted on the profile's own repeats.

On a shared host (a cloud VM, a shared GPU node) the machine itself slows down for minutes at a
time: neighbours that no process list shows take memory bandwidth, last-level cache or CPU time.
Discarding every launch measured in such a phase loses half the data on a bad day; keeping it
unmarked makes labels of the same workload differ by tens of percent between runs. ScaleDL
*corrects* instead, in the spirit of duet benchmarking (Bulej et al., "Duet benchmarking:
improving measurement accuracy in the cloud", Empirical Software Engineering 25, 2020: a
reference measured at the same time on the same host factors out the host's state) and of
randomised multiple interleaved trials (Abedi and Brecht, ICPE 2017: the reference and the
workload alternate in short slices, so both see the same phases):

* **Concurrent reference.** Between the label epochs of every launch each rank runs one block of
  the calibration probe (:mod:`scaledl.profiling.probe`): a GEMM block (compute-bound, sees CPU
  time taken from the rank's cores) and, on each node's first rank, a memory sweep
  (memory-bound, sees neighbours on the shared cache and memory bus). The means of these
  interleaved figures are recorded with the launch (``label_probe_gemm_ms``,
  ``label_probe_memory_ms`` in the ``runs`` table); the raw step times stay in
  ``iteration_timings``.
* **Slowdown model.** For launch ``r`` of workload ``w``, with ``g`` and ``m`` the launch's
  concurrent probe figures and ``g0``, ``m0`` the quiet host's (the 5th percentile over every
  launch of the profile: noise only ever adds time, so the fast end is the undisturbed host),

      log label[w, r] = mu[w] + a * log(g / g0) + b * log(m / m0) + e[w, r]

  a fixed-effects (within-workload) regression over the workloads measured in at least two
  launches: ``mu[w]`` is the workload's quiet label, ``a`` and ``b`` the host's sensitivity of
  labels to the two kinds of slowdown. ``a, b`` are bounded to ``[0, 1.5]`` (a slower host never
  makes a workload faster; 1 is a workload slowed exactly as the probe) and fitted with a soft-L1
  loss (``scipy.optimize.least_squares``), so the bimodal steps of tiny launches do not steer the
  fit. The within-workload R^2 says how much of the launch-to-launch label variation the probes
  explain.
* **Correction.** ``corrected = raw / exp(a * log(g / g0) + b * log(m / m0))``: the label the
  launch would have had on the quiet host. The validated range is the :data:`RANGE_QUANTILE`
  of the launches' probe log ratios plus :data:`RANGE_MARGIN`; the fit uses only launches
  inside it, and a launch beyond it is not correctable (:meth:`SlowdownModel.correctable`): it
  keeps its raw label and is flagged, so the few launches of a gross disturbance are refused,
  never extrapolated to.

The model is fitted per profile (per folder) and per world size when that world size has
:data:`MIN_PAIRS` repeated workloads (ranks sharing a host share its slowdowns differently from a
rank alone), else pooled. It uses only measurements (probe figures and repeated labels), never a
prediction, so it is a calibration of the measurement, not of the predictor. Whether it helps is
measured, not assumed: :func:`scaledl.evaluation.reproducibility.cross_run_reproducibility`
compares raw and corrected labels of two independent runs, paired.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

#: Fewest workloads with two or more launches needed to fit a model.
MIN_PAIRS = 8
#: Quantile of the probe figures taken as the quiet host.
QUIET_QUANTILE = 0.05
#: Bounds of the exponents ``a`` and ``b``.
EXPONENT_BOUNDS = (0.0, 1.5)
#: Soft-L1 scale of the fit's residuals, in log units (about 3%).
RESIDUAL_SCALE = 0.03
#: Quantile of the launches' probe log ratios that bounds the validated range ...
RANGE_QUANTILE = 0.95
#: ... plus this margin, in log units (about 5%).
RANGE_MARGIN = 0.05
#: Probe columns of a launch frame, in model order.
PROBE_COLUMNS = ("label_probe_gemm_ms", "label_probe_memory_ms")


@dataclass(frozen=True)
class SlowdownModel:
    """A fitted host-slowdown model (see the module docstring).

    Attributes:
        gemm_exponent: ``a``, sensitivity of labels to the GEMM probe's slowdown.
        memory_exponent: ``b``, the same for the memory sweep.
        quiet_gemm_ms: ``g0``, the quiet host's GEMM probe figure (ms).
        quiet_memory_ms: ``m0``, the quiet host's memory-sweep figure (ms).
        r2_within: share of the within-workload variance of log labels the probes explain.
        n_workloads: repeated workloads the model was fitted on.
        n_launches: their launches.
        log_ratio_max: the validated range: largest correctable ``(log g/g0, log m/m0)``.
        world_size: the world size fitted, or ``0`` for a pooled model.
    """

    gemm_exponent: float
    memory_exponent: float
    quiet_gemm_ms: float
    quiet_memory_ms: float
    r2_within: float
    n_workloads: int
    n_launches: int
    log_ratio_max: tuple[float, float]
    world_size: int = 0

    def to_dict(self) -> dict:
        """JSON-safe view."""
        out = asdict(self)
        out["log_ratio_max"] = list(self.log_ratio_max)
        return out

    def log_ratios(self, gemm_ms, memory_ms) -> np.ndarray:
        """``(log g/g0, log m/m0)`` per launch, shape (n, 2); a missing figure is 0 (no drift)."""
        g = np.log(np.asarray(gemm_ms, dtype=float) / self.quiet_gemm_ms)
        m = np.log(np.asarray(memory_ms, dtype=float) / self.quiet_memory_ms)
        return np.nan_to_num(np.column_stack([g, m]), nan=0.0, posinf=0.0, neginf=0.0)

    def factor(self, gemm_ms, memory_ms) -> np.ndarray:
        """The slowdown factor of each launch (1.08 = measured 8% slower than the quiet host).

        Args:
            gemm_ms: concurrent GEMM probe figures, shape (n,), ms.
            memory_ms: concurrent memory-sweep figures, shape (n,), ms (``nan`` where unknown).

        Returns:
            ``exp(a log(g/g0) + b log(m/m0))``, shape (n,).
        """
        x = self.log_ratios(gemm_ms, memory_ms)
        return np.exp(x @ np.array([self.gemm_exponent, self.memory_exponent]))

    def correctable(self, gemm_ms, memory_ms) -> np.ndarray:
        """Whether each launch lies inside the validated range (shape (n,), bool).

        A launch is correctable when neither probe log ratio exceeds :attr:`log_ratio_max`.
        """
        x = self.log_ratios(gemm_ms, memory_ms)
        return np.all(x <= np.asarray(self.log_ratio_max), axis=1)


def _quiet(values: pd.Series) -> float:
    finite = values[np.isfinite(values) & (values > 0)]
    return float(np.quantile(finite, QUIET_QUANTILE)) if len(finite) else float("nan")


def fit_slowdown(launches: pd.DataFrame, world_size: int = 0) -> SlowdownModel | None:
    """Fit the slowdown model on the repeated launches of a profile.

    Args:
        launches: one row per launch: ``workload_id``, ``iteration_ms`` (raw label, > 0),
            ``label_probe_gemm_ms`` and ``label_probe_memory_ms`` (concurrent probe figures, ms;
            ``nan`` where not measured).
        world_size: recorded in the model (0 for a pooled fit).

    Returns:
        The model, or ``None`` when fewer than :data:`MIN_PAIRS` workloads have two or more
        launches with a GEMM figure (nothing to fit on: labels stay raw).

    Raises:
        ValueError: a missing column.
    """
    missing = [c for c in ("workload_id", "iteration_ms", *PROBE_COLUMNS) if c not in launches]
    if missing:
        raise ValueError(f"slowdown model: missing column(s) {missing}")
    frame = launches[
        np.isfinite(launches["label_probe_gemm_ms"].astype(float))
        & (launches["iteration_ms"].astype(float) > 0)
    ]
    frame = frame[frame.groupby("workload_id")["workload_id"].transform("size") >= 2]
    if frame["workload_id"].nunique() < MIN_PAIRS:
        return None
    g0 = _quiet(frame["label_probe_gemm_ms"].astype(float))
    m0 = _quiet(frame["label_probe_memory_ms"].astype(float))
    if not np.isfinite(m0):
        m0 = 1.0  # no memory figure anywhere: its log ratio is 0 for every launch
    model = SlowdownModel(0.0, 0.0, g0, m0, 0.0, 0, 0, (0.0, 0.0), world_size)
    x = model.log_ratios(frame["label_probe_gemm_ms"], frame["label_probe_memory_ms"])
    limit = np.quantile(x, RANGE_QUANTILE, axis=0) + RANGE_MARGIN
    inside = np.all(x <= limit, axis=1)
    frame, x = frame[inside], x[inside]
    frame = frame[frame.groupby("workload_id")["workload_id"].transform("size") >= 2]
    x = model.log_ratios(frame["label_probe_gemm_ms"], frame["label_probe_memory_ms"])
    if frame["workload_id"].nunique() < MIN_PAIRS:
        return None
    y = np.log(frame["iteration_ms"].to_numpy(dtype=float))
    groups = frame["workload_id"].to_numpy()
    xw = x - pd.DataFrame(x).groupby(groups).transform("mean").to_numpy()
    yw = y - pd.Series(y).groupby(groups).transform("mean").to_numpy()
    fit = least_squares(
        lambda beta: xw @ beta - yw,
        x0=np.array([0.5, 0.5]),
        bounds=EXPONENT_BOUNDS,
        loss="soft_l1",
        f_scale=RESIDUAL_SCALE,
    )
    total = float(np.sum(yw**2))
    r2 = 1.0 - float(np.sum((yw - xw @ fit.x) ** 2)) / total if total > 0 else 0.0
    return SlowdownModel(
        gemm_exponent=float(fit.x[0]),
        memory_exponent=float(fit.x[1]),
        quiet_gemm_ms=g0,
        quiet_memory_ms=m0,
        r2_within=r2,
        n_workloads=int(frame["workload_id"].nunique()),
        n_launches=len(frame),
        log_ratio_max=(float(limit[0]), float(limit[1])),
        world_size=world_size,
    )


def correct_launch_labels(
    launches: pd.DataFrame, world_sizes: pd.Series
) -> tuple[pd.DataFrame, dict[str, dict]]:
    """Corrected labels of every launch of a profile, with the raw ones kept beside them.

    Args:
        launches: as :func:`fit_slowdown`, plus ``run_id``; other columns are kept.
        world_sizes: world size per launch, aligned with ``launches``' index.

    Returns:
        ``(frame, models)``: ``frame`` is ``launches`` with ``iteration_ms_raw`` (the measured
        label), ``slowdown_factor`` (1.0 where not corrected), ``drift_correctable`` and
        ``iteration_ms`` divided by the factor; ``models`` maps ``"<world size>"`` to the
        fitted model's :meth:`SlowdownModel.to_dict` (``{}`` entries absent where nothing was
        fitted). Launches without probe figures (imports) keep their raw labels.
    """
    frame = launches.copy()
    frame["iteration_ms_raw"] = frame["iteration_ms"].astype(float)
    frame["slowdown_factor"] = 1.0
    frame["drift_correctable"] = True
    if not set(PROBE_COLUMNS) <= set(frame.columns):
        return frame, {}
    pooled = fit_slowdown(frame)
    models: dict[str, dict] = {}
    for ws, index in frame.groupby(world_sizes.loc[frame.index]).groups.items():
        part = frame.loc[index]
        model = fit_slowdown(part, world_size=int(ws)) or pooled
        if model is None:
            continue
        models[str(int(ws))] = model.to_dict()
        g, m = part["label_probe_gemm_ms"], part["label_probe_memory_ms"]
        measured = np.isfinite(g.to_numpy(dtype=float))
        ok = model.correctable(g, m) & measured
        factor = np.where(ok, model.factor(g, m), 1.0)
        frame.loc[index, "slowdown_factor"] = factor
        frame.loc[index, "drift_correctable"] = ok | ~measured
    frame["iteration_ms"] = frame["iteration_ms_raw"] / frame["slowdown_factor"]
    return frame, models
