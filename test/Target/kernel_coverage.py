#!/usr/bin/python3
"""Checks that every ds op mnemonic in DsOps.td that lowers to a kernel is
listed by `ds-run --list-kernels`."""
import re
import sys

td, kernels = sys.argv[1], sys.argv[2]
ops = set(re.findall(r':\s*Ds_\w*Op<"(\w+)"', open(td).read()))
no_kernel = {"constant", "shape", "constant_of_shape", "reshape",
             # tensor parallelism: the identity is a view, the sum lowers to
             # the all_reduce kernel, a rank's rows to tp_rows
             "tp_identity", "tp_all_reduce", "sp_slice"}
have = set(open(kernels).read().split())
missing = sorted(ops - no_kernel - have)
if not ops or missing:
    print(f"ops without a runtime kernel: {missing}" if ops else "no ops found")
    sys.exit(1)
print(f"every one of {len(ops - no_kernel)} lowered ds ops has a runtime kernel")
