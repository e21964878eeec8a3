#!/usr/bin/env bash
# Runs "$@" and checks how it fails on bad input: exit code 1 (not a crash,
# not 0), stdout empty, stderr exactly one line that starts with 'error: '.
# Echoes that line to stdout so that the test can FileCheck its text.
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
"$@" >"$out" 2>"$err"
rc=$?
lines=$(wc -l <"$err")
if [ "$rc" -ne 1 ]; then
  echo "bad-input: expected exit code 1, got $rc from: $*" >&2
  cat "$err" >&2
  exit 2
fi
if [ -s "$out" ]; then
  echo "bad-input: expected no stdout from: $*" >&2
  exit 2
fi
if [ "$lines" -ne 1 ] || ! head -n1 "$err" | grep -q '^error: '; then
  echo "bad-input: expected one 'error: ...' line on stderr, got $lines:" >&2
  cat "$err" >&2
  exit 2
fi
cat "$err"
