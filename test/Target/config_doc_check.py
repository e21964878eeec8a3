"""Checks docs/config.md's "Mapping" table against the option table
(include/ds/Pipeline/TrainingOptions.def, as `ds-opt --options-markdown`
prints it): every option with a DeepSpeed key has a row naming that key
and the option's flag, and every flag the table names exists. The mapping table is thus derived from, and kept
in step with, the one option table.

usage: config_doc_check.py OPTIONS_MARKDOWN CONFIG_MD"""
import re
import sys

opts_md, config_md = sys.argv[1:3]
def cells_of(line):
    """The cells of a markdown table row (an escaped \\| stays in its cell)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line)]


options = {}  # flag -> DeepSpeed key
all_flags = set()
for line in open(opts_md):
    cells = cells_of(line)
    if len(cells) < 6 or not cells[1].startswith("`--"):
        continue
    flag = re.match(r"`--([a-z0-9-]+)", cells[1]).group(1)
    all_flags.add(flag)
    key = cells[3].strip("`")
    if key:
        options[flag] = key

rows = []  # (keys, flags)
text = open(config_md).read()
if "## Mapping" not in text:
    sys.exit("config.md has no '## Mapping' section")
section = text.split("## Mapping", 1)[1].split("\n## ", 1)[0]
for line in section.splitlines():
    cells = cells_of(line)
    if len(cells) < 4 or not cells[1].startswith("`"):
        continue
    keys = set()
    prefix = ""
    for k in re.findall(r"`([A-Za-z0-9_.]+)`", cells[1]):
        if "." in k:
            prefix = k.rsplit(".", 1)[0] + "."
            keys.add(k)
        else:
            keys.add(k)
            keys.add(prefix + k)
    flags = set(re.findall(r"--([a-z0-9-]+)", cells[2]))
    rows.append((keys, flags))
if not rows:
    sys.exit("config.md's Mapping table has no rows")

problems = []
for flag, key in sorted(options.items()):
    named = lambda keys: key in keys or any(k.startswith(key + ".")
                                            for k in keys)
    if not any(named(keys) and flag in flags for keys, flags in rows):
        problems.append(f"--{flag} (DeepSpeed key '{key}') has no row "
                        "naming both in config.md's Mapping table")
for keys, flags in rows:
    for flag in sorted(flags - all_flags):
        problems.append(f"config.md maps {sorted(keys)} to --{flag}, which "
                        "ds-opt does not have")
for p in problems:
    print("error:", p)
print(f"{len(options)} options with a DeepSpeed key, {len(rows)} rows: "
      f"{len(problems)} problem(s)")
sys.exit(1 if problems else 0)
