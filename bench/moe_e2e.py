#!/usr/bin/env python3
"""MoE models on the CUDA backend, timed beside their peer in one run: for each synthetic MoE shape
(random bf16 weights in Mixtral-8x7B's, Qwen1.5-MoE-A2.7B's and OLMoE-1B-7B's shapes, for timing
only), bench_cuda_decode's greedy decode steps and tree verifies, then HF transformers' own class
on the same shapes (bench/peers/hf_moe_decode.py), then the device copy bandwidth (bench_gpu_copy)
as the ceiling the weight bytes a token reads are set against. Each step is its own process, so
a shape's 93 GB (Mixtral on an H200) is freed before the next one.

  python3 bench/moe_e2e.py --bin DIR --commit C --out FILE [--shapes ...] [--skip-peers]

Writes one JSON record (device, driver, commit, command, every step's output and command); a
step that fails is recorded with its exit code and the tail of its output, and the others run.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_e2e import nvidia, step  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="folder with bench_cuda_decode and bench_gpu_copy")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/moe_e2e", help="scratch folder for the steps' files")
    ap.add_argument("--shapes", nargs="*", default=["olmoe-1b-7b", "qwen1.5-moe-a2.7b", "mixtral-8x7b"])
    ap.add_argument("--skip-peers", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    dec = os.path.join(a.bin, "bench_cuda_decode")
    steps = [step("copy_bandwidth", [os.path.join(a.bin, "bench_gpu_copy"), "--commit", a.commit, "--out",
                                     os.path.join(a.work, "copy.json")], os.path.join(a.work, "copy.json"))]
    for shape in a.shapes:
        out = os.path.join(a.work, f"{shape}.json")
        steps.append(step(f"decode_synthetic_{shape}", [dec, "--synthetic", shape, "--commit", a.commit, "--reps", "2",
                                                       "--tokens", "32", "--verify-nodes", "4", "8", "16",
                                                       "--out", out], out))
        if not a.skip_peers:
            steps.append(step(f"peer_hf_transformers_{shape}",
                              [sys.executable, os.path.join(here, "peers", "hf_moe_decode.py"), "--shape", shape,
                               "--steps", "16"]))
    record = {"bench": "moe_e2e", "synthetic": True, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "commit": a.commit, "command": " ".join(sys.argv),
              "device": {"name": nvidia("name"), "driver": nvidia("driver_version")}, "steps": steps}
    with open(a.out, "w") as f:
        json.dump(record, f, indent=1)
    return 0 if all(s["exit_code"] == 0 for s in steps) else 1


if __name__ == "__main__":
    sys.exit(main())
