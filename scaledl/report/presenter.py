"""The evaluation's presentation, handed to :func:`scaledl.evaluation.evaluate.evaluate`.

:mod:`scaledl.evaluation` renders nothing itself (it sits below :mod:`scaledl.report`); the CLI and
the pipeline pass an :class:`HtmlReport`, which draws the figures and writes ``report.html``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from scaledl.evaluation.results import Metrics
from scaledl.report.evaluation_report import write_report
from scaledl.report.figures import draw_all


class HtmlReport:
    """Figures and ``report.html``: a :class:`~scaledl.evaluation.evaluate.Presenter`.

    Figures by :func:`~scaledl.report.figures.draw_all`, the self-contained report by
    :func:`~scaledl.report.evaluation_report.write_report`.
    """

    def figures(self, metrics: Metrics, predictions: pd.DataFrame, folder: Path) -> dict[str, Path]:
        """Draw every figure the metrics allow into ``folder``; figure key -> PNG path."""
        return draw_all(metrics, predictions, folder)

    def write(self, metrics: Metrics, figure_paths: dict[str, Path], path: Path) -> Path:
        """Write the HTML report to ``path``; returns ``path``."""
        return write_report(metrics, figure_paths, path)
