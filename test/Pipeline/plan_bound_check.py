"""Checks --plan=auto's analytic memory bounds against real compiles.

Usage: plan_bound_check.py DS_OPT MODEL SEARCH_JSON MEMORY [--host] [--dynamic
       SEQ] -- FLAGS...

SEARCH_JSON is `ds-opt --plan=auto --report=json --explain`'s output (every
candidate with its bounds). Each candidate is compiled by hand:
- in its lowest-memory form, the one the search tries last (recompute full;
  with --host the optimizer state, and at ZeRO-3 the parameters, on the
  host): its planned peak (the fullest pipeline rank's for a pipeline) must
  be at least memory_bound, so a candidate the bound prunes (bound >
  MEMORY) cannot fit;
- with recompute full and the optimizer state on the device (only with
  --host; otherwise that is the form above): at least memory_bound_device;
- with recompute none on the device: at least memory_bound_none (the search
  skips those compiles when the bound is over).
FLAGS are the search's other options (optimizer, precision). --dynamic SEQ:
the model's batch is dynamic and its inputs idx and targets are BATCH x SEQ.

Prints one line per candidate the bound pruned and a summary:
  checked N compiles; bounds <= peaks: True; pruned P, of which fit: 0
"""
import json
import subprocess
import sys


def compiled_peak(ds_opt, model, cand, seq, flags, recompute, offload):
    args = [ds_opt, model, "--world-size=%d" % (cand["dp"] * cand["tp"] * cand["pp"]),
            "--tensor-parallel=%d" % cand["tp"],
            "--pipeline-parallel=%d" % cand["pp"],
            "--zero=%d" % cand["zero"], "--grad-accum=%d" % cand["grad_accum"],
            "--recompute=" + recompute, "--report=json", "-o", "/dev/null"] + flags
    if cand["sequence_parallel"]:
        args.append("--sequence-parallel")
    if cand["pp"] > 1:
        args.append("--schedule=" + cand["schedule"])
    if seq:
        for name in ("idx", "targets"):
            args.append("--input-shape=%s:%dx%d" % (name, cand["micro_batch"], seq))
    if offload:
        args.append("--offload-optimizer=cpu")
        if cand["zero"] == 3:
            args.append("--offload-param=cpu")
    run = subprocess.run(args, capture_output=True, text=True)
    if run.returncode != 0:
        return None
    r = json.loads(run.stdout)
    peak = r.get("per_rank_peak", 0)
    if "pipeline" in r:
        peak = max(peak, r["pipeline"].get("per_rank_peak", 0))
    return peak


def main():
    sep = sys.argv.index("--")
    head, flags = sys.argv[1:sep], sys.argv[sep + 1:]
    ds_opt, model, search, memory = head[0], head[1], head[2], int(head[3])
    host = "--host" in head
    seq = int(head[head.index("--dynamic") + 1]) if "--dynamic" in head else 0
    plan = json.load(open(search))["plan"]
    ok, checked, pruned, pruned_fit = True, 0, 0, 0
    for cand in plan["candidates"]:
        forms = [("full", host, "memory_bound"), ("none", False, "memory_bound_none")]
        if host:
            forms.append(("full", False, "memory_bound_device"))
        lowest = None
        for recompute, offload, key in forms:
            peak = compiled_peak(ds_opt, model, cand, seq, flags, recompute, offload)
            if peak is None:
                continue  # the compiler refuses the layout: nothing to compare
            checked += 1
            if cand[key] > peak:
                ok = False
                print("BOUND OVER PEAK: %s %s %d, peak %d (recompute %s, offload %s)"
                      % (cand["layout"], key, cand[key], peak, recompute, offload))
            if key == "memory_bound":
                lowest = peak
        if cand["state"] == "pruned" and lowest is not None:
            pruned += 1
            pruned_fit += lowest <= memory
            print("pruned %s: bound %d, lowest peak %d, fits %s"
                  % (cand["layout"], cand["memory_bound"], lowest, lowest <= memory))
    print("checked %d compiles; bounds <= peaks: %s; pruned %d, of which fit: %d"
          % (checked, ok, pruned, pruned_fit))

if __name__ == "__main__":
    main()
