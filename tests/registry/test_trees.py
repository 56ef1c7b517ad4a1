"""Issue 50: a crafted scikit-learn tree is refused before it can hang or crash a prediction.

The unit tests build trees in memory (``Tree.__setstate__`` takes any node array of the right
dtype, as skops does when it loads one). The end-to-end tests craft the node array (or
``node_count``) of a tree inside each kind of bundle file: the CPU bundle's
``layerwise.skops`` (as written before ``layerwise.npz``), the GPU bundle's ``operators.skops``
and a layout calibration's ``layerwise.skops``; each file's manifest is made consistent again
(checksum and size) so only the loader's own checks stand in the way, and ``scaledl predict``
runs in a subprocess under a per-prediction timeout (one child runs all 12 and names the one it
is in), so a regression (a hang, a SIGSEGV) fails that case's test instead of killing pytest.
Before
the checks, the self-loop hung past the timeout and the out-of-range child and feature ended in
SIGSEGV. The timeout is 300 s, not a bound on speed: on a 2-core host loaded 7x over, the CLI
took 70-80 s to start and refuse.
"""

import io
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import GradientBoostingRegressor, RandomForestRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import PolynomialFeatures
from sklearn.tree import DecisionTreeRegressor
from sklearn.tree._tree import Tree
from tiny_specs import tiny_spec

from scaledl.registry.bundle import sha256_file
from scaledl.registry.trees import MAX_TREE_NODES, TreeStructureError, check_trees

REPO = Path(__file__).resolve().parents[2]
X = np.random.default_rng(0).random((60, 3))
Y = X[:, 0] + 2 * X[:, 1]


def with_nodes(tree: Tree, edit=None) -> Tree:
    """A copy of ``tree`` whose state ``edit`` changed (``nodes``, ``values``, ``node_count``)."""
    state = tree.__getstate__()
    state["nodes"], state["values"] = state["nodes"].copy(), state["values"].copy()
    if edit is not None:
        edit(state)
    n_classes = np.ones(tree.n_outputs, dtype=np.intp) * tree.max_n_classes
    crafted = Tree(tree.n_features, n_classes, tree.n_outputs)
    crafted.__setstate__(state)
    return crafted


def _set(field, value, node=0):
    return lambda state: state["nodes"][field].__setitem__(node, value)


def _self_loop(state):
    state["nodes"]["left_child"][0] = state["nodes"]["right_child"][0] = 0


def _huge(state):
    """Pad the tree with unreachable leaves to one node over :data:`MAX_TREE_NODES`.

    (scikit-learn clamps ``node_count`` to the stored nodes when it loads a tree, so a huge
    count comes with a huge node array: zeros compress to nothing in a skops zip.)
    """
    nodes, values = state["nodes"], state["values"]
    extra = MAX_TREE_NODES + 1 - len(nodes)
    leaves = np.zeros(extra, dtype=nodes.dtype)
    leaves["left_child"] = leaves["right_child"] = -1
    leaves["feature"] = -2
    state["nodes"] = np.concatenate([nodes, leaves])
    state["values"] = np.concatenate([values, np.zeros((extra, *values.shape[1:]))])
    state["node_count"] = MAX_TREE_NODES + 1


#: case -> (edit of a tree's state, what the refusal names).
CASES = {
    "self-loop": (_self_loop, r"node 0 field 'children_left' \(value 0\)"),
    "child out of range": (
        _set("right_child", 10**6),
        r"node 0 field 'children_right' \(value 1000000\)",
    ),
    "feature out of range": (_set("feature", 2**40), rf"node 0 field 'feature' \(value {2**40}\)"),
    "huge node count": (_huge, rf"field 'node_count' \(value {MAX_TREE_NODES + 1}\)"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_crafted_tree_is_refused_naming_the_node_and_value(case):
    edit, match = CASES[case]
    model = DecisionTreeRegressor(max_depth=3, random_state=0).fit(X, Y)
    model.tree_ = with_nodes(model.tree_, edit)
    with pytest.raises(TreeStructureError, match=r"f\.skops: \['m'\]\.tree_: " + match):
        check_trees({"m": model}, "f.skops")


@pytest.mark.parametrize(
    "edit, match",
    [
        (_set("right_child", -1), r"node 0 fields 'children_left', 'children_right'"),
        # both children of the root the same node: node 2 is reached by no one
        (lambda s: s["nodes"]["right_child"].__setitem__(0, 1), "node 1 is reached 2 times"),
        (_set("feature", 3), r"node 0 field 'feature' \(value 3\): not in \[0, 3\)"),
        (_set("feature", -5), r"field 'feature' \(value -5\)"),
        (_set("threshold", np.nan), r"node 0 field 'threshold' \(value nan\)"),
    ],
)
def test_every_structural_rule_is_enforced(edit, match):
    model = DecisionTreeRegressor(max_depth=3, random_state=0).fit(X, Y)
    model.tree_ = with_nodes(model.tree_, edit)
    with pytest.raises(TreeStructureError, match=match):
        check_trees(model, "f.skops")


def test_a_node_count_above_the_stored_nodes_is_refused_before_they_are_read():
    model = DecisionTreeRegressor(max_depth=3, random_state=0).fit(X, Y)
    stored = model.tree_.node_count
    model.tree_.node_count = stored + 1  # (loading clamps it; the attribute is writable)
    with pytest.raises(TreeStructureError, match=f"more than the {stored} nodes stored"):
        check_trees(model, "f.skops")


def test_fitted_trees_pass_in_ensembles_pipelines_and_containers():
    boosted = GradientBoostingRegressor(n_estimators=5, max_depth=4, random_state=0).fit(X, Y)
    forest = RandomForestRegressor(n_estimators=3, max_depth=None, random_state=0).fit(X, Y)
    # the tree reads 10 features (degree-2 expansion of 3): more than the pipeline's input
    pipe = make_pipeline(PolynomialFeatures(2), DecisionTreeRegressor(random_state=0)).fit(X, Y)
    assert pipe[-1].tree_.feature.max() >= 3
    loaded = {"a": {"forward": boosted, "backward": None}, "b": [forest, (pipe,)]}
    assert check_trees(loaded, "f.skops") == 5 + 3 + 1


def test_a_tree_inside_an_ensemble_is_found_and_bounded_by_the_ensemble():
    boosted = GradientBoostingRegressor(n_estimators=3, max_depth=2, random_state=0).fit(X, Y)
    member = boosted.estimators_[2, 0]
    member.tree_ = with_nodes(member.tree_, _set("feature", 2**40))
    with pytest.raises(TreeStructureError, match=r"\.booster_\.estimators_\[2, 0\]\.tree_: node 0"):
        check_trees({"*": {"forward": _Holder(boosted)}}, "f.skops")
    # a member claiming more features than the ensemble hands it is bounded by the ensemble
    boosted = GradientBoostingRegressor(n_estimators=1, max_depth=2, random_state=0).fit(X, Y)
    member = boosted.estimators_[0, 0]
    member.tree_ = with_nodes(member.tree_, _set("feature", 4))
    member.tree_.n_features = 9
    member.n_features_in_ = 9
    with pytest.raises(TreeStructureError, match=r"\(value 4\): not in \[0, 3\)"):
        check_trees(boosted, "f.skops")


def test_a_boosting_ensemble_of_the_wrong_shape_is_refused():
    boosted = GradientBoostingRegressor(n_estimators=2, max_depth=2, random_state=0).fit(X, Y)
    boosted.estimators_ = np.hstack([boosted.estimators_, boosted.estimators_])
    with pytest.raises(TreeStructureError, match=r"field 'estimators_' \(shape \(2, 2\)\)"):
        check_trees(boosted, "f.skops")
    boosted.estimators_ = np.array([[object()]], dtype=object)
    with pytest.raises(TreeStructureError, match="not a fitted DecisionTreeRegressor"):
        check_trees(boosted, "f.skops")


@pytest.mark.parametrize("rate", [float("nan"), float("inf"), 0.0, -0.1, 1e6, True])
def test_a_boosting_learning_rate_out_of_range_is_refused_naming_the_field(rate):
    # prediction scales every stage by it: NaN made every operator prediction NaN
    boosted = GradientBoostingRegressor(n_estimators=2, max_depth=2, random_state=0).fit(X, Y)
    boosted.learning_rate = rate
    with pytest.raises(TreeStructureError, match=r"g.skops: \[3\]: field 'learning_rate'"):
        check_trees([0, 1, 2, boosted], "g.skops")
    boosted.learning_rate = 0.1
    boosted.init_.constant_ = np.array([[np.nan]])
    with pytest.raises(TreeStructureError, match=r"field 'init_.constant_'"):
        check_trees(boosted, "g.skops")


class _Holder:
    """An estimator-like wrapper (a LayerTimeRegressor holds its boosting in ``booster_``)."""

    def __init__(self, booster):
        self.n_features_in_ = 3
        self.booster_ = booster


# ------------------------------------------------------------------ every bundle kind, CLI
def first_split_tree(schema: dict) -> dict:
    """The state (``content.content``) of the first Tree of a skops schema whose root splits."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            if node.get("__class__") == "Tree" and node.get("__module__") == "sklearn.tree._tree":
                found.append(node["content"]["content"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return found


def craft(path: Path, case: str) -> None:
    """Rewrite the first tree of a skops file whose root splits as ``case`` (:data:`CASES`)."""
    with zipfile.ZipFile(path) as z:
        members = {info.filename: (z.read(info), info.compress_type) for info in z.infolist()}
    schema = json.loads(members["schema.json"][0])
    for state in first_split_tree(schema):
        name = state["nodes"]["file"]
        nodes = np.load(io.BytesIO(members[name][0]))
        if nodes["left_child"][0] != -1:
            break
    else:
        raise AssertionError(f"{path}: no tree whose root splits")
    values_name = state["values"]["file"]
    crafted = {"nodes": nodes, "values": np.load(io.BytesIO(members[values_name][0]))}
    crafted["node_count"] = int(state["node_count"]["content"])
    CASES[case][0](crafted)
    for key, member in (("nodes", name), ("values", values_name)):
        buffer = io.BytesIO()
        np.save(buffer, crafted[key])
        members[member] = (buffer.getvalue(), members[member][1])
    state["node_count"]["content"] = str(crafted["node_count"])
    members["schema.json"] = (json.dumps(schema).encode(), members["schema.json"][1])
    with zipfile.ZipFile(path, "w") as z:
        for member, (data, compression) in members.items():
            z.writestr(member, data, compress_type=compression)


def relist(manifest_path: Path, file: Path) -> None:
    """Record ``file``'s checksum and size in a manifest (a consistent hostile bundle)."""
    manifest = json.loads(manifest_path.read_text())
    manifest["files"][file.name] = sha256_file(file)
    manifest["file_sizes"][file.name] = file.stat().st_size
    manifest_path.write_text(json.dumps(manifest))


#: The child of :func:`scaledl_each`: reads ``[[key, args, stderr file], ...]`` as JSON from
#: stdin and runs ``scaledl ARGS`` for each in turn, fd 2 sent to the job's file, printing
#: ``start KEY`` before and ``end KEY CODE`` after (CODE: the exit status ``scaledl`` gives;
#: an uncaught exception prints its traceback and gives 1, as the interpreter does).
CHILD = """
import json, os, sys, traceback
from scaledl.cli import main
for key, args, stderr in json.load(sys.stdin):
    print("start", key, flush=True)
    saved, file = os.dup(2), open(stderr, "w")
    os.dup2(file.fileno(), 2)
    sys.argv, code = ["scaledl", *args], 0
    try:
        main()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
        if not isinstance(stop.code, int | None):
            print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stderr.flush()
    os.dup2(saved, 2)
    file.close()
    print("end", key, code, flush=True)
"""


def scaledl_each(jobs: dict, directory: Path, timeout: float = 300) -> dict:
    """``scaledl ARGS`` for each ``key: ARGS`` of ``jobs``, in as few subprocesses as may be.

    One child imports ``scaledl`` once and runs every job (:data:`CHILD`); a job that hangs
    past ``timeout`` seconds or crashes the child (a SIGSEGV) is recorded against that job
    alone and a new child runs the jobs left, so a hang or a crash fails its test, never
    pytest or the other jobs.

    Returns:
        ``key -> (exit status, stderr text)``; the status is None for a job that timed out
        and the negated signal for one that killed the child.
    """
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    stderr = {key: directory / f"stderr-{i}.txt" for i, key in enumerate(jobs)}
    results, left = {}, list(jobs)
    while left:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=env, cwd=REPO,
        )  # fmt: skip
        lines = queue.Queue()
        threading.Thread(target=_forward, args=(child.stdout, lines), daemon=True).start()
        child.stdin.write(json.dumps([[k, list(map(str, jobs[k])), str(stderr[k])] for k in left]))
        child.stdin.close()
        for key in list(left):
            try:
                line = lines.get(timeout=timeout)
                while line is not None and not line.startswith("end "):
                    line = lines.get(timeout=timeout)
            except queue.Empty:
                child.kill()
                child.wait()
                results[key] = (None, f"timed out after {timeout} s")
                left.remove(key)
                break
            if line is None:  # the child died inside this job
                results[key] = (child.wait(), stderr[key].read_text())
                left.remove(key)
                break
            assert line.split() == ["end", *key.split(), line.split()[-1]], line
            results[key] = (int(line.split()[-1]), stderr[key].read_text())
            left.remove(key)
        else:
            child.wait()
    return results


def _forward(stream, lines: queue.Queue) -> None:
    """Put each line of ``stream`` on ``lines``, then None at its end."""
    for line in stream:
        lines.put(line)
    lines.put(None)


def assert_refused(result: tuple, file: str, case: str) -> None:
    code, stderr = result
    assert code == 2, (code, stderr[-2000:])
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert file in lines[0]
    assert re.search(CASES[case][1], lines[0]), lines[0]


def workloads_file(directory: Path, rows: list[dict]) -> Path:
    path = directory / "workloads.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def kernel_bundle(tmp_path_factory):
    """A saved GPU predictor (synthetic profiles, tiny grid) and a workload row for it."""
    from gpu_synthetic import TINY_GRID, write_synthetic

    from scaledl.models.kernel import KernelGraphMethod
    from scaledl.registry import save_bundle

    directory, data = write_synthetic(tmp_path_factory.mktemp("gpu"))
    method = KernelGraphMethod(operator_params={"grid": TINY_GRID, "min_rows": 5}).fit(data, [])
    path = save_bundle(method, tmp_path_factory.mktemp("registry"), "scaledl-gpu", version="v1")
    return path, data.workloads[data.ids[0]].to_record()


#: bundle kind -> the file whose first splitting tree is crafted.
KINDS = ("cpu", "gpu", "layout")


@pytest.fixture(scope="module")
def refusals(registry_root, legacy_bundle, layout_calibration, kernel_bundle, tmp_path_factory):
    """``(kind, case) -> (file, (exit status, stderr))`` of ``scaledl predict`` on a crafted tree.

    Every kind of bundle (:data:`KINDS`) gets each case of :data:`CASES` in its own copy, its
    manifest made consistent again; all 12 predictions run by :func:`scaledl_each`.
    """
    from scaledl_fixtures import save_beside

    root = tmp_path_factory.mktemp("crafted")
    cpu = registry_root / "scaledl" / "v2"
    gpu, gpu_row = kernel_bundle
    calibrated = root / "calibrated"
    shutil.copytree(cpu, calibrated)
    calibration = save_beside(layout_calibration, calibrated).relative_to(calibrated)
    device = json.loads((cpu / "params.json").read_text())["training_devices"][0]
    layout_row = tiny_spec("bert", world_size=2, dp_size=1, tp_size=2, num_layers=2,
                           batch_size=4, device_name=device)  # fmt: skip
    sources = {  # kind -> (clean bundle, crafted file in it, workload row)
        "cpu": (legacy_bundle, Path("layerwise.skops"), tiny_spec("bert")),
        "gpu": (gpu, Path("operators.skops"), gpu_row),
        "layout": (calibrated, calibration / "layerwise.skops", layout_row),
    }
    jobs, files = {}, {}
    for kind, (source, file, row) in sources.items():
        (root / kind).mkdir()
        workloads = workloads_file(root / kind, [row])
        for i, case in enumerate(CASES):
            bundle = root / f"{kind}-{i}"
            shutil.copytree(source, bundle)
            craft(bundle / file, case)
            relist(bundle / file.parent / "manifest.json", bundle / file)
            key = f"{kind} {i}"
            jobs[key] = ("predict", "--predictor", bundle, "--workloads", workloads)
            files[kind, case] = (key, str(bundle / file) if kind == "layout" else file.name)
    results = scaledl_each(jobs, root)
    return {pair: (file, results[key]) for pair, (key, file) in files.items()}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("kind", KINDS)
def test_each_bundle_kind_with_a_crafted_tree_is_refused(refusals, kind, case):
    file, result = refusals[kind, case]
    assert_refused(result, file, case)
