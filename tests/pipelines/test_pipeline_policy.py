import numpy as np

from pipelines.defs.policy import decide_registration, held_out_ids
from scaledl.stats.significance import paired_comparison

BASE = np.linspace(0.05, 0.4, 30)


def _comparison(shift: float):
    """Candidate errors = current errors + shift (paired, so the verdict is certain)."""
    rng = np.random.default_rng(0)
    candidate = np.clip(BASE + shift + rng.normal(0, 0.005, BASE.size), 0, None)
    return paired_comparison(candidate, BASE, "candidate v2", "current v1")


def test_registers_when_nothing_is_registered():
    decision = decide_registration(has_current=False)
    assert decision.register and "no registered version" in decision.reason


def test_registers_a_better_or_indistinguishable_candidate():
    better = decide_registration(has_current=True, comparison=_comparison(-0.05))
    assert better.register and better.comparison.verdict == "better"
    same = decide_registration(has_current=True, comparison=_comparison(0.0))
    assert same.register and same.comparison.verdict == "not distinguishable"
    assert "registering" in same.reason and "CI" in same.reason


def test_keeps_the_current_version_when_the_candidate_is_worse_and_says_why():
    decision = decide_registration(has_current=True, comparison=_comparison(+0.05))
    assert not decision.register
    assert decision.comparison.verdict == "worse"
    assert "candidate v2 vs current v1" in decision.reason and "keeping" in decision.reason


def test_without_a_comparison_the_current_version_is_kept():
    decision = decide_registration(has_current=True, not_compared="1 held-out workload")
    assert not decision.register and "1 held-out workload" in decision.reason


def test_an_unusable_current_version_is_replaced():
    decision = decide_registration(has_current=True, current_unusable="checksum mismatch")
    assert decision.register and "checksum mismatch" in decision.reason


def test_held_out_ids_exclude_both_training_sets_in_order():
    assert held_out_ids(["a", "b", "c", "d", "e"], ["a", "b"], ["b", "d"]) == ["c", "e"]
    assert held_out_ids(["a", "b", "c"], ["a"], []) == ["b", "c"]
