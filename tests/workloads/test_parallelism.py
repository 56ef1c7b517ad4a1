"""The layout fields of a workload: derivation, validation, identity of plain-DDP workloads."""

from __future__ import annotations

import pandas as pd
import pytest

from scaledl.workloads.fields import WorkloadError
from scaledl.workloads.identity import architecture_key
from scaledl.workloads.parallelism import LAYOUT_FIELDS, is_data_parallel, layout_label
from scaledl.workloads.spec import Workload

BERT = dict(
    family="bert",
    hidden_size=128,
    num_layers=4,
    num_heads=4,
    intermediate_size=512,
    vocab_size=1000,
    seq_len=64,
    batch_size=8,
    device_name="cpu:test",
)


def test_plain_ddp_keeps_its_id_and_row():
    w = Workload.parse({**BERT, "world_size": 2})
    assert w.dp_size == 2 and is_data_parallel(w)
    # The id of this spec before layout fields existed (computed on main aa7cfe0).
    assert w.workload_id == "2344524a91602fcb"
    assert not set(LAYOUT_FIELDS) & set(w.to_record())


def test_sizes_derive_each_other():
    tp = Workload.parse({**BERT, "world_size": 4, "tp_size": 2})
    assert (tp.dp_size, tp.global_batch_size, layout_label(tp)) == (2, 16, "dp2-tp2")
    pp = Workload.parse({**BERT, "pp_size": 2, "micro_batches": 4, "pipeline_schedule": "gpipe"})
    assert (pp.world_size, pp.dp_size, layout_label(pp)) == (2, 1, "pp2-gpipe-m4")
    fsdp = Workload.parse({**BERT, "dp_size": 2, "sharding": "zero3"})
    assert (fsdp.world_size, fsdp.sharding, layout_label(fsdp)) == (2, "fsdp", "dp2-fsdp")
    assert fsdp.steps_per_epoch == -(-fsdp.dataset_size // 16)


@pytest.mark.parametrize("world", ["2", "2.0", " 2 "])
def test_sizes_given_as_strings_derive_as_numbers(world):
    """A parquet of string columns: world_size "2" is two data-parallel ranks, not one."""
    w = Workload.parse({**{k: str(v) for k, v in BERT.items()}, "world_size": world})
    ddp = Workload.parse({**BERT, "world_size": 2})
    assert (w.world_size, w.dp_size, w.global_batch_size) == (2, 2, 16)
    assert w.workload_id == ddp.workload_id and w.steps_per_epoch == ddp.steps_per_epoch
    tp = Workload.parse({**BERT, "world_size": "4", "tp_size": "2"})
    assert (tp.dp_size, layout_label(tp)) == (2, "dp2-tp2")


def test_layout_row_round_trips_through_a_mixed_table():
    rows = [
        Workload.parse({**BERT, "world_size": 2}).to_record(),
        Workload.parse({**BERT, "world_size": 2, "tp_size": 2}).to_record(),
    ]
    table = pd.DataFrame(rows)  # the DDP row's layout cells are NaN, the sizes floats
    back = [Workload.from_record(r, "t.csv") for r in table.to_dict("records")]
    assert [b.workload_id for b in back] == [r["workload_id"] for r in rows]
    assert back[1].tp_size == 2 and back[0].tp_size == 1


def test_layout_does_not_change_the_architecture_key():
    ddp = Workload.parse({**BERT, "world_size": 2})
    tp = Workload.parse({**BERT, "world_size": 2, "tp_size": 2})
    assert architecture_key(ddp) == architecture_key(tp)
    assert ddp.workload_id != tp.workload_id


@pytest.mark.parametrize(
    ("fields", "field", "text"),
    [
        ({"world_size": 3, "tp_size": 2}, "world_size", "not divisible by tp_size * pp_size"),
        ({"world_size": 2, "dp_size": 1}, "world_size", "must equal dp_size * tp_size"),
        ({"tp_size": 3}, "tp_size", "must divide num_heads=4"),
        ({"tp_size": 2, "intermediate_size": 511}, "tp_size", "intermediate_size=511"),
        ({"pp_size": 3}, "pp_size", "must divide the 4 blocks"),
        ({"pp_size": 2, "micro_batches": 3}, "micro_batches", "must divide batch_size=8"),
        ({"micro_batches": 2}, "micro_batches", "needs pipeline parallelism"),
        ({"sharding": "fsdp"}, "sharding", "dp_size=1"),
        ({"world_size": 2, "sharding": "zero2", "mode": "infer"}, "sharding", "mode='infer'"),
        ({"sharding": "zero9"}, "sharding", "'zero9'"),
        ({"pipeline_schedule": "interleaved"}, "pipeline_schedule", "'interleaved'"),
    ],
)
def test_bad_layout_names_the_field(fields, field, text):
    with pytest.raises(WorkloadError) as err:
        Workload.parse({**BERT, **fields}, source="layouts.yaml")
    message = str(err.value)
    assert message.startswith("layouts.yaml: invalid workload")
    assert f"field {field!r}" in message and text in message


def test_zero_size_is_one_error():
    with pytest.raises(WorkloadError) as err:
        Workload.parse({**BERT, "tp_size": 0})
    assert "tp_size" in str(err.value) and "dp_size" not in str(err.value)
