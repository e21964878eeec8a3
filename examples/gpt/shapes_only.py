"""Shapes-only ONNX exports: the training graph of a model too large to hold,
with every float initializer carrying its dims and type and no data.

The convention (docs/planner.md, "Models without weights"):

- the model's metadata_props has ``ds.shapes_only`` = ``1``;
- every FLOAT/FLOAT16/BFLOAT16 initializer has ``dims`` and ``data_type``
  and no data at all (no raw_data, no typed fields, data_location DEFAULT);
- integer and bool initializers keep their data (ds folds shapes with
  them); this exporter refuses a model that has integer or bool parameters
  or buffers, which it could not fill.

ds-opt plans such a file without reading or allocating weights and writes a
plan that ds-run refuses to run. Every other ONNX tool rejects it (the ONNX
checker: "should contain one and only one value field"), so it cannot pass
for a real export.

How the graph is made without 350 GB of weights: the model is built on
torch's meta device (shapes, no storage) and traced by torch.onnx.export
with export_params=False, which lifts the parameters to graph inputs; the
inputs are then turned into data-less initializers, in the order torch
writes initializers. Two steps of torch 1.13's exporter read parameter
data and are redirected while it runs: ONNX shape inference inside the
exporter gets an empty parameter map (it then takes the parameters' shapes
from the traced types, as it does for any graph input), and the removal of
duplicate initializers compares placeholders that stand for the same
torch tensor object (tied weights) instead of data pointers, which are all
null on the meta device. The result is node for node the graph of a real
export (test/Import/shapes-only.test compares the plans).
"""
import io

import torch

SHAPES_ONLY_KEY = "ds.shapes_only"
FLOAT_TYPES = (torch.float32, torch.float16, torch.bfloat16)


class _TorchHooks:
    """Redirects the two exporter passes that read parameter data."""

    def __enter__(self):
        c = torch._C
        for name in ("_jit_pass_onnx_graph_shape_type_inference",
                     "_jit_pass_onnx_deduplicate_initializers"):
            if not hasattr(c, name):
                raise RuntimeError(
                    "--shapes-only needs torch 1.13's ONNX exporter (no %s in "
                    "torch %s)" % (name, torch.__version__))
        self.infer = c._jit_pass_onnx_graph_shape_type_inference
        self.dedup = c._jit_pass_onnx_deduplicate_initializers
        infer, dedup = self.infer, self.dedup

        def shape_inference(graph, params, opset):
            return infer(graph, {}, opset)

        def deduplicate(graph, params, training):
            stand_in = {}
            placeholders = {name: stand_in.setdefault(id(t), torch.empty(1))
                            for name, t in params.items()}
            return dedup(graph, placeholders, training)

        c._jit_pass_onnx_graph_shape_type_inference = shape_inference
        c._jit_pass_onnx_deduplicate_initializers = deduplicate
        return self

    def __exit__(self, *exc):
        torch._C._jit_pass_onnx_graph_shape_type_inference = self.infer
        torch._C._jit_pass_onnx_deduplicate_initializers = self.dedup
        return False


def _check_meta(model):
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t.device.type != "meta":
            raise ValueError("shapes-only export: '%s' is not on the meta device "
                             "(build the model with device='meta')" % name)
        if t.dtype not in FLOAT_TYPES:
            raise ValueError("shapes-only export: '%s' is %s; only float "
                             "parameters and buffers can be left without data"
                             % (name, t.dtype))


def export(model, args, input_names, output_names, opset=17):
    """The shapes-only ModelProto of `model` (built on the meta device)
    traced with `args` (meta tensors), in training mode."""
    import onnx

    _check_meta(model)
    buf = io.BytesIO()
    with _TorchHooks():
        torch.onnx.export(model, args, buf,
                          training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, opset_version=opset,
                          input_names=input_names, output_names=output_names,
                          export_params=False)
    proto = onnx.load_from_string(buf.getvalue())
    graph = proto.graph
    kept, lifted = [], []
    for value in graph.input:
        if value.name in input_names:
            kept.append(value)
            continue
        tt = value.type.tensor_type
        init = onnx.TensorProto()
        init.name = value.name
        init.data_type = tt.elem_type
        if not all(d.HasField("dim_value") for d in tt.shape.dim):
            raise ValueError("shapes-only export: '%s' has no static shape"
                             % value.name)
        init.dims.extend(d.dim_value for d in tt.shape.dim)
        lifted.append(init)
    del graph.input[:]
    graph.input.extend(kept)
    graph.initializer.extend(lifted)
    entry = proto.metadata_props.add()
    entry.key, entry.value = SHAPES_ONLY_KEY, "1"
    return proto
