"""DeepSpeed's logging keys honoured by ds-run: tensorboard (an event file
read back here by an independent reader: TFRecord framing, masked CRC-32C
checked, Event/Summary protobufs decoded by hand), csv_monitor (DeepSpeed's
files), wall_clock_breakdown, steps_per_print and flops_profiler; with
--ranks 2 the comms logger under mpirun.

usage: monitors_check.py DS_OPT DS_RUN MODEL DATA WORKDIR [MPIRUN]
"""
import glob
import json
import os
import re
import shlex
import struct
import subprocess
import sys

ds_opt, ds_run, model, data, work = sys.argv[1:6]
mpirun = sys.argv[6] if len(sys.argv) > 6 else None
STEPS = 7


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


# ---- an independent TensorBoard event reader ------------------------------
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    v, shift = 0, 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def fields(buf):
    """(field number, wire type, value) of a protobuf message."""
    i, out = 0, []
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        elif wt == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        else:
            raise ValueError("wire type %d" % wt)
        out.append((num, wt, v))
    return out


def read_events(path):
    """The events of a file: dicts with wall_time, step, file_version or
    scalars [(tag, value)]; raises on a bad CRC."""
    raw = open(path, "rb").read()
    i, events = 0, []
    while i < len(raw):
        header = raw[i:i + 8]
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", raw[i + 8:i + 12])
        if hcrc != masked(header):
            raise ValueError("length CRC mismatch at %d" % i)
        body = raw[i + 12:i + 12 + length]
        (dcrc,) = struct.unpack("<I", raw[i + 12 + length:i + 16 + length])
        if len(body) != length or dcrc != masked(body):
            raise ValueError("data CRC mismatch at %d" % i)
        i += 16 + length
        ev = {"scalars": []}
        for num, wt, v in fields(body):
            if num == 1 and wt == 1:
                ev["wall_time"] = struct.unpack("<d", v)[0]
            elif num == 2 and wt == 0:
                ev["step"] = v
            elif num == 3 and wt == 2:
                ev["file_version"] = v.decode()
            elif num == 5 and wt == 2:
                for snum, _, sv in fields(v):
                    if snum != 1:
                        continue
                    tag, val = None, None
                    for vnum, vwt, vv in fields(sv):
                        if vnum == 1:
                            tag = vv.decode()
                        elif vnum == 2 and vwt == 5:
                            val = struct.unpack("<f", vv)[0]
                    ev["scalars"].append((tag, val))
        events.append(ev)
    return events


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def run(cmd, ok=True):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if ok and p.returncode != 0:
        fail("%s exited %d:\n%s" % (cmd, p.returncode, p.stdout))
    return p


def compile_plan(name, cfg, extra=()):
    path = os.path.join(work, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    plan = os.path.join(work, name + ".bin")
    run([ds_opt, model, "--config", path, "-o", plan] + list(extra))
    return plan


def load_log(path):
    return [json.loads(line) for line in open(path)]


# ---- one rank: monitors, breakdown, steps_per_print, flops profile -------
def single_rank():
    tb_root = os.path.join(work, "tb")
    csv_root = os.path.join(work, "csv")
    flops_file = os.path.join(work, "flops.txt")
    cfg = {
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "fp16": {"enabled": True, "initial_scale_power": 8},
        "steps_per_print": 3,
        "wall_clock_breakdown": True,
        "tensorboard": {"enabled": True, "output_path": tb_root,
                        "job_name": "job1"},
        "csv_monitor": {"enabled": True, "output_path": csv_root + "/",
                        "job_name": "job1"},
        "wandb": {"enabled": False},
        "flops_profiler": {"enabled": True, "profile_step": 1,
                           "module_depth": -1, "top_modules": 2,
                           "detailed": True, "output_file": flops_file},
    }
    plan = compile_plan("single", cfg)
    log = os.path.join(work, "single.jsonl")
    out = run([ds_run, plan, "--steps", str(STEPS), "--data", data,
               "--log-json", log, "--no-progress-bar"]).stdout
    steps = load_log(log)
    if len(steps) != STEPS:
        fail("log-json has %d steps" % len(steps))

    # steps_per_print 3: lines for steps 3, 6 and the last.
    printed = [int(m) for m in re.findall(r"^step (\d+)/%d " % STEPS, out,
                                          re.M)]
    if printed != [3, 6, 7]:
        fail("steps_per_print 3 printed steps %s" % printed)
    if len(re.findall(r"^  time \(ms\) \| forward: ", out, re.M)) != 3:
        fail("a breakdown line per printed step expected:\n" + out)
    if "wall clock breakdown, mean per step over 7 steps" not in out:
        fail("no mean breakdown")
    print("steps_per_print 3: printed steps", printed)

    # wall_clock_breakdown: the four times, summing to at most the step time
    # (+ 2 us: the log's 3- and 6-decimal rounding).
    for s in steps:
        parts = [s["time_forward_ms"], s["time_backward_ms"],
                 s["time_step_ms"], s["time_communication_ms"]]
        if min(parts[:3]) <= 0 or parts[3] < 0:
            fail("step %d: a phase without time: %s" % (s["step"], parts))
        total = sum(parts) + s["time_transfer_ms"] + s["time_other_ms"]
        if total > s["time_ms"] + 2e-3:
            fail("step %d: phases %.6f ms > step %.6f ms"
                 % (s["step"], total, s["time_ms"]))
    print("wall_clock_breakdown: forward, backward, step, communication in "
          "every step, sum <= step time")

    # TensorBoard.
    files = glob.glob(os.path.join(tb_root, "job1", "events.out.tfevents.*"))
    if len(files) != 1:
        fail("tensorboard files: %s" % files)
    events = read_events(files[0])
    if events[0].get("file_version") != "brain.Event:2":
        fail("first event is not the file_version")
    series = {}
    for ev in events[1:]:
        for tag, val in ev["scalars"]:
            series.setdefault(tag, []).append((ev["step"], val))
    batch = None
    loss = series["Train/Samples/train_loss"]
    if len(loss) != STEPS:
        fail("train_loss has %d events" % len(loss))
    batch = loss[1][0] - loss[0][0]
    if loss[0][0] != 0 or batch <= 0:
        fail("train_loss x axis %s" % [x for x, _ in loss])
    # CSV: DeepSpeed's files, full digits.
    csv_dir = os.path.join(csv_root, "job1")
    csv = {}
    for tag in series:
        name = tag.replace("/", "_") + ".csv"
        text = open(os.path.join(csv_dir, name), newline="").read()
        lines = text.split("\r\n")
        if lines[0] != "step," + tag.split("/")[-1] or lines[-1] != "":
            fail("%s: header %r" % (name, lines[0]))
        csv[tag] = [(int(a), float(b)) for a, b in
                    (l.split(",") for l in lines[1:-1])]
        if [x for x, _ in csv[tag]] != [x for x, _ in series[tag]]:
            fail("%s: x axis differs from tensorboard's" % name)
        for (_, c), (_, t) in zip(csv[tag], series[tag]):
            if f32(c) != t:  # the event's float is the CSV's value, rounded
                fail("%s: csv %r, tensorboard %r" % (tag, c, t))
    worst = 0.0
    for k, s in enumerate(steps):
        x, v = csv["Train/Samples/train_loss"][k]
        if x != k * batch:
            fail("train_loss of step %d at x=%d" % (k + 1, x))
        worst = max(worst, abs(v - s["loss"]))
    # The log prints 6 decimals: 5e-7 is its rounding.
    if worst > 5.01e-7:
        fail("train_loss differs from the log by %.3g" % worst)
    lr = series["Train/Samples/lr"]
    for k in range(STEPS - 1):  # after step k+1: the next step's rate
        if lr[k][0] != (k + 1) * batch or \
                abs(lr[k][1] - steps[k + 1]["lr"]) > 1e-7 * steps[k + 1]["lr"]:
            fail("lr event %d: %s, log %s" % (k, lr[k], steps[k + 1]["lr"]))
    scale = series["Train/Samples/loss_scale"]
    for k, s in enumerate(steps):
        if scale[k][1] != s["next_loss_scale"]:
            fail("loss_scale of step %d: %s, log %s"
                 % (k + 1, scale[k][1], s["next_loss_scale"]))
    for k, s in enumerate(steps):
        fwd = series["Train/Samples/elapsed_time_ms_forward"][k][1]
        if abs(fwd - s["time_forward_ms"]) > 1e-6 + 1e-6 * fwd:
            fail("elapsed_time_ms_forward of step %d" % (k + 1))
    print("tensorboard: %d events, CRCs good, tags %s"
          % (len(events), ", ".join(sorted(t.split("/")[-1] for t in series))))
    print("tensorboard and csv_monitor: train_loss equals the log's within "
          "%.1e (its 6 decimals); events equal the CSV in float32" % worst)
    # A corrupted byte must be caught by the reader's CRC check.
    raw = bytearray(open(files[0], "rb").read())
    raw[len(raw) // 2] ^= 0x40
    bad = os.path.join(work, "corrupt.tfevents")
    open(bad, "wb").write(raw)
    try:
        read_events(bad)
        fail("a corrupted event file passed the CRC check")
    except ValueError as e:
        print("corrupted copy refused:", str(e).split(" at ")[0])

    # flops_profiler: profile_step 1 is ds-run's step 2 (DeepSpeed counts
    # completed steps); the per-op FLOPs sum to the summary's.
    text = open(flops_file).read()
    if "Profile Summary at step 2:" not in text:
        fail("flops profile of step 2 expected:\n" + text[:400])
    if "flops profile of step 2 written to" not in out:
        fail("no notice of the flops file")
    unit = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}

    def number(s):
        m = re.match(r"\s*([\d.]+) ?([KMGT]?)FLOPs", s)
        return float(m.group(1)) * unit[m.group(2)]
    fwd = number(re.search(r"^fwd flops per rank:\s+(.*)$", text,
                           re.M).group(1))
    ops = re.findall(r"^\s+\d+ \S+\s+forward\s+.*?\s([\d.]+ ?[KMGT]?FLOPs)",
                     text, re.M)
    total = sum(number(o) for o in ops)
    if fwd <= 0 or abs(total - fwd) > 0.01 * fwd:
        fail("forward ops sum to %g FLOPs, the summary says %g" % (total, fwd))
    if "depth 0:" not in text or "'model'" not in text:
        fail("no module depths")
    print("flops_profiler: step 2, %d forward ops summing to the summary's "
          "%.3g FLOPs within 1%%" % (len(ops), fwd))

    # ds-run's flag overrides the plan's steps_per_print.
    out = run([ds_run, plan, "--steps", "4", "--data", data,
               "--steps-per-print", "1", "--tensorboard-dir",
               os.path.join(work, "tb2")]).stdout
    printed = [int(m) for m in re.findall(r"^step (\d+)/4 ", out, re.M)]
    if printed != [1, 2, 3, 4]:
        fail("--steps-per-print 1 printed %s" % printed)
    print("--steps-per-print 1 overrides: printed steps", printed)


# ---- two ranks: the comms logger -----------------------------------------
def two_ranks():
    cfg = {
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": 2},
        "comms_logger": {"enabled": True, "verbose": False, "prof_all": True,
                         "debug": False},
    }
    plan = compile_plan("comms", cfg, ["--world-size=2"])
    log = os.path.join(work, "comms.jsonl")
    cmd = shlex.split(mpirun) + ["-np", "2", ds_run, plan, "--steps", "3",
                                 "--data", data, "--log-json", log]
    out = run(cmd).stdout
    steps = load_log(log)
    head = out.find("Comm. Op")
    if head < 0:
        fail("no comms summary:\n" + out)
    table = out[head:].splitlines()
    ops, kind, logged = {}, None, 0
    for line in table[1:]:
        if re.match(r"^\S", line) and not line.startswith("("):
            kind = line.strip()
            if kind not in ("all_reduce", "reduce_scatter", "all_gather",
                            "broadcast", "send", "recv"):
                break
            continue
        cols = line.split()
        if len(cols) < 7:
            break
        size = float(cols[0]) * {"B": 1, "KB": 1024, "MB": 1024 ** 2}[cols[1]]
        count = int(cols[2])
        ops[kind] = ops.get(kind, 0) + count
        logged += size * count
    if not ops or any(c % 3 for c in ops.values()):
        fail("per-kind counts %s are not a multiple of the 3 steps" % ops)
    per_step = sum(s["collective_bytes"] for s in steps) / 3
    # Sizes print with 2 decimals of their unit: 1% covers the rounding.
    if abs(logged / 3 - per_step) > 0.01 * per_step:
        fail("comms logger %.0f bytes per step, the run %.0f"
             % (logged / 3, per_step))
    print("comms_logger (2 ranks, ZeRO-2): kinds %s, %.0f bytes per step as "
          "the run counted (1%%)" % (sorted(ops), per_step))
    # verbose: a line per call; prof_ops limits the kinds.
    cfg["comms_logger"] = {"enabled": True, "verbose": True,
                           "prof_all": False, "prof_ops": ["all_gather"]}
    plan = compile_plan("comms_verbose", cfg, ["--world-size=2"])
    cmd = shlex.split(mpirun) + ["-np", "2", ds_run, plan, "--steps", "2",
                                 "--data", data]
    out = run(cmd).stdout
    calls = re.findall(r"^comm op: (\S+) \| time \(ms\)", out, re.M)
    if not calls or set(calls) != {"all_gather"} or calls.count(
            "all_gather") != 2 * ops.get("all_gather", 0) // 3:
        fail("verbose with prof_ops [all_gather]: calls %s" % calls)
    print("comms_logger verbose, prof_ops [all_gather]: %d calls in 2 steps"
          % len(calls))


if mpirun:
    two_ranks()
else:
    single_rank()
print("monitors: OK")
