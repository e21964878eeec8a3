#!/usr/bin/python3
"""Writes small ONNX models for the misc family's import tests (issue 22:
DOUBLE literals, TopK, Einsum, EmbeddingBag's graph).

    gen_misc_models.py NAME OUT.onnx      write model NAME
    gen_misc_models.py --list             list the names

Built with onnx.helper (gen_models.py's helpers), so that the refusals are
tested on exactly the node forms named.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_models import F, I64, const, make, vi  # noqa: E402

D = TensorProto.DOUBLE
MODELS = {}


def model(fn):
    MODELS[fn.__name__.replace("_", "-")] = fn
    return fn


def _double_then(consumer_nodes, value, out_elt=F):
    nodes = [const("c", np.asarray(value, np.float64))] + consumer_nodes
    return make(nodes, [vi("x", F, [2, 3])], [vi("y", out_elt, [2, 3])])


@model
def double_clip():
    """torch.clamp(x, min=0.25): Constant(double) -> Cast(FLOAT) -> Clip."""
    return _double_then([
        helper.make_node("Cast", ["c"], ["cf"], name="cast", to=F),
        helper.make_node("Clip", ["x", "cf", ""], ["y"], name="clip")], 0.25)


@model
def double_mul():
    """A DOUBLE scalar straight into a float op (as torch's Where gets it)."""
    return _double_then([helper.make_node("Mul", ["x", "c"], ["y"], name="mul")],
                        0.1)


@model
def double_tensor():
    return _double_then([helper.make_node("Mul", ["x", "c"], ["y"], name="mul")],
                        [0.5, 2.0, 3.0])


@model
def double_to_int():
    nodes = [const("c", np.asarray(2.0, np.float64)),
             helper.make_node("Cast", ["c"], ["ci"], name="cast", to=I64),
             helper.make_node("Cast", ["ci"], ["cf"], name="cast2", to=F),
             helper.make_node("Mul", ["x", "cf"], ["y"], name="mul")]
    return make(nodes, [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])


@model
def double_overflow():
    return _double_then([
        helper.make_node("Cast", ["c"], ["cf"], name="cast", to=F),
        helper.make_node("Mul", ["x", "cf"], ["y"], name="mul")], 1e300)


def _einsum(eq, shapes, out_shape, elt=F):
    names = ["a", "b", "c"][:len(shapes)]
    nodes = [helper.make_node("Einsum", names, ["y"], name="einsum",
                              equation=eq)]
    return make(nodes, [vi(n, elt, s) for n, s in zip(names, shapes)],
                [vi("y", elt, out_shape)])


@model
def einsum_attention():
    return _einsum("bhqd,bhkd->bhqk", [[2, 4, 8, 16], [2, 4, 6, 16]],
                   [2, 4, 8, 6])


@model
def einsum_outer():
    return _einsum("i,j->ij", [[3], [5]], [3, 5])


@model
def einsum_diagonal():
    return _einsum("ii->i", [[4, 4]], [4])


@model
def einsum_size_mismatch():
    return _einsum("ij,ij->i", [[2, 3], [2, 4]], [2])


@model
def einsum_bad_output():
    return _einsum("ij->k", [[2, 3]], [2])


@model
def einsum_repeated_output():
    return _einsum("ij->ii", [[2, 3]], [2, 2])


@model
def einsum_int():
    return _einsum("ij->ji", [[2, 3]], [3, 2], I64)


@model
def topk():
    nodes = [const("k", np.array([2], np.int64)),
             helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk",
                              axis=-1, largest=0)]
    return make(nodes, [vi("x", F, [3, 5])], [vi("v", F, [3, 2]),
                                               vi("i", I64, [3, 2])])


@model
def topk_runtime_k():
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk")]
    return make(nodes, [vi("x", F, [3, 5]), vi("k", I64, [1])],
                [vi("v", F, [3, None]), vi("i", I64, [3, None])])


@model
def topk_k_too_large():
    nodes = [const("k", np.array([6], np.int64)),
             helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk")]
    return make(nodes, [vi("x", F, [3, 5])], [vi("v", F, [3, 6]),
                                               vi("i", I64, [3, 6])])


def _loop_body():
    """A body adding the iteration number (as float) to a carried value
    and scanning it out."""
    nodes = [helper.make_node("Cast", ["it"], ["itf"], to=F),
             helper.make_node("Add", ["acc_in", "itf"], ["acc_out"]),
             helper.make_node("Identity", ["cond_in"], ["cond_out"]),
             helper.make_node("Identity", ["acc_out"], ["scan"])]
    return helper.make_graph(
        nodes, "body",
        [vi("it", I64, []), vi("cond_in", TensorProto.BOOL, []),
         vi("acc_in", F, [2])],
        [vi("cond_out", TensorProto.BOOL, []), vi("acc_out", F, [2]),
         vi("scan", F, [2])])


@model
def loop_carried():
    nodes = [const("m", np.array(3, np.int64)),
             const("c", np.array(True)),
             helper.make_node("Loop", ["m", "c", "x"], ["acc", "scans"],
                              name="loop", body=_loop_body())]
    return make(nodes, [vi("x", F, [2])], [vi("acc", F, [2]),
                                            vi("scans", F, [3, 2])])


@model
def loop_while():
    nodes = [const("c", np.array(True)),
             helper.make_node("Loop", ["", "c", "x"], ["acc", "scans"],
                              name="loop", body=_loop_body())]
    return make(nodes, [vi("x", F, [2])], [vi("acc", F, [2]),
                                            vi("scans", F, [None, 2])])


def _export_bag(module, inputs):
    """ds.export (torch 1.13, training mode, opset 17) of `module`."""
    import tempfile
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))), "python"))
    import ds
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bag.onnx")
        ds.export(module, inputs, path)
        return onnx.load(path)


def _bag(mode="sum", weighted=False, last=False, computed=False):
    """torch 1.13's export of nn.EmbeddingBag(10, 4) with an offsets input
    (bags [1 2 3] [4 5 6 7]; with include_last_offset the offsets hold
    the end too); `computed`: per_sample_weights are sigmoid(w)."""
    import torch

    class Bag(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bag = torch.nn.EmbeddingBag(10, 4, mode=mode,
                                             include_last_offset=last)

        def forward(self, idx, offsets, w=None):
            if computed:
                w = torch.sigmoid(w)
            return self.bag(idx, offsets, per_sample_weights=w).sum()

    inputs = {"idx": torch.tensor([1, 2, 3, 4, 5, 6, 7]),
              "offsets": torch.tensor([0, 3, 7] if last else [0, 3])}
    if weighted or computed:
        inputs["w"] = torch.rand(7)
    return _export_bag(Bag(), inputs)


@model
def embedding_bag_offsets():
    """torch 1.13's export of nn.EmbeddingBag(mode='sum') with offsets."""
    return _bag("sum")


@model
def embedding_bag_mean():
    return _bag("mean")


@model
def embedding_bag_max():
    return _bag("max")


@model
def embedding_bag_weighted():
    return _bag("sum", weighted=True)


@model
def embedding_bag_last_offset():
    return _bag("sum", last=True)


@model
def embedding_bag_2d():
    """nn.EmbeddingBag(mode='mean') on 2-D input: constant bag bounds."""
    import torch

    class Bag(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bag = torch.nn.EmbeddingBag(10, 4, mode="mean")

        def forward(self, idx):
            return self.bag(idx).sum()

    return _export_bag(Bag(), {"idx": torch.tensor([[1, 2, 3], [4, 5, 6]])})


@model
def embedding_bag_computed_weights():
    """per_sample_weights computed in the model (sigmoid of an input)."""
    return _bag("sum", computed=True)


@model
def embedding_bag_weighted_mean():
    """The weighted bag with its ReduceSum made a ReduceMean (a form torch
    does not export: per_sample_weights are for mode sum only)."""
    m = _bag("sum", weighted=True)
    loop = next(n for n in m.graph.node if n.op_type == "Loop")
    body = loop.attribute[0].g
    red = next(n for n in body.node if n.op_type == "ReduceSum")
    red.op_type = "ReduceMean"
    del red.input[1:]
    keep = [a for a in red.attribute if a.name == "keepdims"]
    del red.attribute[:]
    red.attribute.extend(keep + [helper.make_attribute("axes", [0])])
    return m


def main():
    args = sys.argv[1:]
    if args == ["--list"]:
        print("\n".join(sorted(MODELS)))
    elif len(args) == 2 and args[0] in MODELS:
        onnx.save_model(MODELS[args[0]](), args[1])
    else:
        sys.exit(f"usage: {sys.argv[0]} NAME OUT.onnx | --list")


if __name__ == "__main__":
    main()
