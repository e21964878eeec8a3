"""Runs ds-opt on every public DeepSpeed config of test/configs with the
outcome test/configs/expected.txt states (accepted, or refused with an
error naming a real limitation). A config without a line there fails.

usage: config_corpus.py DS_OPT MODEL CONFIG_DIR WORKDIR"""
import glob
import os
import subprocess
import sys

ds_opt, model, cdir, work = sys.argv[1:5]
expected = {}
for line in open(os.path.join(cdir, "expected.txt")):
    line = line.strip()
    if not line or line.startswith("#"):
        continue
    name, verdict, *rest = line.split(" ", 2) + [""]
    expected[name] = (verdict, rest[0].strip())

files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(cdir, "*.json")))
missing = [f for f in files if f not in expected]
if missing:
    sys.exit("no expected outcome for: " + ", ".join(missing))
if not files:
    sys.exit("no configs found in " + cdir)
accepted = refused = 0
for f in files:
    verdict, rest = expected[f]
    # A config without an optimizer section takes it from the caller, as
    # HF's Trainer supplies it; one with a section is compiled as written.
    text = open(os.path.join(cdir, f)).read()
    flags = ["--total-steps=100"]
    if '"optimizer"' not in text:
        flags.append("--optimizer=adamw")
    if verdict == "accept":
        flags += rest.split()
    r = subprocess.run([ds_opt, model, "--config", os.path.join(cdir, f),
                        *flags, "-o", os.path.join(work, "x.plan")],
                       capture_output=True, text=True)
    errors = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    if verdict == "accept":
        if r.returncode != 0:
            sys.exit(f"{f}: expected to compile, got rc {r.returncode}:\n{r.stderr}")
        accepted += 1
    elif verdict == "refuse":
        if r.returncode != 1 or rest not in r.stderr:
            sys.exit(f"{f}: expected a refusal containing {rest!r}, got rc "
                     f"{r.returncode}:\n{r.stderr}")
        if len(errors) != 1:
            sys.exit(f"{f}: expected one error, got:\n{r.stderr}")
        refused += 1
    else:
        sys.exit(f"{f}: unknown verdict {verdict!r} in expected.txt")
    print(f"{f}: {verdict}ed")
print(f"{len(files)} configs: {accepted} accepted, {refused} refused for a named limitation")
