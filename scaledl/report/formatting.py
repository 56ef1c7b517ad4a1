"""How numbers, verdicts, intervals and figures are written in every report and README block.

One module so a percentage reads the same everywhere: :func:`pct` (with the digits a place
asks for), :func:`ratio`, :func:`ms`, :func:`reached_text`, :func:`interval_text`, the
embedded PNG (:func:`png_data_uri`) and the log-log "predicted vs measured" axes the figures
share (:func:`loglog_identity`).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: How a target's ``reached`` is written in the report (HTML) and in the README (markdown).
REACHED_HTML = {True: "yes", False: "NO", None: "n/a"}
REACHED_MARKDOWN = {True: "yes", False: "no", None: "n/a"}


class _Interval(Protocol):
    mre_difference: float
    ci_low: float
    ci_high: float


def pct(x: float | None, digits: int = 1, missing: str = "n/a") -> str:
    """A fraction as a percentage: ``pct(0.0312) == "3.1%"``.

    Args:
        x: the fraction (``None``: not measured).
        digits: decimals of the percentage.
        missing: the text for ``None``.

    Returns:
        ``f"{100 * x:.{digits}f}%"`` or ``missing``.
    """
    return missing if x is None else f"{100 * x:.{digits}f}%"


def ratio(x: float | None, digits: int = 2) -> str:
    """A factor: ``ratio(6.0) == "6.00x"`` (``"n/a"`` for ``None``)."""
    return "n/a" if x is None else f"{x:.{digits}f}x"


def ms(seconds: float) -> str:
    """Seconds as milliseconds with one decimal: ``ms(0.0123) == "12.3 ms"``."""
    return f"{1000 * seconds:.1f} ms"


def reached_text(reached: bool | None, markdown: bool = False) -> str:
    """``yes`` / ``NO`` (``no`` in markdown) / ``n/a`` for a target's ``reached``."""
    return (REACHED_MARKDOWN if markdown else REACHED_HTML)[reached]


def interval_text(c: _Interval) -> str:
    """``-1.2 points [-2.0, -0.4]``: a paired difference and its interval, in percentage points.

    Args:
        c: a :class:`~scaledl.stats.significance.Comparison`.
    """
    return f"{100 * c.mre_difference:+.1f} points [{100 * c.ci_low:+.1f}, {100 * c.ci_high:+.1f}]"


def png_data_uri(path: Path) -> str:
    """A PNG file as a ``data:image/png;base64,...`` URI (the report embeds its figures)."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def loglog_identity(ax: Axes, lo: float, hi: float, **labels: str) -> None:
    """Log-log axes over ``[lo, hi]`` on both sides with the dashed ``y = x`` line.

    The predicted-vs-measured layout of the report's scatter figures.

    Args:
        ax: the axes.
        lo: lower limit of both axes (seconds).
        hi: upper limit.
        **labels: further :meth:`~matplotlib.axes.Axes.set` keywords (``title``,
            ``xlabel``, ``ylabel``).
    """
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), **labels)
