"""The layer-wise training samples of a node frame (pandas only).

Apart from :mod:`scaledl.models.data` (which loads profiles, with SciPy's label statistics) so
that the training domain a loaded predictor checks against does not import SciPy.
"""

from __future__ import annotations

import pandas as pd


def measured_nodes(nodes: pd.DataFrame) -> pd.DataFrame:
    """Nodes with a positive measured forward time (layer-wise training samples)."""
    mask = nodes["forward_ms"].notna() & (nodes["forward_ms"] > 0)
    frame = nodes[mask].copy()
    frame["backward_ms"] = frame["backward_ms"].fillna(0.0)
    return frame
