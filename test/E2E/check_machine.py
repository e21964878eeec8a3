#!/usr/bin/env python3
"""Checks a machine description written by ds-run --calibrate.

check_machine.py FILE --ranks N [--nodes K] [--quick] [--nvme] [--kinds]

Every field the cluster schema (docs/calibration.md) requires, in the
order ds-run writes them, each a positive finite number in its unit's
range for a CPU. The ranges, and why:
  - device.flops (FLOP/s): 1e8 to 1e13. A CPU core does at least 1e8 on
    a GEMM even when shared; 1e13 is above any CPU socket's fp32 peak.
  - GEMM classes: 1e7 to 1e13 (the tiniest class is call-bound).
  - memory_bandwidth, copy (bytes/s): 1e8 to 1e12 (one DDR channel under
    load to well above any socket).
  - kernel families: 1e6 to 1e12 bytes/s (the loss kernel runs at about
    1e8 on one core; a busy host may slow it tenfold); conv 1e7 to 1e13
    FLOP/s.
  - launch_overhead: 1e-9 to 1e-3 s (a function call to a scheduler tick).
  - dispatch_overhead, run_overhead (each only when its fit is positive):
    1e-10 to 1e-3 s (a few instructions of the executor to a tick).
  - stash_save_bytes_per_s, stash_restore_bytes_per_s: 1e7 to 1e12
    (a copy on a shared core to well above any socket's bandwidth).
  - kernels.kinds (--kinds, --calibrate-kernels-of): each entry a kernel
    name with bytes_per_s (1e5 to 1e13: erf or the loss run near 1e8 on a
    shared core, a copy in cache near 1e11) and/or overhead (0 to 0.01 s).
  - links and collectives: latency 1e-8 to 0.1 s, bandwidth 1e7 to 1e12
    bytes/s (lit runs tests in parallel on few cores, and a descheduled
    rank stretches a message by milliseconds).
  - memory: 1e8 bytes to the host's MemTotal.
The rates and overheads of `device` and `kernels` are scaled by the share
of the host's cores the calibration got (docs/calibration.md; a note gives
it, 0.01 to 1, and on a host shared with other tests it can be a tenth):
the ranges apply to the unscaled figures (rates over the share, overheads
times it).
Prints one line "machine description OK: ..." or the problems, exit 1.
"""

import argparse
import json
import math
import re
import sys

FAMILIES = ["elementwise", "reduction", "normalization", "movement", "loss",
            "gradient", "optimizer", "conv", "pooling"]
COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "broadcast",
               "send_recv"]

problems = []


def check(cond, what):
    if not cond:
        problems.append(what)
    return cond


def in_range(value, lo, hi, what):
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value) and lo <= value <= hi)
    return check(ok, f"{what} = {value!r} is not in [{lo:g}, {hi:g}]")


def keys(obj, expected, what):
    got = list(obj.keys()) if isinstance(obj, dict) else None
    return check(got == expected, f"{what} keys {got} != {expected}")


def numbers(obj, path=""):
    """Every number in the file is positive and finite."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            numbers(v, f"{path}.{k}" if path else k)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            numbers(v, f"{path}[{i}]")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        check(math.isfinite(obj) and obj > 0,
              f"{path} = {obj!r} is not positive and finite")


def mem_total():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 1 << 50


def check_alpha_beta(obj, what):
    if keys(obj, ["latency", "bandwidth"], what):
        in_range(obj["latency"], 1e-8, 0.1, what + ".latency")
        in_range(obj["bandwidth"], 1e7, 1e12, what + ".bandwidth")


def check_kinds(kinds):
    check(isinstance(kinds, dict) and len(kinds) > 0, "kernels.kinds is empty")
    for name, fig in (kinds.items() if isinstance(kinds, dict) else []):
        what = f"kernels.kinds.{name}"
        check(re.fullmatch(r"[a-z0-9_]+", name) is not None, f"{what}: not a kernel name")
        check(isinstance(fig, dict) and 0 < len(fig) and
              set(fig) <= {"bytes_per_s", "overhead"}, f"{what} keys {fig}")
        if "bytes_per_s" in fig:
            in_range(fig["bytes_per_s"], 1e5, 1e13, what + ".bytes_per_s")
        if "overhead" in fig:
            in_range(fig["overhead"], 0, 1e-2, what + ".overhead")


def check_kernels(k, quick, kinds=False):
    # dispatch_overhead and run_overhead are left out when their fit is not
    # positive (a note says so): optional, in their place.
    optional = [key for key in ["dispatch_overhead", "run_overhead"] if key in k]
    if not keys(k, ["launch_overhead"] + optional +
                ["stash_save_bytes_per_s", "stash_restore_bytes_per_s",
                 "gemm", "families"] + (["kinds"] if kinds else []), "kernels"):
        return
    if kinds:
        check_kinds(k["kinds"])
    in_range(k["launch_overhead"], 1e-9, 1e-3, "kernels.launch_overhead")
    for key in optional:
        in_range(k[key], 1e-10, 1e-3, "kernels." + key)
    for key in ["stash_save_bytes_per_s", "stash_restore_bytes_per_s"]:
        in_range(k[key], 1e7, 1e12, "kernels." + key)
    gemm = k["gemm"]
    check(len(gemm) == (3 if quick else 6),
          f"{len(gemm)} GEMM classes, expected {3 if quick else 6}")
    bounds = [g.get("max_flops") for g in gemm]
    check(bounds[-1] is None and all(b is not None for b in bounds[:-1]),
          "only the last GEMM class has no max_flops")
    check(bounds[:-1] == sorted(bounds[:-1]) and
          len(set(bounds[:-1])) == len(bounds) - 1,
          f"GEMM class bounds {bounds[:-1]} do not increase")
    for i, g in enumerate(gemm):
        keys(g, (["max_flops"] if i + 1 < len(gemm) else []) +
             ["flops_per_s"], f"kernels.gemm[{i}]")
        in_range(g["flops_per_s"], 1e7, 1e13, f"kernels.gemm[{i}]")
    fam = k["families"]
    if keys(fam, FAMILIES, "kernels.families"):
        for name in FAMILIES:
            field = "flops_per_s" if name == "conv" else "bytes_per_s"
            if keys(fam[name], [field], f"families.{name}"):
                lo, hi = (1e7, 1e13) if name == "conv" else (1e6, 1e12)
                in_range(fam[name][field], lo, hi, f"families.{name}")


def unscale(m):
    """The share from the calibration's notes; the device's and kernels'
    rates divided by it and their overheads multiplied by it, in place."""
    notes = m.get("calibration", {}).get("notes", [])
    found = [re.search(r"while calibrating, ([0-9.]+) ", n) for n in notes]
    found = [f for f in found if f]
    if not check(len(found) == 1, "no note gives the cpu share"):
        return
    share = float(found[0].group(1))
    if not in_range(share, 0.01, 1.0, "cpu share"):
        return
    d, k = m.get("device", {}), m.get("kernels", {})
    for p in d.get("flops", {}):
        d["flops"][p] /= share
    if "memory_bandwidth" in d:
        d["memory_bandwidth"] /= share
    if "copy_bandwidth" in m.get("calibration", {}):
        m["calibration"]["copy_bandwidth"] /= share
    for key in ["launch_overhead", "dispatch_overhead", "run_overhead"]:
        if key in k:
            k[key] *= share
    for key in ["stash_save_bytes_per_s", "stash_restore_bytes_per_s"]:
        if key in k:
            k[key] /= share
    for g in k.get("gemm", []):
        g["flops_per_s"] /= share
    for sec in (k.get("families", {}), k.get("kinds", {})):
        for fig in sec.values():
            for f in ("flops_per_s", "bytes_per_s"):
                if f in fig:
                    fig[f] /= share
            if "overhead" in fig:
                fig["overhead"] *= share


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--nvme", action="store_true")
    ap.add_argument("--kinds", action="store_true")
    a = ap.parse_args()
    with open(a.file) as f:
        m = json.load(f)
    per_node = a.ranks // a.nodes
    top = (["name", "nodes", "devices_per_node", "device"] +
           (["intra_node"] if per_node > 1 else []) +
           (["inter_node"] if a.nodes > 1 else []) +
           (["nvme"] if a.nvme else []) + ["kernels"] +
           (["collectives"] if a.ranks > 1 else []) + ["calibration"])
    keys(m, top, "top-level")
    numbers(m)
    unscale(m)
    check(m.get("nodes") == a.nodes, f"nodes {m.get('nodes')} != {a.nodes}")
    check(m.get("devices_per_node") == per_node,
          f"devices_per_node {m.get('devices_per_node')} != {per_node}")
    d = m.get("device", {})
    if keys(d, ["kind", "memory", "flops", "memory_bandwidth"], "device"):
        check(d["kind"] == "cpu", "device.kind is not cpu")
        check(isinstance(d["memory"], int), "device.memory is not bytes")
        in_range(d["memory"], 1e8, mem_total(), "device.memory")
        if keys(d["flops"], ["fp32", "bf16", "fp16"], "device.flops"):
            for p in ["fp32", "bf16", "fp16"]:
                in_range(d["flops"][p], 1e8, 1e13, f"device.flops.{p}")
        in_range(d["memory_bandwidth"], 1e8, 1e12, "device.memory_bandwidth")
    for link in ["intra_node", "inter_node"]:
        if link in m:
            check_alpha_beta(m[link], link)
    if a.nvme and keys(m["nvme"], ["read_bandwidth", "write_bandwidth"],
                       "nvme"):
        for k in ["read_bandwidth", "write_bandwidth"]:
            in_range(m["nvme"][k], 1e7, 1e12, "nvme." + k)
    if "kernels" in m:
        check_kernels(m["kernels"], a.quick, a.kinds)
    if a.ranks > 1 and keys(m.get("collectives", {}), COLLECTIVES,
                            "collectives"):
        for c in COLLECTIVES:
            check_alpha_beta(m["collectives"][c], "collectives." + c)
    c = m.get("calibration", {})
    if keys(c, ["date", "threads", "ranks", "host", "seconds", "quick",
                "copy_bandwidth", "notes"], "calibration"):
        check(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", c["date"]),
              f"calibration.date {c['date']!r} is not UTC ISO 8601")
        check(c["ranks"] == a.ranks, f"calibration.ranks != {a.ranks}")
        check(c["quick"] == a.quick, "calibration.quick is wrong")
        in_range(c["seconds"], 1e-3, 60, "calibration.seconds")
        in_range(c["copy_bandwidth"], 1e8, 1e12, "calibration.copy_bandwidth")
        check(all(isinstance(n, str) for n in c["notes"]), "notes are text")
    if problems:
        for p in problems:
            print("problem:", p)
        sys.exit(1)
    print(f"machine description OK: {m['nodes']} node(s) x "
          f"{m['devices_per_node']} device(s), collectives: "
          f"{', '.join(m.get('collectives', {})) or 'none'}")


if __name__ == "__main__":
    main()
