"""The consumer-facing :class:`Predictor`: load a bundle, predict runtimes of workloads.

Workloads come as :class:`~scaledl.workloads.spec.Workload` objects, dicts, or DataFrame rows
(one workload per row, columns named as the spec's fields; missing and NaN cells take the
field's default). A predictor predicts for the device it was trained on: a workload whose
``device_name`` is left at the default ``"cpu"`` means "the predictor's device"; any other
``device_name`` not among the training devices is an error, never a silent guess.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scaledl.registry.bundle import load_method, resolve_bundle
from scaledl.workloads.spec import Workload, WorkloadError

_DEFAULT_DEVICE = Workload.model_fields["device_name"].default


class Predictor:
    """A loaded ScaleDL predictor.

    Attributes:
        manifest: the bundle's manifest (version, training data, metrics, ...).
        path: the bundle directory.
    """

    def __init__(self, method, manifest: dict[str, Any], path: Path) -> None:
        self._method = method
        self.manifest = manifest
        self.path = path

    @property
    def version(self) -> str:
        """The bundle version."""
        return self.manifest["version"]

    @property
    def devices(self) -> list[str]:
        """Devices the predictor was trained on."""
        return list(self._method.training_devices)

    def predict(self, workloads: Any, detail: bool = False, source: str = "") -> pd.DataFrame:
        """Predict iteration and epoch time.

        Args:
            workloads: a DataFrame (one row per workload), or a list of ``Workload``s or dicts.
            detail: also return per-node predictions.
            source: where the workloads came from (a file), named in errors.

        Returns:
            One row per workload, in input order: ``workload_id``, ``family``, ``batch_size``,
            ``world_size``, ``iteration_s``, ``epoch_s``, ``steps_per_epoch``,
            ``used_generic_layer_model`` (a layer type unseen in training was predicted by the
            generic model), ``predictor_version``. With ``detail=True``, a tuple of that frame
            and a per-node frame (``workload_id``, ``node_index``, ``layer_name``,
            ``layer_type``, ``forward_ms``, ``backward_ms``, ``total_ms``, ``used_generic``).

        Raises:
            scaledl.workloads.spec.WorkloadError: a workload is invalid (names row and field),
                or asks for a device the predictor was not trained on.
        """
        specs = self._to_workloads(workloads, source)
        result = self._method.predict(specs)
        nodes = self._method.node_detail(specs)
        generic = nodes.groupby("workload_id")["used_generic"].any()
        result.insert(1, "family", [w.family for w in specs])
        result.insert(2, "batch_size", [w.batch_size for w in specs])
        result.insert(3, "world_size", [w.world_size for w in specs])
        result["steps_per_epoch"] = [w.steps_per_epoch for w in specs]
        result["used_generic_layer_model"] = result["workload_id"].map(generic).fillna(False)
        result["predictor_version"] = self.version
        if not np.isfinite(result[["iteration_s", "epoch_s"]].to_numpy()).all():
            raise RuntimeError(f"{self.path}: predictor returned non-finite times")
        return (result, nodes) if detail else result

    def _to_workloads(self, workloads: Any, source: str = "") -> list[Workload]:
        if isinstance(workloads, pd.DataFrame):
            records = workloads.to_dict("records")
        elif isinstance(workloads, (Workload, dict)):
            records = [workloads]
        else:
            records = list(workloads)
        specs = []
        prefix = f"{source}: " if source else ""
        for i, rec in enumerate(records):
            where = f"{prefix}row {i + 1}"
            w = rec if isinstance(rec, Workload) else Workload.from_record(rec, source=where)
            if w.device_name == _DEFAULT_DEVICE and self.devices:
                w = w.model_copy(update={"device_name": self.devices[0]})
            elif w.device_name not in self.devices:
                raise WorkloadError(
                    f"{where}: field 'device_name' (value {w.device_name!r}): predictor "
                    f"{self.version} was trained on {self.devices}"
                )
            specs.append(w)
        if not specs:
            raise WorkloadError("no workload to predict")
        return specs


def load_predictor(path: Path | str) -> Predictor:
    """Load a predictor bundle (or the ``latest`` of a name directory), verified first.

    Args:
        path: a bundle directory (``data/predictors/scaledl/<version>``) or a name directory
            (``data/predictors/scaledl``, follows its ``latest`` file).

    Returns:
        The :class:`Predictor`.

    Raises:
        scaledl.registry.bundle.BundleError: missing, tampered, truncated or incompatible.
    """
    bundle = resolve_bundle(Path(path))
    method, manifest = load_method(bundle)
    return Predictor(method, manifest, bundle)
