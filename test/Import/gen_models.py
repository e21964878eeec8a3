#!/usr/bin/python3
"""Writes small ONNX models for the importer's lit tests.

    gen_models.py NAME OUT.onnx      write model NAME
    gen_models.py --list             list the names

Most models are built with onnx.helper so that the tests do not depend on a
PyTorch version; the ones that PyTorch itself produces are covered by the
bundled GPT example. The torch-* models are what torch.onnx.export writes
for the exports the importer must recognize (a training export with ops ds
lacks, an eval-mode export, a constant-folded one); torch is imported only
for them.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
MODELS = {}


def model(fn):
    MODELS[fn.__name__.replace("_", "-")] = fn
    return fn


def make(nodes, inputs, outputs, inits=(), opset=17, training_info=None,
         value_info=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits),
                              value_info=list(value_info))
    opsets = [helper.make_opsetid("", opset)]
    if training_info:
        opsets.append(helper.make_opsetid("ai.onnx.preview.training", 1))
    m = helper.make_model(graph, opset_imports=opsets,
                          producer_name="gen_models")
    if training_info:
        m.training_info.extend(training_info)
    return m


def vi(name, elt, shape):
    return helper.make_tensor_value_info(name, elt, shape)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def const(name, array):
    return helper.make_node("Constant", [], [name], name=name,
                            value=numpy_helper.from_array(np.asarray(array)))


def rand(*shape):
    return np.random.RandomState(0).randn(*shape).astype(np.float32)


@model
def mlp():
    """Two Gemm layers with Relu and a mean cross-entropy loss."""
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1",
                         transB=1),
        helper.make_node("Relu", ["h"], ["a"], name="relu"),
        helper.make_node("Gemm", ["a", "w2", "b2"], ["logits"], name="fc2",
                         transB=1),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "y"], ["loss"],
                         name="loss", reduction="mean"),
    ]
    return make(nodes, [vi("x", F, [4, 8]), vi("y", I64, [4])],
                [vi("loss", F, [])],
                [init("w1", rand(16, 8)), init("b1", rand(16)),
                 init("w2", rand(3, 16)), init("b2", rand(3))])


@model
def classifier():
    """Flatten, MatMul, Add, LogSoftmax and NLL loss; Sigmoid and Tanh."""
    nodes = [
        helper.make_node("Flatten", ["img"], ["flat"], name="flatten", axis=1),
        helper.make_node("MatMul", ["flat", "w"], ["mm"], name="mm"),
        helper.make_node("Add", ["mm", "b"], ["z"], name="bias"),
        helper.make_node("Tanh", ["z"], ["t"], name="tanh"),
        helper.make_node("Sigmoid", ["t"], ["s"], name="sigmoid"),
        helper.make_node("LogSoftmax", ["s"], ["logp"], name="logsoftmax",
                         axis=1),
        helper.make_node("NegativeLogLikelihoodLoss", ["logp", "label"],
                         ["loss"], name="nll", reduction="sum",
                         ignore_index=-1),
    ]
    return make(nodes, [vi("img", F, [2, 1, 4, 4]), vi("label", I64, [2])],
                [vi("loss", F, []), vi("logp", F, [2, 10])],
                [init("w", rand(16, 10)), init("b", rand(10))])


@model
def shape_arith():
    """PyTorch-style shape arithmetic that must fold to constants."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        const("i0", np.array(0, np.int64)),
        const("i1", np.array(1, np.int64)),
        helper.make_node("Gather", ["s", "i0"], ["b"], name="gather_b", axis=0),
        helper.make_node("Gather", ["s", "i1"], ["t"], name="gather_t", axis=0),
        const("heads", np.array(2, np.int64)),
        helper.make_node("Div", ["t", "heads"], ["half"], name="div"),
        const("ax0", np.array([0], np.int64)),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["ub"], name="unsq_b"),
        helper.make_node("Unsqueeze", ["heads", "ax0"], ["uh"], name="unsq_h"),
        helper.make_node("Unsqueeze", ["half", "ax0"], ["ut"], name="unsq_t"),
        helper.make_node("Concat", ["ub", "uh", "ut"], ["newshape"],
                         name="concat", axis=0),
        helper.make_node("Reshape", ["x", "newshape"], ["r"], name="reshape"),
        # A causal mask: Range -> Unsqueeze -> LessOrEqual, then Not, Where.
        const("start", np.array(0, np.int64)),
        const("delta", np.array(1, np.int64)),
        helper.make_node("Range", ["start", "half", "delta"], ["pos"],
                         name="range"),
        helper.make_node("Range", ["start", "heads", "delta"], ["pos2"],
                         name="range2"),
        helper.make_node("Unsqueeze", ["pos", "ax0"], ["row"], name="unsq_row"),
        const("ax1", np.array([1], np.int64)),
        helper.make_node("Unsqueeze", ["pos2", "ax1"], ["col"],
                         name="unsq_col"),
        helper.make_node("LessOrEqual", ["row", "col"], ["keep"], name="le"),
        helper.make_node("Not", ["keep"], ["masked"], name="not"),
        helper.make_node("ConstantOfShape", ["ax1"], ["zeros"], name="cos",
                         value=numpy_helper.from_array(
                             np.array([0.0], np.float32))),
        helper.make_node("Cast", ["masked"], ["maskf"], name="cast", to=F),
        helper.make_node("Where", ["masked", "maskf", "r"], ["out"],
                         name="where"),
        helper.make_node("Trilu", ["out"], ["tri"], name="trilu", upper=0),
        helper.make_node("Expand", ["zeros", "newshape"], ["ez"],
                         name="expand"),
        helper.make_node("Add", ["tri", "ez"], ["y"], name="add"),
    ]
    return make(nodes, [vi("x", F, [3, 8])], [vi("y", F, [3, 2, 4])])


@model
def data_movement():
    """Slice, Squeeze, Split, Transpose, Concat, Expand, Identity, Dropout."""
    nodes = [
        const("st", np.array([1, 0], np.int64)),
        const("en", np.array([-1, 100], np.int64)),
        const("ax", np.array([0, 2], np.int64)),
        const("sp", np.array([1, 2], np.int64)),
        helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["sl"],
                         name="slice"),
        helper.make_node("Transpose", ["sl"], ["tr"], name="transpose",
                         perm=[2, 0, 1]),
        const("split", np.array([1, 4], np.int64)),
        helper.make_node("Split", ["tr", "split"], ["p0", "p1"], name="split",
                         axis=0),
        const("sq", np.array([0], np.int64)),
        helper.make_node("Squeeze", ["p0", "sq"], ["s0"], name="squeeze"),
        helper.make_node("Identity", ["s0"], ["id"], name="identity"),
        const("ratio", np.array(0.25, np.float32)),
        const("train", np.array(True)),
        helper.make_node("Dropout", ["id", "ratio", "train"], ["dr", "mask"],
                         name="dropout"),
        helper.make_node("Concat", ["p1", "p1"], ["cat"], name="concat",
                         axis=1),
        helper.make_node("ReduceSum", ["cat", "sq"], ["rs"], name="rsum",
                         keepdims=0),
        helper.make_node("ReduceMean", ["rs"], ["rm"], name="rmean",
                         axes=[-1], keepdims=1),
        helper.make_node("ReduceMax", ["dr"], ["mx"], name="rmax", keepdims=0),
    ]
    return make(nodes, [vi("x", F, [4, 3, 10])],
                [vi("rm", F, [4, 1]), vi("mx", F, []), vi("mask", B, [2, 3])])


@model
def elementwise():
    """Every unary and binary elementwise op on float and int tensors."""
    names = ["Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Tanh",
             "Relu", "Sigmoid"]
    nodes, prev = [], "x"
    for i, op in enumerate(names):
        nodes.append(helper.make_node(op, [prev], [f"u{i}"], name=op.lower()))
        prev = f"u{i}"
    for i, op in enumerate(["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"]):
        nodes.append(helper.make_node(op, [prev, "y"], [f"b{i}"],
                                      name=op.lower()))
        prev = f"b{i}"
    nodes += [
        helper.make_node("Equal", ["k", "m"], ["eq"], name="equal"),
        helper.make_node("Less", ["k", "m"], ["lt"], name="less"),
        helper.make_node("Greater", ["k", "m"], ["gt"], name="greater"),
        helper.make_node("GreaterOrEqual", ["k", "m"], ["ge"], name="ge"),
        helper.make_node("And", ["eq", "lt"], ["and"], name="and"),
        helper.make_node("Or", ["and", "gt"], ["or"], name="or"),
        helper.make_node("Xor", ["or", "ge"], ["xor"], name="xor"),
        helper.make_node("Sum", [prev, "y", "y"], ["sum"], name="sum"),
    ]
    return make(nodes, [vi("x", F, [2, 3]), vi("y", F, [3]),
                        vi("k", I64, [2, 1]), vi("m", I64, [3])],
                [vi("sum", F, [2, 3]), vi("xor", B, [2, 3])])


@model
def activations():
    """Each activation once: Clip with constant bounds (one absent), the
    attribute ones with and without their attributes, PRelu per channel."""
    nodes = [
        const("lo", np.array(-1.5, np.float32)),
        helper.make_node("Clip", ["x", "lo", ""], ["c"], name="clip"),
        helper.make_node("LeakyRelu", ["c"], ["l"], name="leaky"),
        helper.make_node("Elu", ["l"], ["e"], name="elu", alpha=0.5),
        helper.make_node("Selu", ["e"], ["s"], name="selu"),
        helper.make_node("Celu", ["s"], ["ce"], name="celu", alpha=2.0),
        helper.make_node("Softplus", ["ce"], ["sp"], name="softplus"),
        helper.make_node("Softsign", ["sp"], ["ss"], name="softsign"),
        helper.make_node("HardSigmoid", ["ss"], ["hs"], name="hardsigmoid"),
        helper.make_node("HardSwish", ["hs"], ["hw"], name="hardswish"),
        helper.make_node("Sin", ["hw"], ["si"], name="sin"),
        helper.make_node("Cos", ["si"], ["co"], name="cos"),
        helper.make_node("PRelu", ["co", "slope"], ["y"], name="prelu"),
    ]
    return make(nodes, [vi("x", F, [2, 3, 4])], [vi("y", F, [2, 3, 4])],
                inits=[init("slope", rand(3, 1))])


@model
def clip_nonconst():
    """Clip whose max is a graph input: refused."""
    nodes = [helper.make_node("Clip", ["x", "", "hi"], ["y"], name="clip")]
    return make(nodes, [vi("x", F, [4]), vi("hi", F, [])], [vi("y", F, [4])])


@model
def layernorm_softmax():
    """LayerNormalization, Softmax, and opset-11 Softmax on a middle axis."""
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"],
                         name="ln", axis=-1, epsilon=1e-5),
        helper.make_node("Softmax", ["ln"], ["sm"], name="softmax", axis=-1),
    ]
    return make(nodes, [vi("x", F, [2, 3, 4])], [vi("sm", F, [2, 3, 4])],
                [init("g", np.ones(4, np.float32)),
                 init("b", np.zeros(4, np.float32))])


@model
def softmax_legacy():
    """Opset 11 Softmax coerces to 2-D at axis 1."""
    nodes = [helper.make_node("Softmax", ["x"], ["y"], name="softmax",
                              axis=1)]
    return make(nodes, [vi("x", F, [2, 3, 4])], [vi("y", F, [2, 3, 4])],
                opset=11)


@model
def half():
    """16-bit storage: an f16 MLP block and a bf16 one (Cast from f32)."""
    F16, BF16 = TensorProto.FLOAT16, TensorProto.BFLOAT16
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "b"], ["hb"], name="bias"),
        helper.make_node("LayerNormalization", ["hb", "g"], ["ln"], name="ln", axis=-1),
        helper.make_node("Softmax", ["ln"], ["y16"], name="softmax", axis=-1),
        helper.make_node("Cast", ["xf"], ["xb"], name="to_bf16", to=BF16),
        helper.make_node("Cast", ["wf"], ["wb"], name="w_to_bf16", to=BF16),
        helper.make_node("Gemm", ["xb", "wb"], ["gb"], name="gemm", transB=1),
        helper.make_node("Tanh", ["gb"], ["yb"], name="tanh"),
    ]
    return make(nodes, [vi("x", F16, [4, 8]), vi("xf", F, [4, 8])],
                [vi("y16", F16, [4, 16]), vi("yb", BF16, [4, 16])],
                [init("w", rand(8, 16).astype(np.float16)),
                 init("b", rand(16).astype(np.float16)),
                 init("g", np.ones(16, np.float16)),
                 init("wf", rand(16, 8))])


@model
def dynamic():
    """An input with symbolic dimensions; needs --input-shape."""
    nodes = [helper.make_node("MatMul", ["tokens", "w"], ["y"], name="mm")]
    return make(nodes, [vi("tokens", F, ["batch", "seq", 8])],
                [vi("y", F, ["batch", "seq", 4])], [init("w", rand(8, 4))])


@model
def external():
    """Written with its weights in an external data file (see main)."""
    return mlp()


@model
def external_missing():
    """External data whose file is absent (see main)."""
    return mlp()


@model
def unsupported_op():
    nodes = [helper.make_node("Tan", ["x"], ["y"], name="my_tan")]
    return make(nodes, [vi("x", F, [2])], [vi("y", F, [2])])


@model
def unsupported_ops():
    """Several unsupported op types, one of them on two nodes."""
    nodes = [helper.make_node("Tan", ["x"], ["c1"], name="tan1"),
             helper.make_node("Asin", ["c1"], ["s"], name="asin"),
             helper.make_node("Tan", ["s"], ["c2"]),
             helper.make_node("Relu", ["c2"], ["y"], name="relu")]
    return make(nodes, [vi("x", F, [2])], [vi("y", F, [2])])


@model
def unsupported_op_twice():
    nodes = [helper.make_node("Tan", ["x"], ["c"], name="tan1"),
             helper.make_node("Tan", ["c"], ["y"], name="tan2")]
    return make(nodes, [vi("x", F, [2])], [vi("y", F, [2])])


def _with_record(m, mode):
    """Adds the ds.export record's mode (python/ds/export.py writes it)."""
    for key, value in (("ds.mode", mode), ("ds.trainable", "[]")):
        entry = m.metadata_props.add()
        entry.key, entry.value = key, value
    return m


@model
def record_eval():
    """The mlp with a ds.export record of an eval-mode export."""
    return _with_record(mlp(), "eval")


@model
def record_training():
    """The mlp with onnx::* initializer names, but a ds.export record."""
    m = _with_record(mlp(), "training")
    for t in m.graph.initializer:
        for n in m.graph.node:
            n.input[:] = ["onnx::" + t.name if i == t.name else i
                          for i in n.input]
        t.name = "onnx::" + t.name
    return m


@model
def bn_no_training_mode():
    """BatchNormalization of opset 15 without a training_mode attribute."""
    nodes = [helper.make_node("BatchNormalization",
                              ["x", "g", "b", "mean", "var"], ["y"],
                              name="bn")]
    c = np.ones(3, np.float32)
    return make(nodes, [vi("x", F, [2, 3])], [vi("y", F, [2, 3])],
                [init("g", c), init("b", c), init("mean", c),
                 init("var", c)], opset=15)


def _torch_export(module, args, **kwargs):
    """torch.onnx.export to a ModelProto, inputs x and y, output loss."""
    import io
    import warnings
    import torch
    warnings.filterwarnings("ignore")
    buf = io.BytesIO()
    torch.onnx.export(module, args, buf, opset_version=17,
                      input_names=["x", "y"], output_names=["loss"], **kwargs)
    return onnx.load_from_string(buf.getvalue())


def _torch_training(**kwargs):
    import torch
    return dict(training=torch.onnx.TrainingMode.TRAINING,
                do_constant_folding=False, **kwargs)


@model
def torch_conv_bn():
    """A training export of two Conv+BatchNorm+Relu blocks, MaxPool and a
    Linear head: three op types ds lacks."""
    import torch
    nn = torch.nn
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4)
            self.conv2, self.bn2 = nn.Conv2d(4, 4, 3), nn.BatchNorm2d(4)
            self.pool, self.fc = nn.MaxPool2d(2), nn.Linear(16, 3)

        def forward(self, x, y):
            h = torch.relu(self.bn1(self.conv1(x)))
            h = self.pool(torch.relu(self.bn2(self.conv2(h))))
            return nn.functional.cross_entropy(self.fc(h.flatten(1)), y)

    return _torch_export(Net().train(), (torch.randn(2, 1, 8, 8),
                                         torch.tensor([0, 2])),
                         **_torch_training())


def _bn_mlp():
    import torch
    nn = torch.nn
    torch.manual_seed(0)

    class BnMlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.bn = nn.Linear(8, 16), nn.BatchNorm1d(16)
            self.fc2 = nn.Linear(16, 3)

        def forward(self, x, y):
            h = torch.relu(self.bn(self.fc1(x)))
            return nn.functional.cross_entropy(self.fc2(h), y)

    return BnMlp(), (torch.randn(4, 8), torch.tensor([0, 2, 1, 0]))


@model
def torch_bn_eval():
    """Linear+BatchNorm1d exported in eval mode: training_mode=0."""
    module, args = _bn_mlp()
    return _torch_export(module.eval(), args, do_constant_folding=False)


@model
def torch_mlp_folded():
    """An MLP without biases exported with torch's defaults (eval mode,
    constant folding): Transpose(weight) folds into onnx::MatMul_* tensors."""
    import torch
    nn = torch.nn
    torch.manual_seed(0)

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(8, 16, bias=False)
            self.fc2 = nn.Linear(16, 3, bias=False)

        def forward(self, x, y):
            h = torch.relu(self.fc1(x))
            return nn.functional.cross_entropy(self.fc2(h), y)

    return _torch_export(Mlp().eval(), (torch.randn(4, 8),
                                        torch.tensor([0, 2, 1, 0])))


@model
def unsupported_attr():
    nodes = [helper.make_node("LayerNormalization", ["x", "g"], ["y"],
                              name="ln_stash", stash_type=16)]
    return make(nodes, [vi("x", F, [2, 4])], [vi("y", F, [2, 4])],
                [init("g", np.ones(4, np.float32))])


@model
def unsupported_type():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    return make(nodes, [vi("x", TensorProto.DOUBLE, [2])],
                [vi("y", TensorProto.DOUBLE, [2])])


@model
def nonconst_shape():
    """Reshape whose target shape is a graph input, result shape unknown."""
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")]
    return make(nodes, [vi("x", F, [2, 3]), vi("s", I64, [2])],
                [vi("y", F, ["m", "n"])])


@model
def nonconst_shape_declared():
    """Reshape whose target shape is a graph input; the model declares the
    static result shape, which the importer takes."""
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")]
    return make(nodes, [vi("x", F, [2, 3]), vi("s", I64, [2])],
                [vi("y", F, [3, 2])])


@model
def shape_mismatch():
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"], name="bad_mm")]
    return make(nodes, [vi("a", F, [2, 3]), vi("b", F, [4, 5])],
                [vi("y", F, ["m", "n"])])


@model
def two_losses():
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["l1"], name="s1", keepdims=0),
        helper.make_node("ReduceMax", ["x"], ["l2"], name="s2", keepdims=0),
    ]
    return make(nodes, [vi("x", F, [3])], [vi("l1", F, []), vi("l2", F, [])])


def _training_info(update_key="w1", grad_xs=("w1",)):
    """Gradient of the mlp loss w.r.t. w1, then one Adam step."""
    algo_nodes = [
        helper.make_node("Gradient", ["x", "y"], ["g_w1"], name="grad",
                         domain="ai.onnx.preview.training",
                         xs=list(grad_xs), y="loss"),
        helper.make_node("Adam", ["R", "T", "w1", "g_w1", "v_w1", "h_w1"],
                         ["w1_new", "v_new", "h_new"], name="adam",
                         domain="ai.onnx.preview.training", alpha=0.9,
                         beta=0.999, epsilon=1e-8),
    ]
    algo = helper.make_graph(
        algo_nodes, "algorithm", [], [vi("w1_new", F, [16, 8])],
        [init("R", np.array(0.01, np.float32)),
         init("T", np.array(0, np.int64))])
    info = onnx.TrainingInfoProto()
    info.algorithm.CopyFrom(algo)
    kv = info.update_binding.add()
    kv.key, kv.value = update_key, "w1_new"
    return info


@model
def training_info():
    m = mlp()
    m.graph.initializer.extend([init("v_w1", np.zeros((16, 8), np.float32)),
                                init("h_w1", np.zeros((16, 8), np.float32))])
    m.training_info.extend([_training_info()])
    m.opset_import.extend([helper.make_opsetid("ai.onnx.preview.training", 1)])
    return m


@model
def training_info_bad_binding():
    m = training_info()
    m.training_info[0].update_binding[0].key = "not_a_weight"
    return m


@model
def training_info_bad_xs():
    m = training_info()
    for a in m.training_info[0].algorithm.node[0].attribute:
        if a.name == "xs":
            a.strings[0] = b"nowhere"
    return m


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--list":
        print("\n".join(sorted(MODELS)))
        return
    if len(sys.argv) != 3 or sys.argv[1] not in MODELS:
        sys.exit(f"usage: {sys.argv[0]} NAME OUT.onnx | --list")
    name, out = sys.argv[1], sys.argv[2]
    m = MODELS[name]()
    if name in ("external", "external-missing"):
        data = os.path.basename(out) + ".data"
        onnx.save_model(m, out, save_as_external_data=True,
                        all_tensors_to_one_file=True, location=data,
                        size_threshold=0)
        if name == "external-missing":
            os.remove(os.path.join(os.path.dirname(os.path.abspath(out)), data))
        return
    onnx.save_model(m, out)


if __name__ == "__main__":
    main()
