import pytest
from tiny_specs import tiny

from scaledl.profiling.layout_models import check_supported


def test_one_f_one_b_needs_as_many_micro_batches_as_stages():
    # torch.distributed.pipelining's Schedule1F1B raises for micro_batches < pp_size.
    short = tiny("bert", num_layers=2, batch_size=4, world_size=2, pp_size=2, micro_batches=1,
                 pipeline_schedule="1f1b")  # fmt: skip
    with pytest.raises(ValueError, match=r"'pipeline_schedule'.*micro_batches=1 < pp_size=2"):
        check_supported(short)
    for schedule, m in (("gpipe", 1), ("1f1b", 2)):
        check_supported(tiny("bert", num_layers=2, batch_size=4, world_size=2, pp_size=2,
                             micro_batches=m, pipeline_schedule=schedule))  # fmt: skip


def test_two_dimensional_layouts_name_the_field():
    both = tiny("bert", num_layers=2, world_size=4, dp_size=2, tp_size=2)
    with pytest.raises(ValueError, match="'tp_size'.*2-D layouts"):
        check_supported(both)
