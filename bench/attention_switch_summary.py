#!/usr/bin/env python3
"""Folds what bench/attention_switch_ab.sh or attention_binary_ab.sh left (the logs folder, or its
$OUT tgz unpacked) into one bench/results JSON: the phase summary lines as checks, each
bench_attention row's ms and batched ms off and on (one value a round), whether the call took the
switched path, and bench_cuda_decode's 8B verify times off and on.

Usage: bench/attention_switch_summary.py DIR SWITCH COMMIT OUT.json [--note TEXT]
"""
import argparse
import glob
import json
import os
import re
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"attention_switch_summary: cannot read {path}: {e}")


def change_name(s):
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", s):
        raise argparse.ArgumentTypeError(f"bad switch name {s!r} (lower case, digits and '-')")
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    # kv-multicast or ws-pingpong (attention_switch_ab.sh: the rows then say whether the call took
    # the switched path), or the name of a change timed by attention_binary_ab.sh (old = off).
    ap.add_argument("switch", type=change_name)
    ap.add_argument("commit")
    ap.add_argument("out")
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    key = args.switch.replace("-", "_")
    result = {"bench": f"{key}_ab", "commit": args.commit, "switch": args.switch, "note": args.note}
    summary = os.path.join(args.dir, "summary.txt")
    if os.path.exists(summary):
        with open(summary) as f:
            result["checks"] = [line.rstrip("\n") for line in f if line.strip()]
    attention = {}
    files = sorted(glob.glob(os.path.join(args.dir, "attention_*.json")))
    for path in files:
        m = re.match(r"attention_(on|off)\.(\d+)\.json$", os.path.basename(path))
        if not m:
            continue
        d = load(path)
        for k in ("device", "host", "copy_bandwidth_GBps"):
            result.setdefault(k, d.get(k))
        result.setdefault(f"{m.group(1)}_commit", d.get("commit"))
        result.setdefault("attention_command", d.get("command"))
        for row in d.get("rows", []):
            name = f"{row['kernel']} ctx={row['context']} nodes={row['nodes']}"
            entry = attention.setdefault(name, {})
            entry.setdefault(f"{m.group(1)}_ms", []).append(row["ms"])
            if "ms_batched" in row:
                entry.setdefault(f"{m.group(1)}_ms_batched", []).append(row["ms_batched"])
            if m.group(1) == "on" and key in row:
                entry[f"{key}_taken"] = row[key]
    if attention:
        result["attention_runs"] = attention
    verify = {}
    for path in sorted(glob.glob(os.path.join(args.dir, "verify8b_*.json"))):
        m = re.match(r"verify8b_(true|false)\.(\d+)\.json$", os.path.basename(path))
        if not m:
            continue
        d = load(path)
        result.setdefault("verify_command", d.get("command"))
        lv = d.get("results", {}).get("long_verify", {})
        for v in lv.get("verifies", []):
            verify.setdefault(v["verify"], {}).setdefault(f"{m.group(1)}_ms_last_logits", []).append(
                v["ms_last_logits"])
        verify.setdefault("byte_floor_ms_dense", next(
            (v["byte_floor_ms"] for v in lv.get("verifies", []) if v["verify"] == "dense"), None))
    if verify:
        result["verify_8b_64k"] = verify
    if not attention and not verify and "checks" not in result:
        sys.exit(f"attention_switch_summary: nothing from attention_switch_ab.sh in {args.dir}")
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
