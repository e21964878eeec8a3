#!/usr/bin/python3
"""Checks ds-opt --report=json against its schema: each section, each key
and its type; prints 'schema OK' or the first problem.

    report_schema.py REPORT.json
"""
import json
import sys

NUM = (int, float)
SCHEMA = {
    "world_size": int, "zero_stage": int, "optimizer": str, "precision": str,
    "comm_dtype": str, "psi": int, "psi_padded": int, "accum_steps": int,
    "per_rank_peak": int, "device_memory": int,
    "memory": {"parameters": int, "gradients": int, "optimizer_state": int,
               "buffers": int, "saved_activations": int, "arena": int,
               "loss_scaler": int, "total": int},
    "formula": {"parameters": NUM, "gradients": NUM, "optimizer_state": NUM},
    "peak": {"instruction": int, "kernel": str, "node": str, "live_bytes": int,
             "arena_over_live": NUM,
             "saved_activation_bytes": int, "collective_buffer_bytes": int,
             "workspace_bytes": int, "transient_bytes": int,
             "largest_live": list},
    "collectives": {"all_reduce": int, "all_reduce_bytes": int,
                    "all_gather": int, "all_gather_bytes": int,
                    "reduce_scatter": int, "reduce_scatter_bytes": int,
                    "async": int, "ring_bytes_per_rank": NUM,
                    "once_per_step_bytes": int, "bytes_per_step": int},
    "cost": {"flops_per_second": NUM, "bytes_per_second": NUM,
             "link_bytes_per_second": NUM, "step_seconds": NUM,
             "kernel_seconds": NUM, "collective_seconds": NUM,
             "exposed_collective_seconds": NUM, "flops": NUM, "tokens": int,
             "flops_bound_6_psi_tokens": NUM, "flops_ratio": NUM},
    "recompute": {"mode": str, "seg_saved": list, "seg_input": list,
                  "seg_flops": list, "seg_recomputable": list,
                  "seg_chosen": list, "fixed": int, "layer_period": int,
                  "layers": int, "step_flops": int, "budget": int,
                  "planning_us": int, "none": list, "full": list,
                  "every_layer": list, "chosen": list},
}


# With --cluster (docs/planner.md): the predicted step.
PREDICTED = {
    "predicted": {"cluster": str, "nodes": int, "devices_per_node": int,
                  "precision": str, "step_time_s": NUM, "tokens_per_step": NUM,
                  "tokens_per_s": NUM, "mfu": NUM, "peak_flops": NUM,
                  "flops_per_rank": NUM, "bottleneck": str, "compute_s": NUM,
                  "exposed_communication_s": NUM, "offload_wait_s": NUM,
                  "bubble_s": NUM, "bubble_fraction": NUM,
                  "micro_batches": int, "device_memory": int},
}


# With --plan=auto (docs/planner.md): the search's candidates.
PLAN = {"plan": {"chosen": str, "compiles": int, "states": dict,
                 "candidates": list, "auto_values": dict}}
CANDIDATE = {"layout": str, "family": str, "dp": int, "tp": int, "pp": int,
             "sequence_parallel": bool, "zero": int, "micro_batch": int,
             "grad_accum": int, "schedule": str, "recompute": str,
             "offload_optimizer": bool, "offload_param": bool,
             "offload_activations": bool, "activations_at": str,
             "optimizer_at": str, "params_at": str, "host_peak": int,
             "bucket": int, "reduce_bucket": int, "allgather_bucket": int,
             "prefetch_bucket": int, "persistence_threshold": int,
             "max_inflight": int, "compression": str, "state": str,
             "chosen": bool, "memory_bound": int,
             "memory_bound_device": int, "memory_bound_none": int, "peak": int,
             "step_time_s": NUM, "tokens_per_s": NUM, "mfu": NUM,
             "bottleneck": str, "why": str}


def check(obj, schema, path):
    for key, want in schema.items():
        if key not in obj:
            return "%s%s is missing" % (path, key)
        if isinstance(want, dict):
            if not isinstance(obj[key], dict):
                return "%s%s is not an object" % (path, key)
            problem = check(obj[key], want, path + key + ".")
            if problem:
                return problem
        elif want is bool:
            if not isinstance(obj[key], bool):
                return "%s%s is %r" % (path, key, obj[key])
        elif not isinstance(obj[key], want) or isinstance(obj[key], bool):
            return "%s%s is %r" % (path, key, obj[key])
    return None


report = json.load(open(sys.argv[1]))
problem = check(report, SCHEMA, "")
if not problem and "predicted" in report:
    problem = check(report, PREDICTED, "")
    # A compressed optimizer's plan (docs/planner.md): after the freeze,
    # with its warm-up step.
    if not problem and "phase" in report["predicted"]:
        problem = check(report, {"predicted": {
            "phase": str, "warmup_step_time_s": NUM}}, "")
if not problem and "plan" in report:
    problem = check(report, PLAN, "")
    for i, c in enumerate(report["plan"]["candidates"] if not problem else []):
        problem = problem or check(c, CANDIDATE, "plan.candidates[%d]." % i)
print(problem or "schema OK")
m, f = report["memory"], report["formula"]
print("model states %d = 16Ψ/N %d" % (
    m["parameters"] + m["gradients"] + m["optimizer_state"],
    f["parameters"] + f["gradients"] + f["optimizer_state"]))
sys.exit(1 if problem else 0)
