"""Structure checks of every scikit-learn tree a bundle loads, before any prediction.

skops builds a ``sklearn.tree._tree.Tree`` from the node array of the file, and scikit-learn
checks only the array's dtype and shape: prediction then walks the nodes in C with no bounds
checks. A split node whose child is itself hangs ``predict`` (Ctrl-C cannot stop the loop), a
child or feature index out of range reads outside its array (SIGSEGV), and a ``node_count``
above the array's length does so as soon as anything reads the nodes. :func:`check_trees`
walks every object a bundle file loads (mappings, sequences, object arrays, estimators'
attributes: ensembles, pipelines, wrappers) and refuses a tree unless:

* ``node_count`` is in ``[1, MAX_TREE_NODES]`` and at most the node array's length (checked
  before the nodes are read);
* every node is a leaf (both children ``-1``) or a split (both children valid), each child's
  index is above its parent's (scikit-learn numbers nodes depth-first, so every fitted tree
  passes and no cycle can), and every node but the root has exactly one parent, so each is
  reached exactly once from the root;
* a split's feature is in ``[0, n)``, ``n`` the least of the tree's ``n_features``, its
  estimator's ``n_features_in_`` and that of an ensemble holding the estimator in
  ``estimators_`` (gradient boosting walks its trees with its own input's columns); thresholds
  and values are finite, and the value array has shape ``(node_count, n_outputs,
  max_n_classes)``;
* a gradient-boosting ensemble's ``learning_rate`` is in ``(0, MAX_LEARNING_RATE]`` and its
  ``init_`` constant finite (prediction scales and offsets every tree by them), and its
  ``estimators_`` has one column per tree of an iteration
  (``n_trees_per_iteration_``) of single-output trees: its prediction writes column ``k`` of
  that many and reads one value per node.

:func:`check_tree_arrays` is the node-array part, shared with the NumPy form of the layer-wise
models (:mod:`scaledl.registry.layer_arrays`). Every check is vectorised (NumPy): on a 2-core
host loaded 7x over, a tree of 64,000 nodes took 0.13 s and the 160 trees of a GPU bundle's
operator models 0.06 s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scaledl.io.excerpt import excerpt

#: Most nodes a tree may have: a full binary tree of depth 15. The product's deepest trees
#: have depth 4 (31 nodes: the operator models' grid, :mod:`scaledl.models.operators`); the
#: bound keeps a crafted count from making the check itself, or a prediction, allocate or
#: walk without limit.
MAX_TREE_NODES = 2**16 - 1
#: Most objects :func:`check_trees` visits in one file: far above the product's largest
#: (a GPU bundle's operators, some thousands of trees and their estimators).
MAX_OBJECTS = 2_000_000
#: Largest learning rate a boosting ensemble may carry: scikit-learn's default is 0.1 and the
#: product's grids stay below 1; a NaN or a huge rate would make every prediction NaN or inf.
MAX_LEARNING_RATE = 10.0
_LEAF = -1


class TreeStructureError(ValueError):
    """A loaded tree whose structure prediction cannot walk safely (names file, tree, node)."""


def check_trees(loaded: Any, source: str) -> int:
    """Check the structure of every tree reachable from a loaded object (module docstring).

    Args:
        loaded: what a skops file loaded (a mapping of estimators, an estimator...).
        source: the file, named in errors.

    Returns:
        The number of trees checked.

    Raises:
        TreeStructureError: naming ``source``, the estimator's path in ``loaded``, the node,
            the field and the value.
    """
    # scikit-learn on use: `import scaledl.registry` stays cheap (like the loaders).
    from sklearn.ensemble._gb import BaseGradientBoosting
    from sklearn.tree._tree import Tree

    checked = 0
    seen: set[int] = set()
    # (object, its path, the nearest estimator above it, n_features bound from ensembles)
    stack: list[tuple[Any, str, Any, int | None]] = [(loaded, "", None, None)]
    while stack:
        obj, where, owner, bound = stack.pop()
        if id(obj) in seen or obj is None or isinstance(obj, str | bytes | int | float | bool):
            continue
        seen.add(id(obj))
        if len(seen) > MAX_OBJECTS:
            raise TreeStructureError(f"{source}: more than {MAX_OBJECTS:,} objects; refused")
        if isinstance(obj, Tree):
            _check_tree(obj, f"{source}: {where or 'tree'}", owner, bound)
            checked += 1
            continue
        if isinstance(obj, dict):
            children = [(v, f"{where}[{excerpt(k)}]") for k, v in obj.items()]
        elif isinstance(obj, list | tuple):
            children = [(v, f"{where}[{i}]") for i, v in enumerate(obj)]
        elif isinstance(obj, np.ndarray):
            if obj.dtype != object:
                continue
            children = [(v, f"{where}[{', '.join(map(str, i))}]") for i, v in np.ndenumerate(obj)]
        elif hasattr(obj, "__dict__"):
            children = [(v, f"{where}.{k}") for k, v in vars(obj).items()]
            if isinstance(obj, BaseGradientBoosting):
                _check_boosting(obj, f"{source}: {where or 'estimator'}")
            owner, inner = obj, _n_features(obj, f"{source}: {where}")
            members = obj.__dict__.get("estimators_")
            if inner is not None:  # what an ensemble hands its members (estimators_)
                members_bound = inner if bound is None else min(bound, inner)
                stack.extend(
                    (v, w, owner, members_bound if v is members else bound) for v, w in children
                )
                continue
        else:
            continue
        stack.extend((v, w, owner, bound) for v, w in children)
    return checked


def _n_features(estimator: Any, where: str) -> int | None:
    """An estimator's ``n_features_in_`` (``None``: not recorded), checked a positive int."""
    n = estimator.__dict__.get("n_features_in_")
    if n is None:
        return None
    if not isinstance(n, int | np.integer) or isinstance(n, bool) or not 0 < n <= 2**31:
        raise TreeStructureError(
            f"{where}: field 'n_features_in_' (value {excerpt(n)}): not a count of features"
        )
    return int(n)


def _check_boosting(model: Any, where: str) -> None:
    """A gradient-boosting ensemble's ``estimators_``: (stages, trees per iteration) of trees."""
    from sklearn.tree import DecisionTreeRegressor  # scikit-learn on use (check_trees)

    rate = model.__dict__.get("learning_rate")  # prediction scales every stage by it
    if (
        not isinstance(rate, int | float | np.number)
        or isinstance(rate, bool)
        or not (0 < float(rate) <= MAX_LEARNING_RATE)
    ):
        raise TreeStructureError(
            f"{where}: field 'learning_rate' (value {excerpt(rate)}): not a number in "
            f"(0, {MAX_LEARNING_RATE}]"
        )
    init = model.__dict__.get("init_")
    constant = getattr(init, "__dict__", {}).get("constant_")
    if constant is not None and not np.isfinite(np.asarray(constant, dtype=float)).all():
        raise TreeStructureError(
            f"{where}: field 'init_.constant_' (value {excerpt(constant)}): not finite"
        )
    estimators = model.__dict__.get("estimators_")
    if estimators is None:
        return
    per_iteration = model.__dict__.get("n_trees_per_iteration_")
    if (
        not isinstance(estimators, np.ndarray)
        or estimators.dtype != object
        or estimators.ndim != 2
        or estimators.shape[1] != per_iteration
    ):
        shape = getattr(estimators, "shape", type(estimators).__name__)
        raise TreeStructureError(
            f"{where}: field 'estimators_' (shape {excerpt(shape)}): expected an object array "
            f"of (stages, n_trees_per_iteration_={excerpt(per_iteration)})"
        )
    for index, member in np.ndenumerate(estimators):
        tree = getattr(member, "__dict__", {}).get("tree_")
        if not isinstance(member, DecisionTreeRegressor) or tree is None:
            raise TreeStructureError(
                f"{where}.estimators_[{', '.join(map(str, index))}]: not a fitted "
                f"DecisionTreeRegressor (a {type(member).__name__})"
            )
        if tree.n_outputs != 1 or tree.max_n_classes != 1:
            raise TreeStructureError(
                f"{where}.estimators_[{', '.join(map(str, index))}].tree_: fields 'n_outputs', "
                f"'max_n_classes' (values {tree.n_outputs}, {tree.max_n_classes}): a boosting "
                "tree has one value per node"
            )


def _check_tree(tree: Any, where: str, owner: Any, bound: int | None) -> None:
    """One tree (module docstring); ``owner``: the estimator holding it, ``bound``: ensembles'."""
    count, capacity = int(tree.node_count), int(tree.capacity)
    if not 1 <= count <= MAX_TREE_NODES:
        raise TreeStructureError(
            f"{where}: field 'node_count' (value {count}): not in [1, {MAX_TREE_NODES}]"
        )
    if count > capacity:
        raise TreeStructureError(
            f"{where}: field 'node_count' (value {count}): more than the {capacity} nodes stored"
        )
    n_features = int(tree.n_features)
    for n in (_n_features(owner, where) if owner is not None else None, bound):
        n_features = n_features if n is None else min(n_features, n)
    value = tree.value
    expected = (count, int(tree.n_outputs), int(tree.max_n_classes))
    if value.shape != expected:
        raise TreeStructureError(
            f"{where}: field 'value' (shape {value.shape}): expected {expected} "
            "(node_count, n_outputs, max_n_classes)"
        )
    check_tree_arrays(
        where,
        tree.children_left[:count],
        tree.children_right[:count],
        tree.feature[:count],
        tree.threshold[:count],
        value.reshape(count, -1),
        n_features,
    )
    outputs = getattr(owner, "__dict__", {}).get("n_outputs_")
    if outputs is not None and outputs != expected[1]:
        raise TreeStructureError(
            f"{where}: field 'n_outputs' (value {expected[1]}): its estimator's n_outputs_ "
            f"is {excerpt(outputs)}"
        )


def check_tree_arrays(
    where: str,
    left: np.ndarray,
    right: np.ndarray,
    feature: np.ndarray,
    threshold: np.ndarray,
    value: np.ndarray,
    n_features: int,
) -> None:
    """Check one tree's node arrays (module docstring): what every tree check shares.

    Args:
        where: the file and tree, named in errors.
        left: left child of each node (``-1`` at a leaf), shape (node_count,).
        right: right child of each node, shape (node_count,).
        feature: the column each split reads, shape (node_count,).
        threshold: each split's threshold, shape (node_count,).
        value: each node's values, shape (node_count, k).
        n_features: the columns the tree's input has (a split's feature is below it).

    Raises:
        TreeStructureError: naming ``where``, the node, the field and the value.
    """
    count = len(left)
    leaf = left == _LEAF
    mixed = np.flatnonzero(leaf != (right == _LEAF))
    if mixed.size:
        node = int(mixed[0])
        raise TreeStructureError(
            f"{where}: node {node} fields 'children_left', 'children_right' (values "
            f"{int(left[node])}, {int(right[node])}): a leaf has both -1, a split neither"
        )
    split = np.flatnonzero(~leaf)
    for name, child in (("children_left", left), ("children_right", right)):
        bad = split[(child[split] <= split) | (child[split] >= count)]
        if bad.size:
            node = int(bad[0])
            raise TreeStructureError(
                f"{where}: node {node} field {name!r} (value {int(child[node])}): a child must "
                f"lie after its parent and below node_count {count} (a cycle or out of range)"
            )
    parents = np.bincount(np.concatenate([left[split], right[split]]), minlength=count)
    orphan = np.flatnonzero(parents[1:] != 1) + 1
    if parents[0] or orphan.size:
        node = 0 if parents[0] else int(orphan[0])
        raise TreeStructureError(
            f"{where}: node {node} is reached {int(parents[node])} times from the root "
            f"(expected {0 if node == 0 else 1})"
        )
    bad = split[(feature[split] < 0) | (feature[split] >= n_features)]
    if bad.size:
        node = int(bad[0])
        raise TreeStructureError(
            f"{where}: node {node} field 'feature' (value {int(feature[node])}): not in "
            f"[0, {n_features}) (the features the estimator reads)"
        )
    bad = np.flatnonzero(~np.isfinite(threshold))
    if bad.size:
        node = int(bad[0])
        raise TreeStructureError(
            f"{where}: node {node} field 'threshold' (value {threshold[node]}): not finite"
        )
    bad = np.flatnonzero(~np.isfinite(value).reshape(count, -1).all(axis=1))
    if bad.size:
        node = int(bad[0])
        raise TreeStructureError(
            f"{where}: node {node} field 'value' (value {excerpt(value[node].tolist())}): "
            "not finite"
        )
