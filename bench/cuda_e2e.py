#!/usr/bin/env python3
"""The default model end to end on one GPU, with its peers, in one run (issue: plain decoding
tokens/s, the speculative speedup of each drafter, HF transformers on the same GPU and weights),
plus the synthetic Llama-3.1-8B decode against the PyTorch eager peer. Runs, in this order:

  1. bench_cuda_decode on the default model: a 5-token prompt, with and without programmatic
     dependent launch; a 1000-token prompt; tree verifies of 4..60 nodes;
  2. bench/peers/hf_generate.py (transformers, bf16, the same GGUF) when it can import gguf;
  3. specula-cli specbench --backend cuda for each drafter (plain decoding measured in the
     same run by specbench itself), when --specbench-data is given;
  4. bench_cuda_decode --synthetic llama-3.1-8b and bench/peers/torch_llama_decode.py.

Writes one JSON record (device, driver, commit, command, each step's output and command) to
--out; a step that fails is recorded with its exit code and the tail of its output, and the
others still run.
"""
import argparse
import json
import os
import subprocess
import sys
import time


def nvidia(query):
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout
        return out.strip().splitlines()[0] if out.strip() else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


def step(name, cmd, json_path=None, timeout=600):
    """Runs cmd; its result is the JSON it wrote to json_path, or the last JSON object it printed."""
    start = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        rc, out, err = 124, "", "timed out"
    except OSError as e:
        rc, out, err = 127, "", str(e)
    record = {"step": name, "command": " ".join(cmd), "exit_code": rc, "seconds": round(time.time() - start, 1)}
    result = None
    if rc == 0 and json_path and os.path.exists(json_path):
        with open(json_path) as f:
            result = json.load(f)
    elif rc == 0:
        start_brace = out.find("{")
        if start_brace >= 0:
            try:
                result = json.loads(out[start_brace:])
            except json.JSONDecodeError:
                result = None
    if result is None:
        record["output_tail"] = (out + err)[-3000:]
    else:
        record["result"] = result
    print(f"{name}: exit {rc} in {record['seconds']} s", flush=True)
    return record


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="folder with bench_cuda_decode and specula-cli")
    ap.add_argument("--model", required=True, help="the default model's GGUF file")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/cuda_e2e", help="scratch folder for the steps' files")
    ap.add_argument("--specbench-data", help="Spec-Bench jsonl; runs specbench per drafter")
    ap.add_argument("--specbench-limit", type=int, default=24)
    ap.add_argument("--drafters", nargs="*", default=["ngram", "layerskip", "model"])
    ap.add_argument("--skip-peers", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    dec = os.path.join(a.bin, "bench_cuda_decode")
    cli = os.path.join(a.bin, "specula-cli")
    w = lambda name: os.path.join(a.work, name)
    steps = []
    common = [dec, "--model", a.model, "--commit", a.commit, "--reps", "5", "--tokens", "128"]
    steps.append(step("decode_short_prompt", common + ["--out", w("d1.json")], w("d1.json")))
    steps.append(step("decode_short_prompt_no_pdl", common + ["--pdl", "false", "--out", w("d2.json")], w("d2.json")))
    steps.append(step("decode_1000_token_prompt", common + ["--prompt-tokens", "1000", "--out", w("d3.json")],
                      w("d3.json")))
    steps.append(step("verify_steps", common + ["--verify-nodes", "4", "8", "12", "16", "32", "60", "--out",
                                                w("d4.json")], w("d4.json")))
    if not a.skip_peers:
        steps.append(step("peer_hf_transformers", [sys.executable, os.path.join(here, "peers", "hf_generate.py"),
                                                   "--model-dir", os.path.dirname(a.model), "--new-tokens", "128",
                                                   "--reps", "5", "--commit", a.commit, "--out", w("hf.json")],
                          w("hf.json")))
    if a.specbench_data:
        for d in a.drafters:
            extra = ["--draft-model", a.model] if d == "model" else []
            steps.append(step(f"specbench_{d}", [cli, "specbench", "--model", a.model, "--backend", "cuda", "--data",
                                                 a.specbench_data, "--drafter", d, "--limit", str(a.specbench_limit),
                                                 "--json"] + extra))
    steps.append(step("decode_synthetic_llama_3_1_8b", [dec, "--synthetic", "llama-3.1-8b", "--commit", a.commit,
                                                        "--reps", "3", "--tokens", "64", "--out", w("d8.json")],
                      w("d8.json")))
    if not a.skip_peers:
        steps.append(step("peer_pytorch_eager_llama_3_1_8b",
                          [sys.executable, os.path.join(here, "peers", "torch_llama_decode.py"), "--steps", "64"]))
    record = {"bench": "cuda_e2e", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": a.commit,
              "command": " ".join(sys.argv), "device": {"name": nvidia("name"), "driver": nvidia("driver_version")},
              "steps": steps}
    with open(a.out, "w") as f:
        json.dump(record, f, indent=1)
    return 0 if all(s["exit_code"] == 0 for s in steps) else 1


if __name__ == "__main__":
    sys.exit(main())
