import pytest
from tiny_specs import tiny

from scaledl.prediction.ids import IdTemplate


@pytest.mark.parametrize("family", ["bert", "vit", "t5"])
def test_template_ids_are_the_workload_ids(family):
    base = tiny(family, world_size=2, num_nodes=1)
    template = IdTemplate(base, ("world_size", "batch_size", "dataset_size", "num_nodes"))
    values = [(1, 3, 10, 1), (4, 1, 123456789, 2), (2, 2, 8, 1)]
    got = template.ids(*zip(*values, strict=True))
    want = [
        base.model_copy(
            update={"world_size": ws, "batch_size": b, "dataset_size": d, "num_nodes": n}
        ).workload_id
        for ws, b, d, n in values
    ]
    assert got == want
    assert IdTemplate(base, ("dataset_size",)).ids([base.dataset_size]) == [base.workload_id]


def test_a_field_that_is_not_an_integer_is_refused():
    with pytest.raises(ValueError, match="'family' is not an integer field"):
        IdTemplate(tiny("bert"), ("family",))
