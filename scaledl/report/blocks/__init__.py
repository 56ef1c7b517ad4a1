"""Generated markdown blocks of the docs pages and datasheets, one renderer module per block.

:mod:`~scaledl.report.blocks.registry` lists every block (page, markers, committed result,
renderer); :mod:`~scaledl.report.blocks.markers` bounds them.
"""
