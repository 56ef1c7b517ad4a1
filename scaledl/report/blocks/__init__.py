"""Generated markdown blocks of the docs pages and datasheets, one module per block.

:mod:`~scaledl.report.blocks.markers` bounds them.
"""
