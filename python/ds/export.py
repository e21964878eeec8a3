"""Exporting a PyTorch training step to ONNX for ds, keeping what ONNX loses.

`torch.onnx.export` writes parameters and buffers alike as initializers and
drops `requires_grad` and `padding_idx`; its defaults (eval mode, constant
folding) rename and merge parameters. `export` fixes the export mode and
records the rest in the model's `metadata_props`, which ds-opt reads:

=====================  ====================================================
key                    value
=====================  ====================================================
``ds.export``          the exporter: ``ds.export <version> (torch <version>)``
``ds.mode``            ``training`` (the graph was traced in training mode)
``ds.trainable``       JSON list: initializers of parameters that require
                       gradients (tied parameters once, by their ONNX name)
``ds.frozen``          JSON list: parameters with ``requires_grad=False``
``ds.buffers``         JSON list: registered buffers (never trained)
``ds.padding_idx``     JSON object: embedding table initializer -> row
=====================  ====================================================

Only initializers that are in the exported graph are listed.
"""

import inspect
import io
import json

EXPORTER_VERSION = "1"


def _ordered_names(model, inputs):
    """The keys of `inputs` in the order of `model.forward`'s parameters,
    which is the order in which torch's exporter lays out graph inputs."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return list(inputs)
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return list(inputs)
    unknown = [k for k in inputs if k not in params]
    if unknown:
        raise ValueError(
            "ds.export: inputs %s are not parameters of %s.forward (it takes %s)"
            % (unknown, type(model).__name__, list(params)))
    return [name for name in params if name in inputs]


def _initializer_names(model_proto):
    return {init.name for init in model_proto.graph.initializer}


def _all_named_parameters(module, prefix=""):
    """Every (name, parameter) pair, tied parameters under each of their
    names (torch 1.13's named_parameters has no remove_duplicate)."""
    for name, p in module._parameters.items():
        if p is not None:
            yield prefix + name, p
    for name, child in module._modules.items():
        if child is not None:
            yield from _all_named_parameters(child, prefix + name + ".")


def _parameter_record(model, present):
    """(trainable, frozen) initializer names; a tied parameter appears once,
    under the first of its names that the exporter kept."""
    trainable, frozen, seen = [], [], set()
    for name, p in _all_named_parameters(model):
        if id(p) in seen or name not in present:
            continue
        seen.add(id(p))
        (trainable if p.requires_grad else frozen).append(name)
    return trainable, frozen


def _padding_record(model, present):
    import torch

    padding = {}
    for prefix, module in model.named_modules():
        if isinstance(module, torch.nn.Embedding) and \
                module.padding_idx is not None:
            # Tied tables: any of the weight's names that the graph kept.
            for name, p in _all_named_parameters(model):
                if p is module.weight and name in present:
                    padding[name] = int(module.padding_idx)
                    break
    return padding


def metadata(model, model_proto):
    """The ds.* metadata entries for `model` exported as `model_proto`."""
    import torch

    present = _initializer_names(model_proto)
    trainable, frozen = _parameter_record(model, present)
    buffers = [name for name, _ in model.named_buffers() if name in present]
    return {
        "ds.export": "ds.export %s (torch %s)" % (EXPORTER_VERSION,
                                                  torch.__version__),
        "ds.mode": "training",
        "ds.trainable": json.dumps(trainable),
        "ds.frozen": json.dumps(frozen),
        "ds.buffers": json.dumps(buffers),
        "ds.padding_idx": json.dumps(_padding_record(model, present),
                                     sort_keys=True),
    }


def _check_batchnorm(model):
    """BatchNorm with momentum=None (a cumulative average over
    num_batches_tracked) exports as ONNX momentum 0, which means "keep the
    last batch's statistics": refuse it rather than train it wrong."""
    import torch
    for name, m in model.named_modules():
        if (isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
                and m.track_running_stats and m.momentum is None):
            raise ValueError(
                "ds.export: %s (%s) has momentum=None (a cumulative moving "
                "average), which ONNX cannot express; set a momentum (torch's "
                "default is 0.1)" % (name or "the model", type(m).__name__))


def _restore_buffer_initializers(model, proto, saved):
    """Tracing ran one training-mode forward, which moved BatchNorm's
    running statistics before torch wrote them as initializers: write the
    buffers' values from before the export instead."""
    from onnx import numpy_helper
    for i, init in enumerate(proto.graph.initializer):
        if init.name in saved:
            value = saved[init.name].detach().cpu().numpy()
            if value.shape == tuple(init.dims):
                proto.graph.initializer[i].CopyFrom(
                    numpy_helper.from_array(value, init.name))


def export(model, inputs, path, opset=17):
    """Exports `model`'s training step to the ONNX file `path`.

    `inputs` is a dict of tensors such that `model(**inputs)` returns the
    scalar loss. The graph is traced in training mode (dropout kept,
    BatchNorm with batch statistics), without constant folding (one
    initializer per parameter, named as in `model.named_parameters()`), with
    graph inputs named by the dict's keys and one output named `loss`.
    Returns the ONNX ModelProto that was written."""
    import onnx
    import torch

    if not isinstance(inputs, dict) or not inputs:
        raise TypeError("ds.export: inputs must be a non-empty dict of "
                        "tensors, name -> tensor")
    names = _ordered_names(model, inputs)
    # Tracing runs the model once in training mode: BatchNorm would move its
    # running statistics and dropout would draw from the generator. Both are
    # put back, so exporting leaves the module and the RNG as they were.
    was_training = model.training
    _check_batchnorm(model)
    saved_buffers = [(b, b.detach().clone()) for b in model.buffers()]
    saved_buffers_by_name = [(n, b.detach().clone())
                             for n, b in model.named_buffers()]
    rng = torch.get_rng_state()
    model.train()
    try:
        buf = io.BytesIO()
        # A tuple's trailing dict holds keyword arguments.
        torch.onnx.export(
            model, ({k: inputs[k] for k in names},), buf,
            input_names=names, output_names=["loss"],
            training=torch.onnx.TrainingMode.TRAINING,
            do_constant_folding=False, opset_version=opset)
    finally:
        model.train(was_training)
        with torch.no_grad():
            for b, value in saved_buffers:
                b.copy_(value)
        torch.set_rng_state(rng)
    proto = onnx.load_from_string(buf.getvalue())
    _restore_buffer_initializers(model, proto, dict(saved_buffers_by_name))
    if len(proto.graph.output) != 1:
        raise ValueError("ds.export: model(**inputs) must return the scalar "
                         "loss alone (got %d outputs)" % len(proto.graph.output))
    for key, value in metadata(model, proto).items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(proto, path)
    return proto
