import pytest
import torch
from tiny_specs import SPECS

from scaledl.graph.layer_graph import build_layer_graph
from scaledl.graph.units import find_units
from scaledl.profiling.instrument import LayerInstrument
from scaledl.profiling.timers import Clock
from scaledl.workloads.builders import build_model, make_batch, training_loss
from scaledl.workloads.spec import Workload


def timed_step(workload: Workload, steps: int = 2):
    torch.manual_seed(0)
    model = build_model(workload)
    units = find_units(model)
    clock = Clock(torch.device("cpu"))
    batch = make_batch(workload, generator=torch.Generator().manual_seed(0))
    train = workload.mode == "train"
    with LayerInstrument(units, clock, backward=train) as inst:
        for _ in range(steps):
            inst.start_step()
            start = clock.mark()
            if train:
                training_loss(model(**batch)).backward()
            else:
                with torch.inference_mode():
                    model(**batch)
            rows = inst.layer_times_ms(step_start=start, backward_end=clock.mark())
    return model, rows


@pytest.mark.parametrize("family", ["bert", "vit"])
def test_train_times_every_layer_call(family):
    w = Workload.parse(SPECS[family])
    model, rows = timed_step(w)
    layers = build_layer_graph(w).layers
    assert len(rows) == len(layers)
    assert [r["layer_index"] for r in rows] == list(range(len(layers)))
    assert [r["layer_type"] for r in rows] == list(layers["layer_type"])
    assert all(r["forward_ms"] > 0 for r in rows)
    assert all(r["backward_ms"] > 0 for r in rows), rows
    # The markers are identities: gradients still reach every parameter.
    assert all(p.grad is not None for p in model.parameters())


def test_t5_counts_match_graph():
    w = Workload.parse(SPECS["t5"])
    _, rows = timed_step(w, steps=1)
    layers = build_layer_graph(w).layers
    assert [r["layer_type"] for r in rows] == list(layers["layer_type"])
    assert sum(r["backward_ms"] for r in rows) > 0


def test_infer_has_forward_only():
    w = Workload.parse({**SPECS["bert"], "mode": "infer"})
    _, rows = timed_step(w)
    assert len(rows) == len(build_layer_graph(w).layers)
    assert all(r["forward_ms"] > 0 for r in rows)
    assert all(r["backward_ms"] == 0.0 for r in rows)


def test_instrument_removes_its_hooks():
    w = Workload.parse(SPECS["bert"])
    model = build_model(w)
    units = find_units(model)
    clock = Clock(torch.device("cpu"))
    with LayerInstrument(units, clock, backward=True) as inst:
        inst.start_step()
        training_loss(model(**make_batch(w))).backward()
        assert len(inst.calls) == len(units)
    assert all(not u.module._forward_hooks and not u.module._forward_pre_hooks for u in units)
    with pytest.raises(RuntimeError, match="outside"):
        inst.start_step()


def test_stride_rejects_zero():
    with pytest.raises(ValueError, match="stride"):
        LayerInstrument([], Clock(torch.device("cpu")), backward=True, stride=0)


@pytest.mark.parametrize("family", ["t5", "llama", "vit"])
def test_stride_times_each_call_once_per_round(family):
    """After the calibration iteration, a round of ``stride`` iterations times every call once;
    between rounds only the calls of the current phase (and the always-timed ones) carry hooks.
    """
    w = Workload.parse(SPECS[family])
    torch.manual_seed(0)
    model = build_model(w)
    units = find_units(model)
    clock = Clock(torch.device("cpu"))
    batch = make_batch(w, generator=torch.Generator().manual_seed(0))
    n_layers = len(build_layer_graph(w).layers)
    stride = 3
    with LayerInstrument(units, clock, backward=True, stride=stride) as inst:
        rounds = []
        for _ in range(1 + 2 * stride):
            inst.start_step()
            start = clock.mark()
            training_loss(model(**batch)).backward()
            end = clock.mark()
            rounds.append(inst.layer_times_ms(step_start=start, backward_end=end))
            hooked = sum(1 for u in units if u.module._forward_pre_hooks)
            if len(rounds) > 1:
                assert hooked < len(units)  # fewer hooks than the calibration iteration
    assert sorted(r["layer_index"] for r in rounds[0]) == list(range(n_layers))
    for k in range(2):
        rows = [r for it in rounds[1 + k * stride : 1 + (k + 1) * stride] for r in it]
        assert sorted(r["layer_index"] for r in rows) == list(range(n_layers))
        assert all(r["forward_ms"] > 0 for r in rows)
        assert all(r["backward_ms"] >= 0 for r in rows)
        # Every layer's backward was timed (it ends at its own input hook or the next hook).
        assert sum(r["backward_ms"] > 0 for r in rows) >= n_layers - 1


def test_cpu_clock_measures_milliseconds():
    clock = Clock(torch.device("cpu"))
    a = clock.mark()
    b = clock.mark()
    clock.synchronize()
    assert 0 <= clock.elapsed_ms(a, b) < 1000
    assert clock.elapsed_ms(0.0, 0.25) == pytest.approx(250.0)


@pytest.mark.parametrize("family", ["t5", "bert"])
def test_layer_intervals_fit_inside_the_step(family):
    """Layer intervals never overlap: their sum stays within the step's own interval.

    T5 has two embedding calls whose inputs need no gradient (no input marker): each one's
    backward must end at the next backward mark, not both at the end of the backward pass.
    """
    w = Workload.parse(SPECS[family])
    torch.manual_seed(0)
    model = build_model(w)
    clock = Clock(torch.device("cpu"))
    batch = make_batch(w, generator=torch.Generator().manual_seed(0))
    with LayerInstrument(find_units(model), clock, backward=True) as inst:
        for _ in range(2):
            inst.start_step()
            start = clock.mark()
            training_loss(model(**batch)).backward()
            end = clock.mark()
            rows = inst.layer_times_ms(step_start=start, backward_end=end)
    step_ms = clock.elapsed_ms(start, end)
    assert sum(r["forward_ms"] + r["backward_ms"] for r in rows) <= step_ms
