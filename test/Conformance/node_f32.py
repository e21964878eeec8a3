#!/usr/bin/python3
"""Runs the ONNX node tests whose data is DOUBLE (which ds does not take)
for the ops named on the command line, converted to FLOAT: the model's
double inputs and outputs become float and the test data is rounded to
f32; then each runs as node_run.py runs it (forward, f32 tolerance
|ds - ref| <= 1e-5 + 1e-4 * |ref|). Prints one line per test and the
counts; exits 1 on any failure.
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import node_import  # noqa: E402
import node_run  # noqa: E402


def to_f32(src, dst):
    """Copies the node test in `src` to `dst` with DOUBLE made FLOAT."""
    model = onnx.load(os.path.join(src, "model.onnx"))
    for vi in list(model.graph.input) + list(model.graph.output):
        if vi.type.tensor_type.elem_type == TensorProto.DOUBLE:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
    os.makedirs(os.path.join(dst, "test_data_set_0"))
    onnx.save(model, os.path.join(dst, "model.onnx"))
    data = os.path.join(src, "test_data_set_0")
    for f in os.listdir(data):
        t = onnx.load_tensor(os.path.join(data, f))
        if t.data_type == TensorProto.DOUBLE:
            t = numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name)
        onnx.save_tensor(t, os.path.join(dst, "test_data_set_0", f))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ds-opt", required=True)
    ap.add_argument("--ds-run", required=True)
    ap.add_argument("--node-dir", default=node_import.NODE_DIR)
    ap.add_argument("prefixes", nargs="+", help="test name prefixes, e.g. test_cumsum_")
    args = ap.parse_args()
    names = sorted(d for d in os.listdir(args.node_dir)
                   if any(d.startswith(p) for p in args.prefixes))
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            dst = os.path.join(tmp, "node", name)
            to_f32(os.path.join(args.node_dir, name), dst)
            os.makedirs(os.path.join(tmp, "work", name))
            status, why = node_run.run_one(args.ds_opt, args.ds_run, name,
                                           os.path.join(dst, "model.onnx"),
                                           os.path.join(tmp, "work", name))
            failed += status != "pass"
            print(f"  {status} {name}" + (f": {why}" if why else ""))
    print(f"{len(names)} run as f32, {len(names) - failed} passed, {failed} failed")
    sys.exit(1 if failed or not names else 0)


if __name__ == "__main__":
    main()
