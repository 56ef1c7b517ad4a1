"""The design check scores subsets of the real 15-workload slice for the layer-wise models."""

import numpy as np
import pytest

from scaledl.evaluation.design_check import DesignCheck


@pytest.fixture(scope="module")
def check(profile_data):
    families = [profile_data.workloads[w].family for w in profile_data.ids]
    worlds = [profile_data.workloads[w].world_size for w in profile_data.ids]
    return DesignCheck(profile_data.nodes, families, worlds), np.array(families)


def test_the_reference_scores_one(check, profile_data):
    dc, _ = check
    everything = np.arange(len(profile_data.ids))
    assert dc.layer_types and "attention" in dc.layer_types
    assert dc.layerwise_d_efficiency(everything) == pytest.approx(1.0)
    assert dc.family_world_coverage(everything) == 1.0


def test_one_family_misses_the_others_layer_types_and_cells(check):
    dc, families = check
    bert = np.flatnonzero(families == "bert")
    # The vision patch embedding (and other family-only types) cannot be estimated from BERT.
    assert 0 < dc.layerwise_d_efficiency(bert) < 1
    assert dc.family_world_coverage(bert) <= 1 / len(set(families)) + 1e-12


def test_a_spread_over_families_informs_more_than_one_family_of_the_same_size(check):
    dc, families = check
    bert = np.flatnonzero(families == "bert")
    spread = np.concatenate([np.flatnonzero(families == f)[:2] for f in sorted(set(families))])
    spread = spread[: len(bert)]
    assert len(spread) == len(bert)
    assert dc.layerwise_d_efficiency(bert) < dc.layerwise_d_efficiency(spread)
    assert dc.family_world_coverage(bert) < dc.family_world_coverage(spread)
