"""NeuSight's own whole-model predictions, read as a peer to compare ScaleDL with.

Source: NeuSight (sitar-lab/NeuSight, commit 6945927d, ASPLOS 2025, MIT licence, see
``external/neusight_peer/LICENSE``), copied unchanged to ``external/neusight_peer/``:
``prediction/<GPU>/<stem>.json`` is NeuSight's prediction for the label
``external/neusight/label/<GPU>/<stem>.json`` (``<stem>`` =
``<model>-<train|inf>-<seq_len>-<batch>``), with ``e2e_latency`` in milliseconds (forward plus
backward for ``train``, as the label). A GPU folder is named like NeuSight's device config
(``device_configs/<GPU>.json``), whose ``Device`` field is the ``torch.cuda`` name the imported
workloads carry (``cuda:<Device>``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from scaledl.external.neusight import (
    _MODES,
    _NAME_RE,
    NeusightFormatError,
    _number,
    _read_json,
    read_device_configs,
)
from scaledl.layout import neusight_peer_root

#: Columns of :func:`load_peer_predictions`.
PEER_COLUMNS = ("gpu", "model", "mode", "seq_len", "batch_size", "peer_ms", "file")
#: Columns of :func:`load_peer_layout_predictions`.
PEER_LAYOUT_COLUMNS = ("gpu", "stem", "peer_ms", "file")


def load_peer_predictions(
    peer_root: Path | str | None = None, neusight_root: Path | str | None = None
) -> pd.DataFrame:
    """Read NeuSight's single-GPU predictions.

    Args:
        peer_root: the folder with ``prediction/<GPU>/<stem>.json`` (default
            :func:`scaledl.layout.neusight_peer_root`).
        neusight_root: the NeuSight data folder (its ``device_configs`` name the GPUs; default
            :func:`scaledl.layout.neusight_root`).

    Returns:
        One row per prediction, columns :data:`PEER_COLUMNS`: ``gpu`` (the device name, e.g.
        ``NVIDIA H100 80GB HBM3``), ``model``, ``mode`` (``train``/``infer``), ``seq_len``,
        ``batch_size``, ``peer_ms`` (``e2e_latency``, ms) and the ``file``. Multi-GPU and
        ``-fusion`` stems are not single-GPU rows and are left out.

    Raises:
        FileNotFoundError: no ``prediction`` folder under ``peer_root``.
        NeusightFormatError: a file name that is not a NeuSight stem, a GPU folder without a
            device config, or an ``e2e_latency`` that is not a finite number > 0 (naming
            the file, the key and the value).
    """
    rows = []
    for path, m, gpu, value in _predictions(peer_root, neusight_root):
        if m["suffix"]:
            continue
        rows.append(
            {
                "gpu": gpu,
                "model": m["model"],
                "mode": _MODES[m["mode"]],
                "seq_len": int(m["seq_len"]),
                "batch_size": int(m["batch"]),
                "peer_ms": float(value),
                "file": str(path),
            }
        )
    return pd.DataFrame(rows, columns=list(PEER_COLUMNS))


def load_peer_layout_predictions(
    peer_root: Path | str | None = None, neusight_root: Path | str | None = None
) -> pd.DataFrame:
    """Read NeuSight's predictions of its 4-GPU rows (``-dp4``, ``-tp4``, ``-pp4_1`` stems).

    NeuSight predicts them with its per-operator models on one rank's sharded operators plus
    its own communication estimate, composed by ``neusight/Prediction/aggregator.py``
    (``aggregate_dp``: gradient all-reduces overlapped with the backward; ``aggregate_tp``: the
    sum of the sharded operators and the tensor-parallel all-reduces; ``aggregate_pp``: the
    stages one after the other with the send/recv between them).

    Args:
        peer_root: as :func:`load_peer_predictions`.
        neusight_root: as :func:`load_peer_predictions`.

    Returns:
        One row per prediction, columns :data:`PEER_LAYOUT_COLUMNS`: ``gpu`` (the device name),
        ``stem`` (the label's file stem, e.g. ``gpt2_large-train-1024-4-tp4``), ``peer_ms``
        (``e2e_latency``, ms) and the ``file``.

    Raises:
        FileNotFoundError: no ``prediction`` folder under ``peer_root``.
        NeusightFormatError: as :func:`load_peer_predictions`.
    """
    rows = [
        {"gpu": gpu, "stem": path.stem, "peer_ms": value, "file": str(path)}
        for path, m, gpu, value in _predictions(peer_root, neusight_root)
        if m["strategy"]
    ]
    return pd.DataFrame(rows, columns=list(PEER_LAYOUT_COLUMNS))


def _predictions(peer_root, neusight_root):
    """Every prediction file: ``(path, name match, device name, e2e_latency ms)``.

    Raises:
        FileNotFoundError: no ``prediction`` folder under ``peer_root``.
        NeusightFormatError: a file name that is not a NeuSight stem, a GPU folder without a
            device config, or an ``e2e_latency`` that is not a finite number > 0.
    """
    folder = Path(peer_root if peer_root is not None else neusight_peer_root()) / "prediction"
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no NeuSight prediction folder")
    devices = read_device_configs(neusight_root).set_index("gpu")["device_name"]
    out = []
    for path in sorted(folder.glob("*/*.json")):
        m = _NAME_RE.match(path.stem)
        if m is None:
            raise NeusightFormatError(
                f"{path}: file name {path.stem!r} is not <model>-<train|inf>-<seq_len>-<batch>"
            )
        gpu = path.parent.name
        if gpu not in devices.index:
            raise NeusightFormatError(
                f"{path}: GPU folder {gpu!r} has no device_configs/{gpu}.json in the NeuSight "
                "data folder"
            )
        value = _number(path, "e2e_latency", _read_json(path).get("e2e_latency"), positive=True)
        out.append((path, m, str(devices.loc[gpu]), value))
    return out
