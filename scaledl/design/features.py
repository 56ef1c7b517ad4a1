"""Model matrix of the design: coded factors, quadratic terms, interactions, effects coding.

The runtime of a workload is modelled (for the purpose of *choosing* experiments) as a
second-order response surface in the log2 of its size factors plus additive categorical effects
(Box & Draper 2007, *Response Surfaces, Mixtures, and Ridge Analyses*, ch. 7; Atkinson, Donev &
Tobias 2007, *Optimum Experimental Designs, with SAS*, ch. 6 and §11.4):

* **Numeric factors** (:data:`NUMERIC_FACTORS`): ``hidden_size``, ``num_layers``, ``ffn_ratio``
  (``intermediate_size / hidden_size``), ``head_dim`` (``hidden_size / num_heads``), ``seq_len``
  (tokens per sample; for vision families derived from image and patch size), ``batch_size`` and
  ``world_size``. Each is taken on a log2 scale (runtimes scale multiplicatively) and coded
  linearly to ``[-1, 1]`` over the range of the candidate set:
  ``z = 2 (log2 v - lo) / (hi - lo) - 1`` with ``lo, hi`` the log2 of the smallest and largest
  value.
* **Categorical factors** (:data:`CATEGORICAL_FACTORS`): ``family``, ``mode`` and ``precision``,
  effects-coded ("sum-to-zero" / deviation coding): ``k`` levels give ``k - 1`` columns; level
  ``l < k - 1`` is ``+1`` in its column, the last level ``-1`` in all columns (Atkinson et al.
  2007, §7.3).
* Only factors that **vary** over the candidate set enter the model, so the model follows the
  preset's levels. A numeric factor that is constant within every combination of categorical
  levels (e.g. ``head_dim`` 128 for ``llama`` and 64 elsewhere) is a function of the categories,
  already absorbed by their effects, and is left out too.
* **Terms** by ``order``: ``"main"``: intercept + main effects; ``"interactions"``: + all two-way
  products of numeric factors; ``"quadratic"``: main + squares of numeric factors with at least
  three distinct levels (a square of a two-level factor is aliased with the intercept);
  ``"full"``: main + squares + two-way interactions. Categorical factors enter additively.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from scaledl.design.errors import DesignError
from scaledl.workloads.spec import Workload

NUMERIC_FACTORS = (
    "hidden_size",
    "num_layers",
    "ffn_ratio",
    "head_dim",
    "seq_len",
    "batch_size",
    "world_size",
)
CATEGORICAL_FACTORS = ("family", "mode", "precision")
ORDERS = ("main", "interactions", "quadratic", "full")
_RANK_TOL = 1e-8  # singular-value tolerance on unit-norm columns


def workload_factors(
    workloads: Sequence[Workload],
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Raw design factors of workloads (before coding).

    Args:
        workloads: the workloads (candidates and/or already profiled ones).

    Returns:
        ``(numeric, categorical)``: factor name -> values, one entry per workload; numeric in
        natural units (float), categorical as strings.

    Raises:
        DesignError: a workload lacks a size field the factors need (e.g. ``family="hf"``).

    Shapes:
        Every array: ``(len(workloads),)``.
    """
    numeric = {name: np.empty(len(workloads)) for name in NUMERIC_FACTORS}
    categorical = {name: np.empty(len(workloads), dtype=object) for name in CATEGORICAL_FACTORS}
    for row, w in enumerate(workloads):
        sizes = (w.hidden_size, w.num_layers, w.num_heads, w.intermediate_size)
        if any(v is None for v in sizes):
            raise DesignError(
                f"workload {w.workload_id} (family={w.family!r}) has no hidden_size/num_layers/"
                "num_heads/intermediate_size: the design needs explicit architecture sizes"
            )
        numeric["hidden_size"][row] = w.hidden_size
        numeric["num_layers"][row] = w.num_layers
        numeric["ffn_ratio"][row] = w.intermediate_size / w.hidden_size
        numeric["head_dim"][row] = w.hidden_size / w.num_heads
        numeric["seq_len"][row] = w.seq_len
        numeric["batch_size"][row] = w.batch_size
        numeric["world_size"][row] = w.world_size
        categorical["family"][row] = w.family
        categorical["mode"][row] = w.mode
        categorical["precision"][row] = w.precision
    return numeric, {k: v.astype(str) for k, v in categorical.items()}


def code_log2(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """Code positive values to ``[-1, 1]`` on a log2 scale: ``low -> -1``, ``high -> +1``.

    Args:
        values: positive numbers in natural units.
        low: the value coded as -1 (natural units, positive).
        high: the value coded as +1 (natural units, greater than ``low``).

    Returns:
        The coded values (outside ``[-1, 1]`` for values outside ``[low, high]``).

    Raises:
        DesignError: a value, ``low`` or ``high`` is not positive, or ``high <= low``.

    Shapes:
        values and result: ``(n,)``.
    """
    values = np.asarray(values, dtype=np.float64)
    if np.any(~(values > 0)) or not (low > 0 and high > low):
        raise DesignError(
            f"log2 coding needs positive values and 0 < low < high, got low={low}, high={high}, "
            f"min value={np.min(values) if values.size else None}"
        )
    lo, hi = np.log2(low), np.log2(high)
    return 2.0 * (np.log2(values) - lo) / (hi - lo) - 1.0


def effects_code(labels: np.ndarray, levels: Sequence[str]) -> np.ndarray:
    """Effects (sum-to-zero) coding of a categorical factor.

    Args:
        labels: the level of each row.
        levels: all levels, in a fixed order; the last one is the reference coded ``-1``.

    Returns:
        ``k - 1`` columns: column ``l`` is ``+1`` for level ``l``, ``-1`` for the last level,
        ``0`` otherwise.

    Raises:
        DesignError: a label is not among ``levels``, or fewer than two levels are given.

    Shapes:
        labels: ``(n,)``; result: ``(n, len(levels) - 1)``.
    """
    levels = list(levels)
    if len(levels) < 2:
        raise DesignError(f"effects coding needs at least two levels, got {levels}")
    labels = np.asarray(labels).astype(str)
    unknown = sorted(set(labels.tolist()) - set(levels))
    if unknown:
        raise DesignError(f"levels {unknown} are not among the coded levels {levels}")
    out = np.zeros((labels.size, len(levels) - 1))
    for col, level in enumerate(levels[:-1]):
        out[labels == level, col] = 1.0
    out[labels == levels[-1], :] = -1.0
    return out


@dataclass(frozen=True)
class FeatureModel:
    """A fitted coding of the factors and the list of model terms.

    Attributes:
        ranges: numeric factor -> ``(low, high)`` in natural units (coded to -1 and +1).
        quadratic: numeric factors that get a squared term.
        levels: categorical factor -> its levels (the last is the effects-coding reference).
        order: ``"main"``, ``"interactions"``, ``"quadratic"`` or ``"full"``.
        terms: names of the model matrix columns, in order.
    """

    ranges: dict[str, tuple[float, float]]
    quadratic: tuple[str, ...]
    levels: dict[str, tuple[str, ...]]
    order: str
    terms: tuple[str, ...]

    @classmethod
    def fit(
        cls,
        numeric: Mapping[str, np.ndarray],
        categorical: Mapping[str, np.ndarray],
        order: str = "full",
    ) -> FeatureModel:
        """Choose the varying factors, their coding ranges and the model terms.

        Args:
            numeric: numeric factor -> values (natural units) over the candidate set.
            categorical: categorical factor -> labels over the candidate set.
            order: model order, one of :data:`ORDERS`.

        Returns:
            The feature model; factors constant over the candidates are left out.

        Raises:
            DesignError: unknown ``order`` or a non-positive numeric value.
        """
        if order not in ORDERS:
            raise DesignError(f"model order must be one of {ORDERS}, got {order!r}")
        ranges: dict[str, tuple[float, float]] = {}
        quadratic: list[str] = []
        groups = _category_groups(categorical)
        for name, values in numeric.items():
            values = np.asarray(values, dtype=np.float64)
            if values.size == 0:
                continue
            if np.any(~(values > 0)):
                raise DesignError(f"factor {name!r} has non-positive values; cannot log2-code it")
            logs = np.round(np.log2(values), 9)
            distinct = np.unique(logs)
            if distinct.size < 2 or _constant_within(logs, groups):
                continue
            ranges[name] = (float(values.min()), float(values.max()))
            if order in ("quadratic", "full") and distinct.size >= 3:
                quadratic.append(name)
        levels: dict[str, tuple[str, ...]] = {}
        for name, labels in categorical.items():
            found = tuple(sorted(set(np.asarray(labels).astype(str).tolist())))
            if len(found) >= 2:
                levels[name] = found
        terms = ["intercept", *ranges]
        for name, lv in levels.items():
            terms += [f"{name}[{level}]" for level in lv[:-1]]
        terms += [f"{name}^2" for name in quadratic]
        if order in ("interactions", "full"):
            terms += [f"{a}:{b}" for a, b in combinations(ranges, 2)]
        return cls(ranges, tuple(quadratic), levels, order, tuple(terms))

    @property
    def n_terms(self) -> int:
        """Number of model terms ``p`` (columns of the model matrix)."""
        return len(self.terms)

    def coded(self, numeric: Mapping[str, np.ndarray]) -> np.ndarray:
        """The numeric factors of the model coded to ``[-1, 1]`` (log2 scale).

        Shapes:
            result: ``(n, len(self.ranges))``, columns in the order of ``self.ranges``.
        """
        n = _rows(numeric, {})
        cols = [code_log2(numeric[name], lo, hi) for name, (lo, hi) in self.ranges.items()]
        return np.column_stack(cols) if cols else np.empty((n, 0))

    def transform(
        self, numeric: Mapping[str, np.ndarray], categorical: Mapping[str, np.ndarray]
    ) -> np.ndarray:
        """The model matrix of rows described by their raw factors.

        Args:
            numeric: numeric factor -> values (natural units); must hold every fitted factor.
            categorical: categorical factor -> labels; must hold every fitted factor.

        Returns:
            The model matrix, columns named by ``self.terms``.

        Raises:
            DesignError: a fitted factor is missing, or a label was not seen by :meth:`fit`.

        Shapes:
            result: ``(n, self.n_terms)``.
        """
        missing = [f for f in self.ranges if f not in numeric]
        missing += [f for f in self.levels if f not in categorical]
        if missing:
            raise DesignError(f"factors {missing} are missing from the rows to code")
        n = _rows(numeric, categorical)
        z = self.coded(numeric)
        blocks = [np.ones((n, 1)), z]
        blocks += [effects_code(categorical[name], lv) for name, lv in self.levels.items()]
        index = {name: k for k, name in enumerate(self.ranges)}
        if self.quadratic:
            blocks.append(np.column_stack([z[:, index[q]] ** 2 for q in self.quadratic]))
        if self.order in ("interactions", "full") and len(self.ranges) >= 2:
            pairs = list(combinations(range(len(self.ranges)), 2))
            blocks.append(np.column_stack([z[:, a] * z[:, b] for a, b in pairs]))
        X = np.hstack(blocks)
        assert X.shape[1] == self.n_terms
        return X

    def unit_coordinates(
        self, numeric: Mapping[str, np.ndarray], categorical: Mapping[str, np.ndarray]
    ) -> np.ndarray:
        """Rows as points of the unit cube, for space-filling samplers (Latin hypercube).

        Numeric factors map ``[-1, 1] -> [0, 1]``; a categorical factor with ``k`` levels maps
        level ``l`` to the centre ``(l + 0.5) / k`` of its stratum.

        Shapes:
            result: ``(n, len(self.ranges) + len(self.levels))``.
        """
        z = (self.coded(numeric) + 1.0) / 2.0
        cats = []
        for name, lv in self.levels.items():
            pos = {level: (k + 0.5) / len(lv) for k, level in enumerate(lv)}
            cats.append(np.array([pos[str(x)] for x in categorical[name]]))
        return np.column_stack([z, *cats]) if cats else z


def model_matrix(
    workloads: Sequence[Workload], order: str = "full"
) -> tuple[np.ndarray, FeatureModel]:
    """Fit a :class:`FeatureModel` on workloads and return their model matrix.

    Args:
        workloads: the candidate set (coding ranges and levels are taken from it).
        order: model order, one of :data:`ORDERS`.

    Returns:
        ``(X, model)`` with ``X`` of shape ``(len(workloads), model.n_terms)``.
    """
    numeric, categorical = workload_factors(workloads)
    fm = FeatureModel.fit(numeric, categorical, order)
    return fm.transform(numeric, categorical), fm


def check_estimable(X: np.ndarray, terms: Sequence[str], source: str = "candidate set") -> None:
    """Raise if the model terms are not all estimable from the rows of ``X``.

    Terms are examined in model order; a term is reported as aliased when it lies (to
    round-off) in the span of the earlier, non-aliased terms, using the Gram matrix of the
    unit-normalised columns.

    Args:
        X: model matrix of the candidate set.
        terms: the names of its columns.
        source: what ``X`` describes, named in the error.

    Raises:
        DesignError: ``X`` has fewer rows than columns, or rank below the number of terms; the
            message lists the aliased terms.

    Shapes:
        X: ``(n, len(terms))``.
    """
    n, p = X.shape
    if n < p:
        raise DesignError(
            f"{source}: {n} candidates are fewer than the {p} model terms {list(terms)}; "
            "add levels or choose a smaller model order"
        )
    norms = np.linalg.norm(X, axis=0)
    Xn = X / np.where(norms > 0, norms, 1.0)
    rank = int(np.linalg.matrix_rank(Xn, tol=_RANK_TOL))
    if rank == p:
        return
    gram = Xn.T @ Xn
    kept: list[int] = []
    aliased: list[str] = []
    for k in range(p):
        trial = [*kept, k]
        sub = gram[np.ix_(trial, trial)]
        if norms[k] > 0 and np.linalg.eigvalsh(sub)[0] > 1e-12:
            kept.append(k)
        else:
            aliased.append(terms[k])
    raise DesignError(
        f"{source}: singular model: rank {rank} < {p} terms; aliased term(s) {aliased} are "
        "linear combinations of the earlier terms over the candidates (vary those factors "
        "independently in the preset or choose a smaller model order)"
    )


def _category_groups(categorical: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """Group id of each row by its combination of categorical labels (None: no categories)."""
    if not categorical:
        return None
    keys = np.array(["|".join(map(str, t)) for t in zip(*categorical.values(), strict=True)])
    return np.unique(keys, return_inverse=True)[1]


def _constant_within(values: np.ndarray, groups: np.ndarray | None) -> bool:
    """True if ``values`` is constant within every group (then the categories determine it)."""
    if groups is None:
        return False
    order = np.lexsort((values, groups))
    g, v = groups[order], values[order]
    same_group = g[1:] == g[:-1]
    return bool(np.all(v[1:][same_group] == v[:-1][same_group]))


def _rows(numeric: Mapping[str, np.ndarray], categorical: Mapping[str, np.ndarray]) -> int:
    sizes = {np.asarray(v).shape[0] for v in [*numeric.values(), *categorical.values()]}
    if len(sizes) > 1:
        raise DesignError(f"factor arrays have different lengths {sorted(sizes)}")
    return sizes.pop() if sizes else 0
