#!/usr/bin/env python3
"""Runs Specula's CPU generation bench and llama.cpp's llama-bench side by side, on the same
GGUF, the same thread count and the same machine, and writes one JSON to bench/results/.

llama.cpp is not part of this repository: build it yourself from its sources and pass the path
of its `llama-bench` binary with --llama-bench (or LLAMA_BENCH=...).

  bench/cpu_vs_llamacpp.py --llama-bench /path/to/llama-bench [--threads 2] [--reps 3]
"""
import argparse, datetime, json, os, subprocess, sys, pathlib

root = pathlib.Path(__file__).resolve().parent.parent

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-bench", default=os.environ.get("LLAMA_BENCH"), required=os.environ.get("LLAMA_BENCH") is None)
    ap.add_argument("--llama-commit", default="unknown", help="commit of the llama.cpp sources used")
    ap.add_argument("--bench", default=str(root / "build/bin/bench_cpu_generate"))
    ap.add_argument("--model", default=str(root / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()

    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip() != ""
    ours_cmd = [a.bench, "--model", a.model, "--threads", str(a.threads), "--prefill", str(a.prefill),
                "--decode", str(a.decode), "--reps", str(a.reps), "--commit", commit + ("-dirty" if dirty else "")]
    ours = json.loads(subprocess.run(ours_cmd, check=True, capture_output=True, text=True).stdout)
    # llama-bench's tg test decodes from an empty context; measure ours the same way (a
    # one-token prompt) so the decode ratio compares like with like.
    ours_tg_cmd = [a.bench, "--model", a.model, "--threads", str(a.threads), "--prefill", "1",
                   "--decode", str(a.decode), "--reps", str(a.reps), "--commit", commit + ("-dirty" if dirty else "")]
    ours_tg = json.loads(subprocess.run(ours_tg_cmd, check=True, capture_output=True, text=True).stdout)

    peer_cmd = [a.llama_bench, "-m", a.model, "-t", str(a.threads), "-p", str(a.prefill), "-n", str(a.decode),
                "-r", str(a.reps), "-o", "json"]
    peer_rows = json.loads(subprocess.run(peer_cmd, check=True, capture_output=True, text=True).stdout)
    peer = {}
    for row in peer_rows:
        kind = "prefill" if row.get("n_prompt", 0) > 0 else "decode"
        peer[kind + "_tokens_per_s"] = row["avg_ts"]
        peer[kind + "_stddev"] = row.get("stddev_ts")
        peer["build_commit"] = row.get("build_commit")
        peer["cpu_info"] = row.get("cpu_info")

    result = {
        "bench": "cpu_vs_llamacpp",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": "CPU: " + ours["host"]["cpu"],
        "host": ours["host"],
        "commit": commit + ("-dirty" if dirty else ""),
        "command": " ".join(sys.argv),
        "model": a.model,
        "model_synthetic": False,
        "threads": a.threads,
        "specula": {
            "prefill_tokens_per_s": ours["mean"]["prefill_tokens_per_s"],
            "decode_tokens_per_s": ours_tg["mean"]["decode_tokens_per_s"],
            "decode_tokens_per_s_after_prefill": ours["mean"]["decode_tokens_per_s"],
            "prefill_command": " ".join(ours_cmd), "prefill_runs": ours["runs"],
            "decode_command": " ".join(ours_tg_cmd), "decode_runs": ours_tg["runs"],
        },
        "llama_cpp": {"command": " ".join(peer_cmd), "commit": a.llama_commit, **peer},
        "ratio": {
            "prefill": ours["mean"]["prefill_tokens_per_s"] / peer["prefill_tokens_per_s"],
            "decode": ours_tg["mean"]["decode_tokens_per_s"] / peer["decode_tokens_per_s"],
        },
        "note": ("both sides report the mean over their reps (llama-bench avg_ts). decode is from an empty "
                 "context on both sides (llama-bench tg); decode_tokens_per_s_after_prefill is ours after "
                 "the prefill prompt, which llama-bench of this version does not measure"),
    }
    out = a.out or str(root / "bench/results" / f"cpu_vs_llamacpp_{datetime.date.today().isoformat()}.json")
    pathlib.Path(out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["ratio"]), "->", out)

if __name__ == "__main__":
    main()
