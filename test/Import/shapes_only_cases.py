#!/usr/bin/python3
"""Malformed shapes-only models for test/Import/shapes-only.test.

    shapes_only_cases.py SHAPES_ONLY.onnx REAL.onnx OUT_DIR

writes OUT_DIR/unmarked.onnx (data-less initializers, no ds.shapes_only
mark), OUT_DIR/mixed.onnx (marked, one initializer with data) and
OUT_DIR/badmark.onnx (the mark's value is not "1")."""
import os
import sys

import onnx


def main():
    so, real, out = sys.argv[1], sys.argv[2], sys.argv[3]
    model = onnx.load(so)
    unmarked = onnx.ModelProto()
    unmarked.CopyFrom(model)
    keep = [p for p in unmarked.metadata_props if p.key != "ds.shapes_only"]
    del unmarked.metadata_props[:]
    unmarked.metadata_props.extend(keep)
    onnx.save(unmarked, os.path.join(out, "unmarked.onnx"))

    mixed = onnx.ModelProto()
    mixed.CopyFrom(model)
    weights = {t.name: t for t in onnx.load(real).graph.initializer}
    name = "h.0.ln_1.weight"
    for i, t in enumerate(mixed.graph.initializer):
        if t.name == name:
            mixed.graph.initializer[i].CopyFrom(weights[name])
    onnx.save(mixed, os.path.join(out, "mixed.onnx"))

    bad = onnx.ModelProto()
    bad.CopyFrom(model)
    for p in bad.metadata_props:
        if p.key == "ds.shapes_only":
            p.value = "yes"
    onnx.save(bad, os.path.join(out, "badmark.onnx"))


if __name__ == "__main__":
    main()
