"""Layout calibrations beside a bundle: identical after a round trip, hostile ones refused."""

import functools
import json
import shutil

import numpy as np
import pandas as pd
import pytest
import skops.io as sio
from scaledl_fixtures import save_beside
from tiny_specs import tiny, tiny_spec

from scaledl.prediction.predictor import load_predictor
from scaledl.registry import BundleError
from scaledl.registry.bundle import read_manifest, sha256_file
from scaledl.registry.layouts import (
    LAYERWISE_FILE,
    MANIFEST_FILE,
    device_folder,
    find_layout_calibration,
)

pytestmark = pytest.mark.slow  # the tiny bundle (registry_root) profiles first


def layout_workloads(device: str):
    fields = {"num_layers": 2, "batch_size": 4, "device_name": device}
    return [tiny("bert", world_size=2, sharding="fsdp", **fields),
            tiny("bert", world_size=2, dp_size=1, tp_size=2, **fields),
            tiny("bert", world_size=2, dp_size=1, pp_size=2, micro_batches=2, **fields),
            tiny("bert", world_size=2, **fields)]  # fmt: skip


def found(bundle):
    device = load_predictor(bundle).devices[0]
    return find_layout_calibration(bundle, read_manifest(bundle), device), device


def test_round_trip_gives_identical_predictions(bundle, layout_calibration):
    assert found(bundle)[0] is None  # nothing saved: the current recipe
    target = save_beside(layout_calibration, bundle)
    loaded, device = found(bundle)
    assert target.parent.name == device_folder(device)
    assert (target.parent / "latest").read_text() == target.name + "\n"
    assert loaded.version == target.name and loaded.predictor_version == "v2"
    assert loaded.label == f"calibrated:{layout_calibration.recipe.name}@{target.name}"
    ws = layout_workloads(device)
    composed, corrected = layout_calibration.predict(ws)
    again, corrected_again = loaded.predict(ws)
    np.testing.assert_array_equal(corrected_again, corrected)
    np.testing.assert_array_equal(again.iteration_ms, composed.iteration_ms)
    assert "selection" not in json.loads((target / MANIFEST_FILE).read_text())
    assert loaded.recipe.overlap == layout_calibration.recipe.overlap
    assert list(json.loads((target / MANIFEST_FILE).read_text())["files"]) == [LAYERWISE_FILE]
    # the bundle itself is untouched: its manifest still verifies and lists its own files
    assert "layouts" not in read_manifest(bundle)["files"]


#: A value written as the bare JSON number 1e999 (Python reads it as infinity).
HUGE = "__1e999__"


def edit_manifest(target, change):
    path = target / MANIFEST_FILE
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data).replace(f'"{HUGE}"', "1e999"))


def relist(target):
    """Record the skops file's current checksum and size (a consistent hostile calibration)."""
    edit_manifest(target, lambda d: d.update(
        files={LAYERWISE_FILE: sha256_file(target / LAYERWISE_FILE)},
        file_sizes={LAYERWISE_FILE: (target / LAYERWISE_FILE).stat().st_size}))  # fmt: skip


def _set(path, value):
    def change(data):
        *head, last = path.split(".")
        node = data
        for key in head:
            node = node[key]
        node[last] = value

    return change


MANIFEST_EDITS = {
    "out-of-range overlap": (_set("overlap.hidden.send", 1.5), "overlap.hidden"),
    # refused by the JSON reader (scaledl.io.safe), naming the field and the number
    "infinite coefficient": (
        lambda d: d["correction"]["coef"].__setitem__(0, HUGE),
        "field 'coef'[0] (value 1e999): not a finite number",
    ),
    "unknown field": (_set("run", "__import__('os').system('true')"), "'run'"),
    "unknown recipe": (_set("recipe", "evil"), "'recipe'"),
    "negative collective cost": (_set("collectives.params.send", [-1.0, 0.0]), "collectives"),
    # a calibration saved before the FSDP probe (e0820c9) has no cost for its four rows
    "no FSDP probe costs": (
        lambda d: [
            d["collectives"][k].pop(c)
            for k in ("params", "source")
            for c in ("fsdp_forward", "fsdp_backward", "zero2_backward", "fsdp_step")
        ],
        "collectives.params",
    ),  # fmt: skip
    "other file listed": (_set("files", {"../gnn.pt": "0" * 64}), "'files'"),
    # the inner scores a calibration wrote before issue 52 are still validated
    "negative selection score": (
        _set(
            "selection",
            {
                "chosen": "plain_layers_overlap",
                "mean_mre": {"fold_layers": -0.1},
                "mre_by_kind": {},
            },
        ),
        "selection",
    ),  # fmt: skip
    # issue 50: every number of a calibration in range when it is loaded
    "intercept far below": (
        _set("correction.intercept", -800.0),
        "field 'correction.intercept' (value -800.0)",
    ),
    "intercept far above": (
        _set("correction.intercept", 800.0),
        "field 'correction.intercept' (value 800.0)",
    ),
    "huge coefficient": (
        lambda d: d["correction"]["coef"].__setitem__(2, 50.0),
        "field 'correction.coef.2' (value 50.0)",
    ),
    "huge collective latency": (
        _set("collectives.params.send", [1e6, 0.0]),
        "field 'collectives.params.send.0' (value 1000000.0)",
    ),
    "slow collective cost": (
        _set("collectives.params.send", [0.0, 0.5]),
        "field 'collectives.params.send.1' (value 0.5)",
    ),
    "other predictor": (_set("predictor_version", "v1"), "'predictor_version'"),
}


#: ``selection`` as a calibration wrote it before issue 52 (the candidates' inner scores).
OLD_SELECTION = {
    "chosen": "plain_layers_overlap",
    "lowest": "plain_layers",
    "mean_mre": {"fold_layers": 0.12, "plain_layers": 0.08},
    "mre_by_kind": {"fold_layers": {"tp": 0.12}, "plain_layers": {"tp": 0.08}},
}


def test_a_calibration_saved_with_the_old_selection_still_loads(bundle, layout_calibration):
    target = save_beside(layout_calibration, bundle)
    edit_manifest(target, _set("selection", OLD_SELECTION))
    loaded, device = found(bundle)
    assert loaded.version == target.name
    ws = layout_workloads(device)
    np.testing.assert_array_equal(loaded.predict(ws)[1], layout_calibration.predict(ws)[1])


@pytest.mark.parametrize("case", list(MANIFEST_EDITS))
def test_an_edited_manifest_is_refused_naming_the_field(bundle, layout_calibration, case):
    target = save_beside(layout_calibration, bundle)
    change, field = MANIFEST_EDITS[case]
    edit_manifest(target, change)
    with pytest.raises(BundleError, match=MANIFEST_FILE) as err:
        found(bundle)
    assert field in str(err.value)


def test_untrusted_skops_types_are_refused_unloaded(bundle, layout_calibration, tmp_path):
    target = save_beside(layout_calibration, bundle)
    marker = tmp_path / "ran"
    hostile = {"*": {"forward": functools.partial(marker.write_text, "ran"), "backward": None}}
    sio.dump(hostile, target / LAYERWISE_FILE)
    relist(target)
    with pytest.raises(BundleError, match="outside the allow-list"):
        found(bundle)
    assert not marker.exists()


def test_an_altered_or_missing_skops_file_is_refused(bundle, layout_calibration):
    target = save_beside(layout_calibration, bundle)
    layer_file = target / LAYERWISE_FILE
    data = bytearray(layer_file.read_bytes())
    data[-10] ^= 0xFF
    layer_file.write_bytes(bytes(data))
    with pytest.raises(BundleError, match="checksum mismatch"):
        found(bundle)
    layer_file.write_bytes(bytes(data[:-1]))
    with pytest.raises(BundleError, match="bytes, the manifest says"):
        found(bundle)
    layer_file.unlink()
    with pytest.raises(BundleError, match="missing"):
        found(bundle)


def test_a_broken_latest_is_refused_a_missing_one_is_none(bundle, layout_calibration):
    target = save_beside(layout_calibration, bundle)
    latest = target.parent / "latest"
    latest.write_text("../../..\n")
    with pytest.raises(BundleError, match="not a version directory name"):
        found(bundle)
    latest.unlink()  # a publish that died before `latest`: nothing published
    assert found(bundle)[0] is None
    shutil.rmtree(target.parent)
    assert found(bundle)[0] is None


def test_a_refused_calibration_fails_the_prediction_never_falls_back(bundle, layout_calibration):
    target = save_beside(layout_calibration, bundle)
    edit_manifest(target, _set("overlap", None))
    predictor = load_predictor(bundle)
    ddp, fsdp = tiny("bert", world_size=2), tiny("bert", world_size=2, sharding="fsdp")
    assert predictor.predict([ddp])["recipe"].tolist() == ["predictor"]  # no layout: not read
    with pytest.raises(BundleError, match="field 'overlap'"):
        predictor.predict([ddp, fsdp])


def test_a_calibration_out_of_range_ends_the_cli_in_one_line(bundle, layout_calibration, tmp_path):
    """Issue 50: ``scaledl predict`` of a layout with a refused calibration: exit 2, no trace."""
    from typer.testing import CliRunner

    from scaledl.cli import app

    target = save_beside(layout_calibration, bundle)
    device = found(bundle)[1]
    rows = tmp_path / "layouts.csv"
    spec = tiny_spec(
        "bert", world_size=2, dp_size=1, tp_size=2, num_layers=2, batch_size=4, device_name=device
    )
    pd.DataFrame([spec]).to_csv(rows, index=False)
    args = ["predict", "--predictor", str(bundle), "--workloads", str(rows)]
    assert CliRunner().invoke(app, args).exit_code == 0
    for value in (-800.0, 800.0):
        edit_manifest(target, _set("correction.intercept", value))
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        assert not isinstance(result.exception, Exception) or isinstance(
            result.exception, SystemExit
        )
        line = result.output.strip()
        assert str(target / MANIFEST_FILE) in line and len(line.splitlines()) == 1
        assert f"field 'correction.intercept' (value {value})" in line
    (target / MANIFEST_FILE).write_text("[" * 100_000 + "]" * 100_000)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "nested 100000 levels deep" in result.output
    assert str(target / MANIFEST_FILE) in result.output
