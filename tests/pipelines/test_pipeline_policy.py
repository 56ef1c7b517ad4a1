import math

import pytest

from pipelines.defs.policy import decide_registration, ood_mre


def test_registers_when_nothing_is_registered():
    decision = decide_registration(0.3, None)
    assert decision.register
    assert "no current version" in decision.reason


def test_registers_when_not_worse():
    assert decide_registration(0.10, 0.12).register
    assert decide_registration(0.12, 0.12).register


def test_keeps_current_when_worse_and_says_why():
    decision = decide_registration(0.15, 0.12)
    assert not decision.register
    assert "worse" in decision.reason and "0.15" in decision.reason and "0.12" in decision.reason
    assert decision.candidate_mre == 0.15 and decision.current_mre == 0.12


def test_tolerance_allows_a_small_increase():
    assert decide_registration(0.125, 0.12, tolerance=0.05).register
    assert not decide_registration(0.127, 0.12, tolerance=0.05).register


def test_non_finite_candidate_never_replaces_a_finite_current():
    for bad in (None, math.nan, math.inf, "x"):
        assert not decide_registration(bad, 0.2).register


def test_non_finite_current_is_replaced():
    assert decide_registration(0.4, math.nan).register


def test_negative_tolerance_is_rejected():
    with pytest.raises(ValueError, match="tolerance"):
        decide_registration(0.1, 0.1, tolerance=-0.1)


def test_ood_mre_reads_compact_and_full_metrics():
    assert ood_mre({"ood_mre": 0.2}) == 0.2
    full = {"splits": {"ood": {"mean": {"scaledl": {"mre": 0.3}, "roofline": {"mre": 0.9}}}}}
    assert ood_mre(full) == 0.3
    assert ood_mre(full, method="roofline") == 0.9
    assert ood_mre({"splits": {}}) is None
    assert ood_mre(None) is None
