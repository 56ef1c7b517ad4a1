"""Presentation of the evaluation: the HTML report, its summary, the README block and figures.

Modules: :mod:`~scaledl.report.evaluation_report` (the self-contained ``report.html``),
:mod:`~scaledl.report.headline` (its opening summary: headline figure, errors next to the noise
floor, a verdict), :mod:`~scaledl.report.paired` (paired comparisons, ablations, GNN diagnosis,
learning curves), :mod:`~scaledl.report.targets` (the targets of
:mod:`scaledl.evaluation.targets`, measured), :mod:`~scaledl.report.summary` (the README
results block), :mod:`~scaledl.report.figures` (PNG figures),
:mod:`~scaledl.report.gpu_report` (the real-GPU section), :mod:`scaledl.report.blocks` (the other
generated README blocks), :mod:`~scaledl.report.formatting`
(how numbers are written); the jinja2 templates are :mod:`scaledl.io.render`'s. Everything
reads a :class:`~scaledl.evaluation.results.Metrics`; nothing here fits a model.
"""
