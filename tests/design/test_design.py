import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scaledl.design import (
    DesignError,
    DesignResult,
    augment_design,
    candidate_workloads,
    generate_design,
    load_preset,
    log_det_information,
    read_design,
    write_design,
)
from scaledl.design.features import model_matrix
from scaledl.design.matched import candidate_information
from scaledl.workloads.spec import Workload

pytestmark = pytest.mark.slow  # tens of seconds: handed out first in make test (conftest)


@pytest.fixture(scope="module")
def quick():
    return load_preset("quick")


@pytest.fixture(scope="module")
def quick_design(quick):
    return generate_design(quick, 72, seed=0, n_starts=1)  # the tracing, not the starts, costs


def test_doptimal_design_of_quick_preset(quick, quick_design):
    r = quick_design
    assert isinstance(r, DesignResult)
    t = r.table
    assert len(t) == 72 and t["workload_id"].is_unique
    assert list(t.columns[:2]) == ["workload_id", "family"]
    assert {"sampler", "seed", "log_det", "d_efficiency"} <= set(t.columns)
    assert (t["sampler"] == "doptimal").all() and (t["seed"] == 0).all()
    assert (t["log_det"] == r.log_det).all()
    assert set(t["family"]) == {"bert", "vit", "t5", "llama", "deit"}
    assert set(t["world_size"]) == {1, 2}
    assert r.n_candidates == len(candidate_workloads(quick, "cpu"))
    assert r.n_terms == len(r.terms) and r.terms[0] == "intercept"
    assert 0 < r.d_efficiency <= 1.5
    # log_det is that of the chosen workloads' model matrix (coded over all candidates)
    X, _ = model_matrix(candidate_workloads(quick, "cpu"), "full")
    ids = [w.workload_id for w in candidate_workloads(quick, "cpu")]
    rows = [ids.index(i) for i in t["workload_id"]]
    assert r.log_det == pytest.approx(log_det_information(X[rows]), abs=1e-6)


@pytest.fixture(scope="module")
def surface_design(quick):
    return generate_design(quick, 72, sampler="doptimal-surface", seed=0, n_starts=1)


def test_surface_doptimal_beats_random_and_lhs_on_its_determinant(quick, surface_design):
    for sampler in ("random", "lhs"):
        other = generate_design(quick, 72, sampler=sampler, seed=0)
        assert other.table["workload_id"].is_unique and len(other.table) == 72
        assert (other.table["sampler"] == sampler).all()
        assert surface_design.log_det > other.log_det + 5


def test_matched_doptimal_beats_random_on_the_matched_criterion(quick, quick_design):
    candidates = candidate_workloads(quick, "cpu")
    info = candidate_information(candidates)
    ids = [w.workload_id for w in candidates]
    assert quick_design.metadata["matched_criterion"] == pytest.approx(
        info.criterion([ids.index(i) for i in quick_design.table["workload_id"]])
    )
    other = generate_design(quick, 72, sampler="random", seed=0)
    random_value = info.criterion([ids.index(i) for i in other.table["workload_id"]])
    assert quick_design.metadata["matched_criterion"] > random_value


@pytest.mark.parametrize("sampler", ["doptimal", "doptimal-surface", "random", "lhs"])
def test_design_is_deterministic_for_a_seed(sampler):
    preset = load_preset("smoke")
    a = generate_design(preset, 12, sampler=sampler, seed=3, n_starts=2)
    b = generate_design(preset, 12, sampler=sampler, seed=3, n_starts=2)
    pd.testing.assert_frame_equal(a.table, b.table)
    c = generate_design(preset, 12, sampler=sampler, seed=4, n_starts=2)
    assert sampler.startswith("doptimal") or set(a.table["workload_id"]) != set(
        c.table["workload_id"]
    )


def test_augmentation_adds_only_new_workloads_and_never_lowers_the_det(quick, quick_design):
    existing = quick_design.table.iloc[:40]
    X, _ = model_matrix(
        [
            Workload.from_record(r)
            for r in existing.drop(
                columns=["workload_id", "sampler", "seed", "log_det", "d_efficiency"]
            ).to_dict("records")
        ]
        + candidate_workloads(quick, "cpu"),
        "full",
    )
    base = log_det_information(X[:40])
    r = augment_design(quick, existing, 12, seed=1, n_starts=2, criterion="surface")
    assert len(r.table) == 12 and r.n_fixed == 40
    assert not set(r.table["workload_id"]) & set(existing["workload_id"])
    assert (r.table["sampler"] == "doptimal-augment").all()
    assert r.log_det >= base
    assert r.metadata["log_det_existing"] == pytest.approx(base)
    # better than adding 12 random new candidates
    new = [
        w
        for w in candidate_workloads(quick, "cpu")
        if w.workload_id not in set(existing["workload_id"])
    ]
    rng = np.random.default_rng(0)
    random_lds = []
    for _ in range(10):
        pick = rng.choice(len(new), 12, replace=False)
        random_lds.append(log_det_information(np.vstack([X[:40], X[40:][pick]])))
    assert r.log_det > np.median(random_lds)


def test_matched_augmentation_and_the_sequential_step(quick, quick_design):
    existing = quick_design.table.iloc[:40]
    plain = augment_design(quick, existing, 6, seed=1, n_starts=1)
    assert (plain.table["sampler"] == "doptimal-augment").all()
    assert not set(plain.table["workload_id"]) & set(existing["workload_id"])
    seen = {}

    def uncertainty(new):
        seen["n"] = len(new)
        return np.linspace(0.01, 1.0, len(new))

    seq = augment_design(quick, existing, 6, seed=1, uncertainty=uncertainty)
    assert (seq.table["sampler"] == "sequential").all() and len(seq.table) == 6
    assert seen["n"] == seq.n_candidates
    assert set(seq.table["workload_id"]) != set(plain.table["workload_id"])
    with pytest.raises(DesignError, match="uncertainty needs criterion='matched'"):
        augment_design(quick, existing, 2, criterion="surface", uncertainty=uncertainty)


def test_augment_from_empty_or_duplicate_rows(quick_design):
    preset = load_preset("smoke")
    empty = quick_design.table.iloc[:0]
    r = augment_design(preset, empty, 10, n_starts=2)
    assert len(r.table) == 10 and r.n_fixed == 0
    first = generate_design(preset, 10, n_starts=2).table
    doubled = pd.concat([first, first])
    r2 = augment_design(preset, doubled, 4, n_starts=2)
    assert r2.n_fixed == 10 and not set(r2.table["workload_id"]) & set(first["workload_id"])


def test_augment_rejects_bad_existing_rows(quick_design):
    preset = load_preset("smoke")
    bad = quick_design.table.iloc[:3].copy()
    bad.loc[bad.index[1], "workload_id"] = "0" * 16
    with pytest.raises(DesignError, match="existing design row 1: workload_id '0{16}' does not"):
        augment_design(preset, bad, 2)
    bad = quick_design.table.iloc[:3].copy()
    bad.loc[bad.index[2], "batch_size"] = -1
    with pytest.raises(DesignError, match="existing design row 2: .*'batch_size'"):
        augment_design(preset, bad.drop(columns=["workload_id"]), 2)


def test_too_many_workloads_or_unknown_sampler_are_clear_errors():
    preset = load_preset("smoke")
    with pytest.raises(DesignError, match="cannot choose n=1000 workloads from 96 candidates"):
        generate_design(preset, 1000)
    with pytest.raises(DesignError, match="unknown sampler 'sobol'"):
        generate_design(preset, 5, sampler="sobol")
    with pytest.raises(DesignError, match="cannot estimate 10 model terms"):
        generate_design(preset, 5, sampler="doptimal-surface")
    # The matched criterion is ridge-regularised: fewer workloads than surface terms is a design.
    assert len(generate_design(preset, 5).table) == 5


def test_write_read_roundtrip_is_atomic_and_keeps_specs(tmp_path, quick_design):
    path = write_design(quick_design, tmp_path / "data" / "design" / "design.parquet")
    assert path.is_file()
    assert [p.name for p in path.parent.iterdir()] == ["design.parquet"]  # no temp file left
    table = read_design(path)
    assert len(table) == 72
    meta = table.attrs["design"]
    assert meta["log_det"] == pytest.approx(quick_design.log_det)
    assert meta["d_efficiency"] == pytest.approx(quick_design.d_efficiency)
    assert meta["terms"] == list(quick_design.terms)
    fields = list(Workload.model_fields)
    for record in table[["workload_id", *fields]].to_dict("records"):
        wid = record.pop("workload_id")
        assert Workload.from_record(record).workload_id == wid
    # overwrite in place
    write_design(quick_design, path)
    assert len(read_design(path)) == 72


def test_read_design_errors_name_the_file(tmp_path):
    with pytest.raises(DesignError, match="nothing.parquet: design file not found"):
        read_design(tmp_path / "nothing.parquet")
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(DesignError, match="corrupt.parquet: not a readable parquet"):
        read_design(corrupt)
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"workload_id": ["a"]}), other)
    with pytest.raises(DesignError, match=r"other.parquet: not a design table: missing column"):
        read_design(other)


def test_write_design_failure_names_the_file(tmp_path, quick_design):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DesignError, match="cannot write design"):
        write_design(quick_design, blocker / "design.parquet")
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
    assert os.listdir(tmp_path) == ["file"]
