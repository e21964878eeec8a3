"""Per pipeline stage of a --report=json: the collective bytes per step,
those of the update section (once per step), and what the stage would hand
if every collective ran once per micro-batch (its per-run bytes x M).

    pp_step_bytes.py REPORT.json...
"""
import json
import os
import sys

for path in sys.argv[1:]:
    pipe = json.load(open(path))["pipeline"]
    m = pipe["micro_batches"]
    for s in pipe["per_stage"]:
        c = s["footprint"]["collectives"]
        run = c["all_reduce_bytes"] + c["all_gather_bytes"] + c["reduce_scatter_bytes"]
        step, once = c["bytes_per_step"], c["once_per_step_bytes"]
        assert step == (run - once) * m + once, (path, s["stage"])
        print("%s stage %d: %d bytes per step, %d once, per micro-batch "
              "design %d: %.2fx fewer" % (os.path.basename(path), s["stage"],
                                          step, once, run * m, run * m / step))
