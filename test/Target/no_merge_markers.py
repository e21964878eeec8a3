#!/usr/bin/python3
"""Lists the files under ROOT (source, tests, docs) that keep a
merge-conflict marker: a line that starts with seven '<' or '>' followed by
a space or the line's end. Build directories, .git and caches are skipped.

    no_merge_markers.py ROOT
"""
import os
import re
import sys

MARKER = re.compile(r"^(<{7}|>{7})( |$)", re.M)
SUFFIXES = (".md", ".cpp", ".h", ".td", ".py", ".test", ".mlir", ".txt",
            ".sh", ".cu", ".cuh", ".proto", ".json", ".yaml", ".in")


def main():
    root = sys.argv[1]
    bad = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs
                   if x not in (".git", "__pycache__") and not x.startswith("build")]
        for f in files:
            path = os.path.join(d, f)
            if f.endswith(SUFFIXES):
                with open(path, errors="replace") as fh:
                    if MARKER.search(fh.read()):
                        bad.append(os.path.relpath(path, root))
    print("files with merge markers:", len(bad), *sorted(bad))


if __name__ == "__main__":
    main()
