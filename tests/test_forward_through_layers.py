"""Measurements taken inside the layers run the forward only as far as the last layer: a decoder's output layer is
never run for them, what they measure equals what a full forward gives, and the model is left as it was."""

import numpy as np
import pytest
import torch

from edgeprune.importance import AngularDistance
from edgeprune.importance.fluctuation import Fluctuation
from edgeprune.models import adapter_for, forward_through_layers
from edgeprune.pruning import measure_head_means
from edgeprune.pruning.ffn import neuron_statistics
from tests.test_compensation import text_batches
from tests.test_llama_adapter import VOCAB, tiny


def _batches():
    return text_batches(VOCAB)


def _count_calls(module: torch.nn.Module) -> list[int]:
    calls = [0]
    module.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def test_the_output_layer_is_not_run_and_the_last_layers_hooks_are():
    model = tiny()
    head_calls = _count_calls(model.lm_head)
    last = adapter_for(model).layer_modules(model)[-1]
    seen = []
    last.register_forward_hook(lambda _module, _args, output: seen.append(output[0] if isinstance(output, tuple)
                                                                          else output))
    ids = _batches()[0]["input_ids"]
    with torch.no_grad():
        forward_through_layers(model, lambda: model(input_ids=ids))
    assert head_calls == [0]
    assert len(seen) == 1 and seen[0].shape[:2] == ids.shape
    with torch.no_grad():  # its hook is gone: a full forward runs to the logits, as before
        logits = model(input_ids=ids).logits
    assert head_calls == [1] and logits.shape == (*ids.shape, VOCAB)


def test_an_error_inside_the_forward_still_propagates_and_the_hook_is_removed():
    model = tiny()
    head_calls = _count_calls(model.lm_head)

    def fail() -> None:
        raise RuntimeError("a real error")

    with pytest.raises(RuntimeError, match="a real error"):
        forward_through_layers(model, fail)
    with torch.no_grad():
        model(input_ids=_batches()[0]["input_ids"])
    assert head_calls == [1]


def _full_forward(_model: torch.nn.Module, call) -> None:
    call()


def test_head_means_equal_a_full_forwards(monkeypatch):
    model, batches = tiny(), _batches()
    head_calls = _count_calls(model.lm_head)
    stopped = measure_head_means(model, batches)
    assert head_calls == [0]
    monkeypatch.setattr("edgeprune.pruning.compensation.forward_through_layers", _full_forward)
    full = measure_head_means(model, batches)
    assert head_calls == [len(batches)]
    assert stopped.num_tokens == full.num_tokens == 2 * (2 * 10 + 6)
    for a, b in zip(stopped.means, full.means, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("measure", ["neurons", "angular distance", "fluctuation"])
def test_layer_statistics_equal_a_full_forwards(monkeypatch, measure):
    model, batches = tiny(), _batches()
    head_calls = _count_calls(model.lm_head)

    def run():
        if measure == "neurons":
            statistics = neuron_statistics(model, batches)
            return [*statistics.means, *statistics.mean_abs, *statistics.fluctuation]
        if measure == "angular distance":
            return [AngularDistance().score(model, batches).scores]
        return [Fluctuation().score(model, batches).scores]

    stopped = run()
    assert head_calls == [0]
    monkeypatch.setattr("edgeprune.importance.common.forward_through_layers", _full_forward)
    full = run()
    assert head_calls == [len(batches)]
    for a, b in zip(stopped, full, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
