"""Tests of the hierarchical collective model (NVLink domains, NICs between them)."""

import pytest

from scaledl.parallel.llm_collectives import (
    OPS,
    CommGroup,
    evaluate_network_model,
    network_model,
    peak_network_model,
)

H100 = "NVIDIA H100 80GB HBM3"


def test_peak_model_is_the_textbook_ring_on_datasheet_bandwidths():
    peak = peak_network_model(H100)
    n = 1e9
    assert peak.collective_s("all_reduce", n, CommGroup(8, 8)) == pytest.approx(
        2 * 7 / 8 * n / 450e9
    )
    assert peak.collective_s("all_gather", n, CommGroup(8, 8)) == pytest.approx(7 / 8 * n / 450e9)
    # two nodes, 8 ranks each: 8 NICs of 50 GB/s = 400 GB/s < NVLink 450 GB/s
    assert peak.collective_s("all_reduce", n, CommGroup(16, 8)) == pytest.approx(
        2 * 15 / 16 * n / 400e9
    )
    # one rank per node: one NIC
    assert peak.collective_s("reduce_scatter", n, CommGroup(4, 1)) == pytest.approx(
        3 / 4 * n / 50e9
    )
    assert peak.collective_s("send_recv", n, CommGroup(2, 1)) == pytest.approx(n / 50e9)
    assert peak.collective_s("send_recv", n, CommGroup(2, 2)) == pytest.approx(n / 450e9)


def test_measured_model_is_slower_than_peak_and_grows_with_span():
    model, peak = network_model(H100), peak_network_model(H100)
    n = 256e6
    for op in OPS:
        for group in (CommGroup(8, 8), CommGroup(64, 8), CommGroup(32, 1)):
            assert model.collective_s(op, n, group) > peak.collective_s(op, n, group)
    inside = model.collective_s("all_reduce", n, CommGroup(8, 8))
    across = model.collective_s("all_reduce", n, CommGroup(8, 1))
    assert across > 4 * inside
    assert model.collective_s("all_reduce", n, CommGroup(1, 1)) == 0.0


def test_nvl72_keeps_a_72_gpu_group_on_nvlink():
    gb200 = network_model("GB200 (NVL72)")
    assert gb200.nvlink_domain_size == 72
    inside = gb200.collective_s("all_reduce", 1e9, CommGroup(72, 72))
    hgx = network_model("NVIDIA B200")
    assert inside < hgx.collective_s("all_reduce", 1e9, CommGroup(72, 8))
    with pytest.raises(ValueError, match="domain"):
        hgx.collective_s("all_reduce", 1e9, CommGroup(16, 16))
    assert network_model("NVIDIA B200", 16).collective_s("all_reduce", 1e9, CommGroup(16, 16))


def test_fit_errors_on_vidur_measurements():
    result = evaluate_network_model().set_index("set")
    assert result.loc["h100_dgx all_reduce 1 node", "mre_held_out"] < 0.2
    assert result.loc["h100_dgx send_recv 2 node(s)", "mre_held_out"] < 0.1
    assert 0.5 < result.loc["h100_dgx all_reduce 1 node", "efficiency"] <= 1.0


def test_bad_groups_and_ops_are_refused():
    model = network_model(H100)
    with pytest.raises(ValueError, match="ranks_per_domain"):
        CommGroup(8, 9)
    assert CommGroup(12, 8).domains == 2
    with pytest.raises(ValueError, match="size"):
        CommGroup(0, 1)
    with pytest.raises(ValueError, match="op must be"):
        model.collective_s("broadcast", 1.0, CommGroup(2, 2))
    with pytest.raises(ValueError, match="message_bytes"):
        model.collective_s("all_reduce", -1.0, CommGroup(2, 2))
    with pytest.raises(ValueError, match="nvlink"):
        network_model("NVIDIA A100-PCIE-40GB")


def test_links_have_size_regimes_and_small_messages_are_latency_bound():
    link = network_model(H100).fit.nvlink
    assert link.small, "NCCL's protocols give the fitted link more than one regime"
    bounds = [upper for upper, _, _ in link.small]
    assert bounds == sorted(bounds)
    assert link.at(1e12) == (link.alpha_s, link.efficiency)
    model = network_model(H100)
    tiny = model.collective_s("all_reduce", 2048, CommGroup(8, 8))
    assert 1e-6 < tiny < 1e-4  # a few tens of microseconds, as Vidur measured


def test_groups_that_straddle_domains_count_whole_domains():
    peak = peak_network_model(H100)
    # 12 ranks, 8 per domain: two domains, so the NICs (8 x 50 GB/s) carry the ring
    assert peak.collective_s("all_reduce", 1e9, CommGroup(12, 8)) == pytest.approx(
        2 * 11 / 12 * 1e9 / 400e9
    )


def test_a_clusters_own_network_bandwidth_replaces_the_tables():
    """A job's ``network_gbps`` (IBM's 400 Gb/s A100 cluster: 6.25 GB/s per GPU) sets the NICs."""
    table, slow = peak_network_model(H100), peak_network_model(H100, None, 6.25)
    n = 1e9
    assert slow.collective_s("reduce_scatter", n, CommGroup(4, 1)) == pytest.approx(
        3 / 4 * n / 6.25e9
    )
    # inside one NVLink domain the NICs play no part
    inside = CommGroup(8, 8)
    assert slow.collective_s("all_reduce", n, inside) == table.collective_s("all_reduce", n, inside)
    assert network_model(H100, None, 6.25).collective_s("all_reduce", n, CommGroup(16, 8)) > (
        network_model(H100).collective_s("all_reduce", n, CommGroup(16, 8))
    )
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="network_gbps"):
            peak_network_model(H100, None, bad)
