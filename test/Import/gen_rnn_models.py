#!/usr/bin/python3
"""Writes the LSTM/GRU models of the importer's lit tests (rnn.test).

    gen_rnn_models.py NAME OUT.onnx      write model NAME
    gen_rnn_models.py --list             list the names (gen_models.py's too)

Built with onnx.helper (gen_models.py's helpers), except torch-lstm-dynamic:
test/Zoo's LSTM language model exported by torch.onnx.export with a dynamic
sequence axis.
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The models register with gen_models' table; its main() writes them.
from gen_models import const, init, main, make, model, rand, vi  # noqa: E402

F = TensorProto.FLOAT
SEQ, BATCH, IN, HID = 3, 2, 4, 5


def rnn(op="LSTM", dirs=1, extra_inputs=(), extra_inits=(), extra_nodes=(),
        **attrs):
    """X [SEQ, BATCH, IN] through one LSTM/GRU node; outputs Y and Y_h."""
    g = 4 if op == "LSTM" else 3
    inputs = ["X", "W", "R", "B"] + list(extra_inputs)
    node = helper.make_node(op, inputs, ["Y", "Y_h"], name="rnn",
                            hidden_size=HID, **attrs)
    inits = [init("W", rand(dirs, g * HID, IN)), init("R", rand(dirs, g * HID, HID)),
             init("B", rand(dirs, 2 * g * HID))] + list(extra_inits)
    return make(list(extra_nodes) + [node], [vi("X", F, [SEQ, BATCH, IN])],
                [vi("Y", F, [SEQ, dirs, BATCH, HID]), vi("Y_h", F, [dirs, BATCH, HID])],
                inits)


@model
def lstm_bidirectional():
    return rnn(direction="bidirectional", dirs=2)


@model
def gru_reverse():
    return rnn("GRU", direction="reverse", linear_before_reset=1)


@model
def lstm_activations():
    return rnn(activations=["Sigmoid", "Relu", "Tanh"])


@model
def gru_activation_alpha():
    return rnn("GRU", activations=["Sigmoid", "Tanh"], activation_alpha=[1.0, 1.0])


@model
def lstm_clip():
    return rnn(clip=3.0)


@model
def lstm_input_forget():
    return rnn(input_forget=1)


@model
def lstm_seq_lens_varying():
    return rnn(extra_inputs=["lens"],
               extra_nodes=[const("lens", np.array([SEQ, SEQ - 1], np.int32))])


@model
def gru_seq_lens_input():
    m = rnn("GRU", extra_inputs=["lens"])
    m.graph.input.append(vi("lens", TensorProto.INT32, [BATCH]))
    return m


@model
def torch_lstm_dynamic():
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "Zoo"))
    import models
    import onnx
    import tempfile
    net, inputs = models.lstm_lm()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.onnx")
        torch.onnx.export(net, (inputs["tokens"], inputs["labels"]), path,
                          training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, opset_version=17,
                          input_names=["tokens", "labels"], output_names=["loss"],
                          dynamic_axes={"tokens": {1: "seq"}, "labels": {1: "seq"}})
        return onnx.load(path)


if __name__ == "__main__":
    main()
