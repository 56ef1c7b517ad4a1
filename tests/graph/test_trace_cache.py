import logging

import pandas as pd
import pytest
from tiny_specs import tiny

from scaledl.graph import features, trace_cache
from scaledl.graph.features import build_graph_set


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty trace cache in tmp_path, and no trace in memory (restored after)."""
    monkeypatch.setenv(trace_cache.ENV_VAR, str(tmp_path))
    features._templates.cache_clear()
    yield tmp_path
    features._templates.cache_clear()


def graphs(workloads):
    gs = build_graph_set(workloads)
    return gs.nodes, gs.edge_index, gs.edge_type


def no_tracing(monkeypatch):
    def refuse(key):
        raise AssertionError("traced although cached")

    monkeypatch.setattr(features, "_graphs_at_batch_1_and_2", refuse)


def test_a_fresh_process_reads_the_traces_instead_of_tracing(cache, monkeypatch):
    workloads = [tiny("bert", world_size=2, batch_size=3), tiny("vit"), tiny("t5")]
    traced = graphs(workloads)
    entries = list(cache.rglob("*.npz"))
    assert len(entries) == 3
    features._templates.cache_clear()  # as a new process
    no_tracing(monkeypatch)
    cached = graphs(workloads)
    pd.testing.assert_frame_equal(cached[0], traced[0])
    assert (cached[1] == traced[1]).all() and (cached[2] == traced[2]).all()


def test_an_unreadable_entry_is_traced_again(cache, caplog):
    workloads = [tiny("bert")]
    traced = graphs(workloads)
    (entry,) = cache.rglob("*.npz")
    entry.write_bytes(b"truncated")
    features._templates.cache_clear()
    with caplog.at_level(logging.WARNING, logger=trace_cache.__name__):
        again = graphs(workloads)
    assert "unreadable" in caplog.text
    pd.testing.assert_frame_equal(again[0], traced[0])
    assert entry.stat().st_size > 100  # rewritten whole


def test_off_and_an_unwritable_folder_predict_without_a_cache(cache, monkeypatch, caplog):
    monkeypatch.setenv(trace_cache.ENV_VAR, "off")
    graphs([tiny("bert")])
    assert not list(cache.rglob("*"))
    blocker = cache / "file"
    blocker.write_text("")
    monkeypatch.setenv(trace_cache.ENV_VAR, str(blocker / "sub"))
    features._templates.cache_clear()
    monkeypatch.setitem(trace_cache._state, "warned", False)
    with caplog.at_level(logging.WARNING, logger=trace_cache.__name__):
        graphs([tiny("vit")])
    assert "cannot write" in caplog.text


def test_the_folder_is_keyed_by_the_graph_code(cache, monkeypatch):
    first = trace_cache.cache_folder()
    monkeypatch.setitem(trace_cache._state, "digest", None)
    monkeypatch.setattr(trace_cache, "CACHE_FORMAT", trace_cache.CACHE_FORMAT + 1)
    assert trace_cache.cache_folder() != first
    assert first.parent == cache
