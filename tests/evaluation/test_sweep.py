from scaledl.evaluation.sweep import sweep_workloads


def test_sweep_copies_vary_one_field(profile_data):
    base = profile_data.workloads[profile_data.ids[0]]
    copies = sweep_workloads(base, "batch_size", [1, 2, 4])
    assert [w.batch_size for w in copies] == [1, 2, 4]
    assert {w.seq_len for w in copies} == {base.seq_len}
    assert len({w.workload_id for w in copies}) == 3
