#!/usr/bin/python3
"""Imports every ONNX backend node test whose ops ds supports.

For each model under libonnx-testdata's data/node/, the driver reads the op
types and element types with the onnx package and:

  * skips it, with the reason, when an op is not one `ds-opt --list-onnx-ops`
    prints or an element type is not one ds computes in (f32, f16, bf16,
    i64, i32, bool);
  * otherwise runs `ds-opt model.onnx --emit=summary --allow-eval-export`,
    which must succeed (node tests check one op's forward: BatchNormalization
    without training_mode, an eval-mode export ds refuses for training, is
    imported as inference BatchNormalization).

ds plans static shapes, so an input that only gives a shape (Reshape's
`shape`, Slice's `starts`...) must be a compile-time constant. The node
tests feed those (or the values they are computed from) as graph inputs;
the driver turns such inputs into initializers holding the test's own data
(test_data_set_0), as a user would with a real model. It prints the counts and exits 1 if any import failed.
"""
import argparse
import collections
import concurrent.futures
import os
import subprocess
import sys
import tempfile

import onnx
from onnx import TensorProto

NODE_DIR = "/usr/share/libonnx-testdata/data/node"
SUPPORTED_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16,
                   TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL}

# Inputs (by position) that determine a result shape or are attributes in
# disguise: ds needs them as constants.
SHAPE_OPERANDS = {
    "Reshape": [1], "Expand": [1], "Slice": [1, 2, 3, 4], "Squeeze": [1],
    "Unsqueeze": [1], "Split": [1], "ReduceSum": [1], "ReduceMean": [1],
    "ReduceMax": [1], "ReduceMin": [1], "ReduceL2": [1],
    "ReduceLogSumExp": [1], "CumSum": [1], "Trilu": [1], "ConstantOfShape": [0],
    "Range": [0, 1, 2], "Dropout": [1, 2], "Clip": [1, 2], "Pad": [1, 2],
    # rnn family: sequence_lens (all entries the full length) is constant.
    "LSTM": [4], "GRU": [4],
    "TopK": [1], "Loop": [0, 1],  # misc family (a Loop is unrolled)
    "Resize": [1, 2, 3], "Upsample": [1],
}

# Models of supported ops in a form ds refuses by design, with the reason.
REFUSED_FORMS = {
    "test_maxpool_with_argmax_2d_precomputed_pads": "MaxPool's Indices output",
    "test_maxpool_with_argmax_2d_precomputed_strides": "MaxPool's Indices output",
    # Resize: cubic mode and tf_crop_and_resize are refused at import.
    **{name: "Resize mode cubic" for name in (
        "test_resize_downsample_scales_cubic",
        "test_resize_downsample_scales_cubic_A_n0p5_exclude_outside",
        "test_resize_downsample_scales_cubic_align_corners",
        "test_resize_downsample_sizes_cubic",
        "test_resize_upsample_scales_cubic",
        "test_resize_upsample_scales_cubic_A_n0p5_exclude_outside",
        "test_resize_upsample_scales_cubic_align_corners",
        "test_resize_upsample_scales_cubic_asymmetric",
        "test_resize_upsample_sizes_cubic")},
    "test_resize_tf_crop_and_resize": "Resize tf_crop_and_resize",
}


def model_dirs(node_dir):
    """The node tests, plus the gradient tests of data/simple (named
    ../simple/NAME so that they resolve from node_dir)."""
    names = sorted(d for d in os.listdir(node_dir)
                   if os.path.isfile(os.path.join(node_dir, d, "model.onnx")))
    simple = os.path.join(os.path.dirname(node_dir.rstrip("/")), "simple")
    if os.path.isdir(simple):
        names += sorted(os.path.join("..", "simple", d) for d in os.listdir(simple)
                        if d.startswith("test_gradient_of_")
                        and os.path.isfile(os.path.join(simple, d, "model.onnx")))
    return names


def value_types(model):
    g = model.graph
    for vi in list(g.input) + list(g.output):
        if vi.type.HasField("tensor_type"):
            yield vi.name, vi.type.tensor_type.elem_type
        else:
            yield vi.name, None
    for init in g.initializer:
        yield init.name, init.data_type


def classify(model, supported):
    """Returns a skip reason, or None if ds should import the model."""
    if model.graph.name in REFUSED_FORMS:
        return "refused form: " + REFUSED_FORMS[model.graph.name]
    def qualified(n):
        return n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
    bad_ops = sorted({qualified(n) for n in model.graph.node
                      if qualified(n) not in supported})
    if bad_ops:
        return "unsupported op " + ", ".join(bad_ops)
    for name, t in value_types(model):
        if t not in SUPPORTED_TYPES:
            tname = "non-tensor" if t is None else TensorProto.DataType.Name(t)
            return f"unsupported element type {tname}"
    for node in model.graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR and \
                    a.t.data_type not in SUPPORTED_TYPES:
                return ("unsupported element type " +
                        TensorProto.DataType.Name(a.t.data_type))
    return None


def bind_shape_inputs(model, test_dir):
    """Makes the graph inputs that shape operands are computed from (a
    window function's size through Cast and Sub to Range's limit, or the
    operand itself) initializers with the test's data. Returns the names
    bound."""
    g = model.graph
    input_index = {vi.name: i for i, vi in enumerate(g.input)}
    init_names = {t.name for t in g.initializer}
    producer = {out: n for n in g.node for out in n.output}
    wanted, seen = set(), set()
    pending = [node.input[pos] for node in g.node
               for pos in SHAPE_OPERANDS.get(node.op_type, [])
               if pos < len(node.input) and node.input[pos]]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in input_index and name not in init_names:
            wanted.add(name)
        elif name in producer:
            pending += [i for i in producer[name].input if i]
    bound = []
    for name in sorted(wanted, key=lambda n: input_index[n]):
        pb = os.path.join(test_dir, "test_data_set_0",
                          f"input_{input_index[name]}.pb")
        tensor = onnx.TensorProto()
        with open(pb, "rb") as f:
            tensor.ParseFromString(f.read())
        tensor.name = name
        g.initializer.append(tensor)
        bound.append(name)
    keep = [vi for vi in g.input if vi.name not in bound]
    del g.input[:]
    g.input.extend(keep)
    return bound


def run_one(ds_opt, name, path, tmp):
    model = onnx.load(path)
    bound = bind_shape_inputs(model, os.path.dirname(path))
    if bound:
        path = os.path.join(tmp, name + ".onnx")
        onnx.save(model, path)
    proc = subprocess.run([ds_opt, path, "--emit=summary", "--allow-eval-export"],
                          capture_output=True, text=True, timeout=120)
    err = proc.stderr.strip().splitlines()
    return proc.returncode, (err[0] if err else ""), bound


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ds-opt", required=True)
    ap.add_argument("--node-dir", default=NODE_DIR)
    ap.add_argument("-j", type=int, default=os.cpu_count() or 1)
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="list every skipped model with its reason")
    args = ap.parse_args()

    supported = set(subprocess.run([args.ds_opt, "--list-onnx-ops"],
                                   capture_output=True, text=True,
                                   check=True).stdout.split())
    if not os.path.isdir(args.node_dir):
        sys.exit(f"error: {args.node_dir} not found (apt-get install "
                 "libonnx-testdata)")
    names = model_dirs(args.node_dir)
    skipped = {}
    todo = []
    for name in names:
        path = os.path.join(args.node_dir, name, "model.onnx")
        reason = classify(onnx.load(path, load_external_data=False), supported)
        if reason:
            skipped[name] = reason
        else:
            todo.append((name, path))

    failed = []
    with tempfile.TemporaryDirectory() as tmp, \
            concurrent.futures.ThreadPoolExecutor(args.j) as pool:
        futures = {pool.submit(run_one, args.ds_opt, n, p, tmp): n
                   for n, p in todo}
        for fut in concurrent.futures.as_completed(futures):
            name = futures[fut]
            rc, err, bound = fut.result()
            if rc != 0:
                failed.append((name, rc, err))

    by_reason = collections.Counter(
        r.split(",")[0] if r.startswith("unsupported op") else r
        for r in skipped.values())
    print(f"ONNX node tests in {args.node_dir}: {len(names)}")
    print(f"  skipped (op or element type ds does not support): {len(skipped)}")
    for reason, count in sorted(by_reason.items(), key=lambda x: -x[1])[:15]:
        print(f"    {count:4d}  {reason}")
    if args.verbose:
        for name in sorted(skipped):
            print(f"    skip {name}: {skipped[name]}")
    for name, rc, err in sorted(failed):
        print(f"  FAILED {name} (exit {rc}): {err}")
    imported = len(todo) - len(failed)
    print(f"node models with every op supported: {len(todo)}; "
          f"imported: {imported}; failed: {len(failed)}")
    print(f"{imported} passed, {len(failed)} failed, {len(skipped)} skipped")
    sys.exit(1 if failed or not todo else 0)


if __name__ == "__main__":
    main()
