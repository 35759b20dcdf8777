#!/usr/bin/env python3
"""Runs the GPU test binaries (gtest) and compute-sanitizer over them on the GPU machine, and
writes one JSON record naming the device, driver, commit and command: which tests passed, the
lines the tests print about their numbers (relative L2, greedy agreement, ...), and each
sanitizer's summary. For bench/results/, where every GPU figure lives.

  python3 bench/gpu_checks.py --bin DIR --commit C --out FILE \
      --tests kernels_cuda_skinny_gemm_test engine_cuda_cuda_backend_test ... \
      --memcheck engine_cuda_cuda_backend_test:*Graph* --racecheck kernels_cuda_model_ops_test
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time


def run(cmd, timeout):
    """(exit code, stdout + stderr, seconds). Past the timeout the command's whole process group
    is killed, not only the command: compute-sanitizer's target outlived a killed sanitizer and
    kept the GPU busy for minutes, slowing every benchmark after it
    (bench/results/skinny_staged_chunks_s17_h200_2026-12-02.json)."""
    start = time.time()
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    except FileNotFoundError:
        return 127, f"{cmd[0]}: not found", 0.0
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out, time.time() - start
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = p.communicate()
        return 124, (out or "") + "\n[timed out]", time.time() - start


def nvidia(query):
    rc, out, _ = run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], 30)
    return out.strip().splitlines()[0] if rc == 0 and out.strip() else ""


# Lines worth keeping from a test's output: its measured numbers, not gtest's bookkeeping.
NUMBERS = re.compile(r"rel L2|identical|diverge|seed|worst|skipped", re.IGNORECASE)


def gtest(binary, gtest_filter, timeout):
    cmd = [binary] + ([f"--gtest_filter={gtest_filter}"] if gtest_filter else [])
    rc, out, secs = run(cmd, timeout)
    passed = re.findall(r"^\[       OK \] (\S+)", out, re.MULTILINE)
    failed = sorted(set(re.findall(r"^\[  FAILED  \] (\S+?)(?: \(|,|$)", out, re.MULTILINE)))
    failures = [l for l in out.splitlines() if "Failure" in l or l.startswith("Expected") or "actual:" in l]
    return {"binary": os.path.basename(binary), "filter": gtest_filter or "", "exit_code": rc, "seconds": round(secs, 1),
            "passed": passed, "failed": failed, "failure_lines": failures[:40],
            "measurements": [l.strip() for l in out.splitlines() if NUMBERS.search(l)][:80]}


def sanitizer(tool, binary, gtest_filter, timeout):
    cmd = ["compute-sanitizer", "--tool", tool, binary] + ([f"--gtest_filter={gtest_filter}"] if gtest_filter else [])
    rc, out, secs = run(cmd, timeout)
    summary = [l.strip() for l in out.splitlines() if "SUMMARY" in l]
    return {"tool": tool, "binary": os.path.basename(binary), "filter": gtest_filter or "", "exit_code": rc,
            "seconds": round(secs, 1), "summary": summary[-1] if summary else "(no summary: see exit code)"}


def split_spec(spec):
    name, _, flt = spec.partition(":")
    return name, flt


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="folder holding the test binaries")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tests", nargs="*", default=[], help="BINARY[:GTEST_FILTER] to run")
    ap.add_argument("--memcheck", nargs="*", default=[], help="BINARY[:GTEST_FILTER] under memcheck")
    ap.add_argument("--racecheck", nargs="*", default=[], help="BINARY[:GTEST_FILTER] under racecheck")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per binary")
    a = ap.parse_args()
    for spec in a.tests + a.memcheck + a.racecheck:
        path = os.path.join(a.bin, split_spec(spec)[0])
        if not os.access(path, os.X_OK):
            sys.exit(f"gpu_checks: {path}: not an executable test binary")
    record = {
        "bench": "gpu_checks",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": a.commit,
        "command": " ".join(sys.argv),
        "device": {"name": nvidia("name"), "driver": nvidia("driver_version")},
        "tests": [gtest(os.path.join(a.bin, n), f, a.timeout) for n, f in map(split_spec, a.tests)],
        "sanitizers": [sanitizer("memcheck", os.path.join(a.bin, n), f, a.timeout) for n, f in map(split_spec, a.memcheck)]
        + [sanitizer("racecheck", os.path.join(a.bin, n), f, a.timeout) for n, f in map(split_spec, a.racecheck)],
    }
    with open(a.out, "w") as f:
        json.dump(record, f, indent=1)
    for t in record["tests"]:
        print(f"{t['binary']}: {len(t['passed'])} passed, {len(t['failed'])} failed {t['failed'] or ''}")
    for s in record["sanitizers"]:
        print(f"{s['tool']} {s['binary']} {s['filter']}: {s['summary']}")
    bad = any(t["failed"] or t["exit_code"] != 0 for t in record["tests"]) or any(
        s["exit_code"] != 0 for s in record["sanitizers"])
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
