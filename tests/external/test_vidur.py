from pathlib import Path

import pytest

from scaledl.external.vidur import load_vidur_allreduce, load_vidur_send_recv

ROOT = Path(__file__).resolve().parents[2] / "external" / "vidur" / "network"
SYSTEMS = {"a100_dgx", "a100_pairwise_nvlink", "h100_dgx", "h100_pairwise_nvlink"}


@pytest.fixture(scope="module")
def df():
    return load_vidur_allreduce(ROOT)


def test_reads_all_systems_with_positive_values(df):
    assert set(df["system"]) == SYSTEMS
    num = ["allreduce_bytes", "world_size", "devices_per_node", "num_nodes", "allreduce_ms"]
    assert (df[num] > 0).all().all()
    assert (df["allreduce_ms_mean"] > 0).all() and (df["allreduce_ms_std"] >= 0).all()
    assert (df["world_size"] == df["devices_per_node"] * df["num_nodes"]).all()
    multi = df[df["num_nodes"] > 1]
    assert set(multi["system"]) == {"a100_dgx"} and multi["world_size"].max() == 16


def test_malformed_file_is_named(tmp_path):
    bad = tmp_path / "sys" / "all_reduce.csv"
    bad.parent.mkdir()
    bad.write_text("num_workers,size\n2,1024\n")
    with pytest.raises(ValueError, match="all_reduce.csv.*missing column"):
        load_vidur_allreduce(tmp_path)


@pytest.mark.parametrize(
    ("column", "value"),
    [("time_stats.all_reduce.median", "inf"), ("time_stats.all_reduce.mean", "nan")],
)
def test_a_non_finite_time_names_file_column_row_and_value(tmp_path, column, value):
    source = sorted(ROOT.glob("*/all_reduce.csv"))[0].read_text().splitlines()
    header = source[0].split(",")
    row = source[1].split(",")
    row[header.index(column)] = value
    bad = tmp_path / "sys" / "all_reduce.csv"
    bad.parent.mkdir()
    bad.write_text("\n".join([source[0], ",".join(row)]) + "\n")
    with pytest.raises(ValueError, match=rf"all_reduce.csv: column '{column}', row 0: .*{value}"):
        load_vidur_allreduce(tmp_path)


def test_bad_send_recv_file_names_file_row_and_column(tmp_path):
    folder = tmp_path / "x_dgx"
    folder.mkdir()
    (folder / "send_recv.csv").write_text(
        "time_stats.send_recv.median,size,num_workers,devices_per_node\n"
        "0.01,2048,2,2\n"
        "-1,4096,2,2\n"
    )
    with pytest.raises(ValueError, match=r"send_recv\.csv: row 2, column 'time_stats"):
        load_vidur_send_recv(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_vidur_send_recv(tmp_path / "missing")
