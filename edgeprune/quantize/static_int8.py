"""Static (calibrated) int8 linears through PT2E quantization: per-channel symmetric int8 weights and
per-tensor int8 activations whose ranges are measured on real calibration inputs.

Only `nn.Linear` modules are annotated. Both backends' quantizers by default rewrite every scalar of an
`add`/`mul` into a *float* tensor constant (`_convert_scalars_to_attrs`); transformers builds the attention
mask from `arange(n) + offset` and indexes with it, so that rewrite breaks calibration with "tensors used as
indices must be long, int, byte or bool tensors". It exists to quantize scalar adds/muls, which these
recipes leave in float, so it is skipped.
"""

from collections.abc import Sequence

import torch
from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.runtimes import RUNTIMES, load_named

Inputs = tuple[torch.Tensor, ...]


def check_calibration(recipe_name: str, calibration: Sequence[Inputs] | None) -> list[Inputs]:
    """The calibration inputs as a list, refused when missing or of mixed shapes (export fixes one shape)."""
    batches = list(calibration or ())
    if not batches:
        raise UserInputError(f"recipe {recipe_name!r} calibrates on real task inputs and needs them: "
                             f"pass calibration=[(input_ids, attention_mask), ...] of real task inputs, e.g. "
                             f"task.example_inputs('calibration', 32)")
    shapes = {tuple(tuple(t.shape) for t in batch) for batch in batches}
    if len(shapes) > 1:
        raise UserInputError(f"calibration inputs for {recipe_name!r} must share the exported input shape; "
                             f"got {len(shapes)} different shapes: {sorted(shapes)[:3]}")
    return batches


def xnnpack_quantizer():  # noqa: ANN201 - an XNNPACKQuantizer subclass instance
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    class LinearOnlyXnnpackQuantizer(XNNPACKQuantizer):
        def transform_for_annotation(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
            return model

    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=False)
    return LinearOnlyXnnpackQuantizer().set_module_type(nn.Linear, config)


def litert_quantizer():  # noqa: ANN201 - a litert_torch PT2EQuantizer subclass instance
    from litert_torch.quantize.pt2e_quantizer import PT2EQuantizer, get_symmetric_quantization_config

    class LinearOnlyPT2EQuantizer(PT2EQuantizer):
        # litert_torch reads static vs. dynamic from the global config, so the linear-only choice is made here
        STATIC_OPS = ["linear", "addmm"]

        def transform_for_annotation(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
            return model

    return LinearOnlyPT2EQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True,
                                                                                  is_dynamic=False))


def quantize_static(model: nn.Module, calibration: list[Inputs], runtime: str) -> nn.Module:
    """Export `model` at the calibration inputs' shape, observe activations on every calibration input, and
    return the converted module (quantize/dequantize pairs around each linear) for the runtime to lower."""
    from torchao.quantization.pt2e import allow_exported_model_train_eval
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    spec = RUNTIMES.get(runtime)
    quantizer = load_named(spec.pt2e_quantizer)()
    graph = torch.export.export(model.eval(), calibration[0], strict=False).module()
    observed = prepare_pt2e(graph, quantizer)
    with torch.no_grad():
        for batch in calibration:
            observed(*batch)
    converted = convert_pt2e(observed, fold_quantize=spec.folds_quantized_weights)
    allow_exported_model_train_eval(converted)  # lowering calls .eval(); exported modules refuse it otherwise
    return converted
