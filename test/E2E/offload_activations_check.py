#!/usr/bin/python3
"""Activation offload on the bundled GPT (CPU backend, where the device and
host arenas are separate allocations): for each case, 5 training steps with
--offload-activations=cpu must give losses and final weights bit-identical
to the same plan without it; the measured device peak equals the planned
one and falls by what the plan says (the report's device totals); the host
arena and the bytes moved each way are measured = planned, and the bytes
moved to the host are at least the offloaded activations' bytes (ZeRO-3 and
optimizer offload move their own too).

    offload_activations_check.py --ds-opt DS_OPT --ds-run DS_RUN
        --mpirun "mpirun ..." --onnx GPT --data NPZ --work DIR
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from offload_check import parse_args, train  # noqa: E402  (shared)

# (ranks, flags, whether the device peak must fall): the plans compared
# with and without activation offload. Under full or every-layer recompute
# the peak is not set by the kept layer inputs (it comes in the backward
# pass, with one layer's recomputed activations and the gradients), so it
# need only not rise there.
CASES = [
    (1, ["--zero=0"], True),
    (1, ["--zero=0", "--recompute=auto", "--device-memory=2.9MiB"], True),
    (1, ["--zero=0", "--recompute=every-layer",
         "--offload-activations-min-bytes=4096"], False),
    (1, ["--zero=0", "--precision=bf16"], True),
    (1, ["--zero=0", "--offload-optimizer=cpu"], True),
    (2, ["--zero=3"], True),
    (2, ["--zero=3", "--recompute=full", "--offload-optimizer=cpu"], False),
]


def main():
    args = parse_args()
    ok = True
    for k, (ranks, flags, falls) in enumerate(CASES):
        b = train(args, "base-%d" % k, flags, ranks)
        r = train(args, "act-%d" % k, flags + ["--offload-activations=cpu"],
                  ranks)
        same_loss = r["losses"] == b["losses"]
        same_w = sorted(r["weights"]) == sorted(b["weights"]) and all(
            np.array_equal(r["weights"][n], b["weights"][n]) for n in b["weights"])
        planned_drop = b["report"]["memory"]["total"] - r["report"]["memory"]["total"]
        measured_drop = b["device"][0] - r["device"][0]
        off, boff = r["report"]["offload"], b["report"]["offload"]
        h = r["host"]
        moved = off["device_to_host_bytes"] - boff["device_to_host_bytes"]
        host_ok = (h is not None and h[0] == h[1] and h[3:7] == h[7:11] and
                   off["activations"] == "host")
        good = (same_loss and same_w and r["device"][0] == r["device"][1] and
                b["device"][0] == b["device"][1] and
                measured_drop == planned_drop and
                (planned_drop > 0 if falls else planned_drop >= 0) and host_ok
                and moved > 0 and
                off["host_to_device_bytes"] - boff["host_to_device_bytes"] == moved)
        ok &= good
        print("ranks %d %s: losses bit-identical %s, weights bit-identical %s, "
              "device peak %d -> %d (fell %d, planned %d), host peak %d "
              "(planned %d, arena %d, was %d), activations moved per step "
              "%d each way: %s" % (
                  ranks, " ".join(flags), same_loss, same_w, b["device"][0],
                  r["device"][0], measured_drop, planned_drop,
                  h[0] if h else -1, h[1] if h else -1, off["host_arena"],
                  boff["host_arena"], moved, "PASS" if good else "FAIL"))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
