"""Generated markdown blocks (README and docs pages), one module per block; :mod:`~scaledl.report.blocks.markers` bounds them."""
