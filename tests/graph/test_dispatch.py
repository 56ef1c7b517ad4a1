import pytest
import torch
from tiny_specs import FAMILIES, gpt2_config, tiny
from torch.utils.flop_counter import FlopCounterMode

from scaledl.graph import dispatch, tracing
from scaledl.graph.dispatch import OperatorRecorder, _signature
from scaledl.graph.tracing import trace_units
from scaledl.workloads.builders import build_model, make_batch

aten = torch.ops.aten


class PlainRecorder(OperatorRecorder):
    """The reference: every operator run through the FLOP counter, nothing memoised or bypassed."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.count += 1
        before = self.counter.get_total_flops()
        out = func(*args, **kwargs)
        self.flops += float(self.counter.get_total_flops() - before)
        self.records.append(dispatch._record(func, args, kwargs, out))
        return out


def workload_of(family, tmp_path):
    if family == "hf":
        return tiny("hf", gpt2_config(tmp_path, n_layer=3))
    return tiny(family, num_layers=3)  # three blocks: the second and third repeat the first


@pytest.mark.parametrize("family", [*FAMILIES, "hf"])
def test_a_memoised_trace_is_the_plain_trace(family, tmp_path, monkeypatch):
    w = workload_of(family, tmp_path)
    model = build_model(w, device="meta")
    memoised, _ = trace_units(w, model)
    monkeypatch.setattr(tracing, "OperatorRecorder", PlainRecorder)
    plain, _ = trace_units(w, model)
    assert len(memoised) == len(plain) > 0
    for a, b in zip(memoised, plain, strict=True):
        assert a == b  # unit, FLOPs, operator count, bytes, shapes, parameters and operators


@pytest.mark.parametrize("family", ["bert", "t5", "llama"])
def test_the_recorder_counts_the_flops_pytorch_counts_and_answers_repeats(family, tmp_path):
    w = workload_of(family, tmp_path)
    model = build_model(w, device="meta")
    batch = make_batch(w, device="meta")
    alone = FlopCounterMode(display=False)
    with alone, torch.no_grad():
        model(**batch)
    counter = FlopCounterMode(display=False)
    recorder = OperatorRecorder(counter)
    with counter, recorder, torch.no_grad():
        model(**batch)
    assert recorder.flops == alone.get_total_flops() > 0
    # The repeated blocks were answered from the memo: the counter ran fewer FLOPs itself.
    assert counter.get_total_flops() < recorder.flops
    assert 0 < len(recorder.memo) < recorder.count == len(recorder.records)


def test_what_is_not_memoised():
    meta = torch.empty(2, 3, device="meta")
    cpu = torch.ones(2, 3)
    assert _signature(aten.add.Tensor, (meta, meta), {}) is not None
    assert _signature(aten.add.Tensor, (meta, cpu), {}) is None  # values could matter
    assert _signature(aten.view.default, (meta, [6]), {}) is None  # an alias of its input
    assert _signature(aten.add_.Tensor, (meta, meta), {}) is None  # mutates its input
    assert _signature(aten.add.Tensor, (meta, meta), {"alpha": object()}) is None
    # True and 1 are different arguments; so are two strides of one shape.
    assert _signature(aten.sum.dim_IntList, (meta, [1], True), {}) != _signature(
        aten.sum.dim_IntList, (meta, [1], 1), {}
    )
    assert _signature(aten.add.Tensor, (meta, meta), {}) != _signature(
        aten.add.Tensor, (meta.t().contiguous().t(), meta), {}
    )
