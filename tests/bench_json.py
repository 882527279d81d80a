#!/usr/bin/python3
"""bench_json.py -- what `attn bench --json` writes, across its reports.

Usage: bench_json.py DOC REPORT.json... (DOC: docs/performance.md).
Reads the reports of several runs (the whole bench and each section alone)
and checks, printing "ok NAME" / "FAIL NAME: why":
- every report is JSON (no NaN or Infinity);
- a key means one thing in every report: at the same place (its path, rows
  of a list taken together) its values are of one JSON type, null aside
  (the keys of objects may differ: a section's rows are of several kinds,
  and each report holds its sections). --layer's "peak_gflops" was a
  number beside the whole report's object of peaks by ISA, and one varlen
  row's "lengths" a text beside the others' lists;
- every report names the machine: `cpu`, `isa` and `threads` (--ggml's
  named only its threads);
- every key is named (as `key` or "key") in DOC's section on the JSON.
Nothing is timed.
"""
import json
import re
import sys

failed = 0


def report(name, problems):
    global failed
    print(f"ok {name}" if not problems else f"FAIL {name}: {'; '.join(problems[:8])}", flush=True)
    failed += bool(problems)


def kind(value):
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def walk(value, path, seen, where):
    """Record in seen[path] each JSON type found there, with a report that has it."""
    k = kind(value)
    if k is not None:
        seen.setdefault(path, {}).setdefault(k, where)
    if isinstance(value, dict):
        for key, v in value.items():
            walk(v, f"{path}.{key}", seen, where)
    elif isinstance(value, list):
        for v in value:
            walk(v, f"{path}[]", seen, where)


def main():
    doc = open(sys.argv[1], encoding="utf-8").read()
    start = doc.find("## The report as JSON")
    section = doc[start:doc.find("\n## ", start + 1)] if start >= 0 else ""
    named = set(re.findall(r'[`"]([A-Za-z_][A-Za-z0-9_]*)[`"]', section))
    seen, bad_json = {}, []

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    unnamed = []
    for name in sys.argv[2:]:
        try:
            with open(name, encoding="utf-8") as f:
                value = json.load(f, parse_constant=refuse)
        except ValueError as e:
            bad_json.append(f"{name}: {e}")
            continue
        walk(value, "", seen, name)
        lacks = [k for k in ("cpu", "isa", "threads") if not isinstance(value, dict) or k not in value]
        if lacks:
            unnamed.append(f"{name} has no {lacks}")
    report("bench_json_reports_are_json", bad_json)
    report("bench_json_reports_name_the_machine", unnamed)
    mixed = []
    for path, kinds in sorted(seen.items()):
        if len(kinds) > 1:
            mixed.append(f"{path} is " + " and ".join(f"{k} (in {w})" for k, w in kinds.items()))
    report("bench_json_one_meaning_per_key", mixed)
    keys = {path.rsplit(".", 1)[1].rstrip("[]") for path in seen if "." in path}
    missing = sorted(keys - named)
    report("bench_json_keys_documented",
           [f"docs/performance.md's \"The report as JSON\" names no {missing}"] if missing else [])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
