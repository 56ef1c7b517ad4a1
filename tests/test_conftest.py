"""The xdist grouping of ``make test``'s parallel phase (tests/conftest.py)."""

from types import SimpleNamespace

import conftest


def test_a_test_is_grouped_with_its_module(request):
    groups = [mark.args[0] for mark in request.node.iter_markers("xdist_group")]
    assert groups == ["tests/test_conftest.py"]


def test_the_tests_of_the_shared_profile_share_one_group():
    for fixture in ("profiled", "registry_root"):
        item = SimpleNamespace(fixturenames=["tmp_path", fixture], nodeid="tests/a.py::test_x")
        assert conftest.xdist_group_of(item) == "shared-profile"
    plain = SimpleNamespace(fixturenames=["tmp_path"], nodeid="tests/b/test_y.py::test_z[1]")
    assert conftest.xdist_group_of(plain) == "tests/b/test_y.py"


def test_the_longest_groups_run_first():
    def item(nodeid, *fixtures):
        return SimpleNamespace(fixturenames=["tmp_path", *fixtures], nodeid=nodeid)

    slow = {"tests/slow.py"}
    assert conftest.run_order_of(item("tests/a.py::t", "profiled"), slow) == 0
    assert conftest.run_order_of(item("tests/slow.py::t"), slow) == 1
    assert conftest.run_order_of(item("tests/fast.py::t"), slow) == 2


def test_the_collection_is_in_run_order(request):
    items = request.session.items
    slow = {conftest.xdist_group_of(i) for i in items if i.get_closest_marker("slow")}
    orders = [conftest.run_order_of(i, slow) for i in items]
    assert orders == sorted(orders)


def test_the_pipeline_definitions_have_the_suites_shard_count():
    """The in-process pipeline tests profile the suite's shards (conftest), not make run's four."""
    import os

    from pipelines.defs.assets.profiling import N_SHARDS, shard_partitions
    from scaledl.profiling.shards import SHARDS_ENV

    assert N_SHARDS == int(os.environ[SHARDS_ENV])
    assert len(shard_partitions.get_partition_keys()) == N_SHARDS
