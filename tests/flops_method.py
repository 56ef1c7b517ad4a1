"""A layer-wise stand-in for layout composition tests: times from FLOPs, no fitting."""

import numpy as np
import pandas as pd


class FlopsModel:
    """A layer-wise stand-in: forward 1 ms per MFLOP + 0.01, backward twice, step per param."""

    features = "work"
    unmeasured_types = ()

    def predict(self, nodes, bound=True):
        """No roofline band: ``bound`` is accepted (LayerwiseModel's signature) and unused."""
        fwd = nodes["fwd_flops"].to_numpy(dtype=float) * 1e-6 + 0.01
        opt = (nodes["layer_type"] == "optimizer").to_numpy()
        fwd = np.where(opt, nodes["params"].to_numpy(dtype=float) * 1e-6, fwd)
        return pd.DataFrame(
            {"forward_ms": fwd, "backward_ms": np.where(opt, 0.0, 2 * fwd),
             "used_generic": False, "bounded": ""}, index=nodes.index,
        )  # fmt: skip


class Method:
    layerwise_ = FlopsModel()
    allreduce_ = None  # free communication
