"""Parameters no layer unit calls (issue 28): given to the nearest unit, or a named error."""

import pytest
import torch
from tiny_specs import tiny

from scaledl.graph.tracing import UnitCall, _assign_params
from scaledl.graph.units import LayerUnit


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 4)  # a unit, called
        self.rel_embeddings = torch.nn.Embedding(3, 4)  # read as .weight by its parent


class Model(torch.nn.Module):
    def __init__(self, top_level: bool):
        super().__init__()
        self.encoder = Encoder()
        if top_level:
            self.scale = torch.nn.Parameter(torch.ones(5))


def calls_of(model):
    unit = LayerUnit("encoder.layer", "feed-forward", model.encoder.layer, 20, "")
    return [UnitCall(unit, 0, 1.0, 1, 2.0, 0, 0, "", "")]


def test_a_parameter_read_by_its_parent_goes_to_the_nearest_unit():
    model = Model(top_level=False)
    (call,) = _assign_params(calls_of(model), model, tiny("bert"))
    assert call.params == 20 + 12 == sum(p.numel() for p in model.parameters())


def test_a_top_level_parameter_is_an_unsupported_architecture_naming_the_module():
    model = Model(top_level=True)
    with pytest.raises(
        RuntimeError,
        match=r"unsupported architecture: parameter 'scale' of module '<model>' \(Model\)",
    ):
        _assign_params(calls_of(model), model, tiny("bert"))
