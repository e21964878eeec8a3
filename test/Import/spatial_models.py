#!/usr/bin/python3
"""Writes small ONNX models of the spatial ops (Resize, Upsample, Pad,
InstanceNormalization) for the importer's lit tests (spatial.test).

    spatial_models.py NAME OUT.onnx      write model NAME
"""
import os
import sys

import numpy as np
from onnx import helper, numpy_helper, save_model

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_models import F, const, init, make, rand, vi  # noqa: E402

MODELS = {}


def model(fn):
    MODELS[fn.__name__.replace("_", "-")] = fn
    return fn


def resize_model(attrs, scales=None, sizes=None, shape=(1, 2, 4, 4),
                 out=(1, 2, 8, 8), scales_input=False):
    nodes, inputs = [], [vi("x", F, list(shape))]
    names = ["x", ""]
    if scales is not None:
        if scales_input:
            inputs.append(vi("s", F, [len(scales)]))
        else:
            nodes.append(const("s", np.array(scales, np.float32)))
        names.append("s")
    else:
        names.append("")
    if sizes is not None:
        nodes.append(const("z", np.array(sizes, np.int64)))
        names.append("z")
    nodes.append(helper.make_node("Resize", names, ["y"], name="resize", **attrs))
    return make(nodes, inputs, [vi("y", F, list(out))])


@model
def resize_ok():
    """Nearest x2 (torch's nearest), linear to sizes (align_corners)."""
    nodes = [
        const("s", np.array([1, 1, 2, 2], np.float32)),
        helper.make_node("Resize", ["x", "", "s"], ["a"], name="near",
                         mode="nearest", coordinate_transformation_mode="asymmetric",
                         nearest_mode="floor"),
        const("z", np.array([1, 2, 5, 7], np.int64)),
        helper.make_node("Resize", ["a", "", "", "z"], ["y"], name="lin",
                         mode="linear", coordinate_transformation_mode="align_corners"),
    ]
    return make(nodes, [vi("x", F, [1, 2, 4, 4])], [vi("y", F, [1, 2, 5, 7])])


@model
def resize_cubic():
    return resize_model({"mode": "cubic"}, scales=[1, 1, 2, 2])


@model
def resize_crop():
    return resize_model({"mode": "linear",
                         "coordinate_transformation_mode": "tf_crop_and_resize"},
                        scales=[1, 1, 2, 2])


@model
def resize_nonconst():
    return resize_model({"mode": "linear"}, scales=[1, 1, 2, 2],
                        scales_input=True)


@model
def resize_channels():
    return resize_model({"mode": "nearest"}, scales=[1, 2, 2, 2],
                        out=(1, 4, 8, 8))


@model
def resize_exclude_outside():
    return resize_model({"mode": "linear", "exclude_outside": 1},
                        scales=[1, 1, 2, 2])


def pad_model(mode, pads, shape=(1, 2, 3, 3), out=None):
    nodes = [const("p", np.array(pads, np.int64)),
             helper.make_node("Pad", ["x", "p"], ["y"], name="pad", mode=mode)]
    out = out or [s + pads[i] + pads[i + len(shape)] for i, s in enumerate(shape)]
    return make(nodes, [vi("x", F, list(shape))], [vi("y", F, list(out))])


@model
def pad_ok():
    """Reflect (asymmetric), edge with a negative pad, constant cropping."""
    nodes = [
        const("p1", np.array([0, 0, 2, 1, 0, 0, 0, 2], np.int64)),
        helper.make_node("Pad", ["x", "p1"], ["a"], name="reflect", mode="reflect"),
        const("p2", np.array([0, 0, 1, -1, 0, 0, 0, 1], np.int64)),
        helper.make_node("Pad", ["a", "p2"], ["b"], name="edge", mode="edge"),
        const("p3", np.array([0, 0, -1, 0, 0, 0, 0, 1], np.int64)),
        helper.make_node("Pad", ["b", "p3"], ["y"], name="crop", mode="constant"),
    ]
    return make(nodes, [vi("x", F, [1, 2, 3, 3])], [vi("y", F, [1, 2, 5, 7])])


@model
def pad_reflect_too_far():
    return pad_model("reflect", [0, 0, 3, 0, 0, 0, 0, 0])


@model
def pad_wrap():
    return pad_model("wrap", [0, 0, 1, 0, 0, 0, 0, 0])


@model
def pad_nothing_left():
    return pad_model("constant", [0, 0, -2, 0, 0, 0, -1, 0], out=[1, 2, 0, 3])


@model
def instancenorm_ok():
    """InstanceNormalization with parameters, and torch's GroupNorm export
    (constant scale 1 and bias 0: no Mul, no Add)."""
    nodes = [
        helper.make_node("InstanceNormalization", ["x", "g", "b"], ["a"],
                         name="inorm", epsilon=1e-3),
        const("shape", np.array([0, 2, -1], np.int64)),
        helper.make_node("Reshape", ["a", "shape"], ["r"], name="reshape"),
        const("ones", np.ones(2, np.float32)),
        const("zeros", np.zeros(2, np.float32)),
        helper.make_node("InstanceNormalization", ["r", "ones", "zeros"], ["y"],
                         name="gnorm"),
    ]
    # The parameters start at 1 and 0 (torch's initial values): they are
    # parameters all the same, so the Mul and the Add stay.
    return make(nodes, [vi("x", F, [2, 4, 3, 3])], [vi("y", F, [2, 2, 18])],
                inits=[init("g", np.ones(4, np.float32)),
                       init("b", np.zeros(4, np.float32))])


@model
def instancenorm_bad_scale():
    nodes = [helper.make_node("InstanceNormalization", ["x", "g", "b"], ["y"],
                              name="inorm")]
    return make(nodes, [vi("x", F, [2, 4, 3, 3])], [vi("y", F, [2, 4, 3, 3])],
                inits=[init("g", rand(3)), init("b", rand(4))])


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in MODELS:
        sys.exit(f"usage: {sys.argv[0]} NAME OUT.onnx ({', '.join(sorted(MODELS))})")
    save_model(MODELS[sys.argv[1]](), sys.argv[2])


if __name__ == "__main__":
    main()
