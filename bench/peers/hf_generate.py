#!/usr/bin/env python3
"""Peer figure for plain greedy decoding of the default model: HF transformers on the same GPU
and the same GGUF file (SmolLM2-135M-Instruct.Q4_1.gguf), prints one JSON object.

transformers' GGUF loader dequantizes the Q4_1 weights to --dtype (bf16) when it loads them,
so the peer reads bf16 weights while Specula reads Q4_1: same model and values (up to bf16
rounding of the dequantized weights), different bytes per token.

The prompt is the one bench/cuda_decode.cpp uses: "The capital of France is" encoded without
special tokens, preceded by BOS only when the GGUF says tokenizer.ggml.add_bos_token (that
file says false, so no BOS). Modes (--modes, each timed --reps times after --warmup runs):
  loop      prefill (last-position logits only), then --new-tokens single-token forward passes
            with the KV cache (DynamicCache), argmax read on the host each step: the same loop
            and the same definition as bench_cuda_decode, tokens/s = decode steps / decode time
            (prefill excluded; reported apart as prefill_ms_runs).
  generate  model.generate(do_sample=False, max_new_tokens=N, min_new_tokens=N), default cache;
            tokens/s = N / wall time of the whole call (prefill included). min_new_tokens bans
            EOS until N tokens, so its tokens part from the loop's where the loop's argmax is EOS.
  static    the same with cache_implementation="static"; on CUDA transformers then compiles the
            decode forward with torch.compile (mode reduce-overhead, i.e. CUDA graphs) on the
            warm-up runs; "compiled" in the output says whether it did.
Every timing is bracketed by torch.cuda.synchronize() on CUDA.

Needs the gguf package besides torch and transformers; on a machine without it and without a
network, carry its wheel and install it with pip --no-index --no-deps --target DIR, then run
with PYTHONPATH=DIR.
"""
import argparse
import datetime
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
import json
import traceback


def fail(message):
    print(f"hf_generate: {message}", file=sys.stderr)
    sys.exit(1)


def nvidia_smi():
    """(name, driver) of GPU 0 from nvidia-smi, or (None, None) without one."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    if out.returncode != 0 or not out.stdout.strip():
        return None, None
    name, _, driver = out.stdout.strip().splitlines()[0].partition(",")
    return name.strip(), driver.strip()


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def git_commit():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def gguf_add_bos(path):
    """(add_bos_token, bos_token_id) from the GGUF's tokenizer metadata, as Specula's tokenizer reads them."""
    import gguf
    reader = gguf.GGUFReader(path)

    def scalar(key):
        field = reader.fields.get(key)
        if field is None:
            return None
        return field.parts[field.data[0]].tolist()[0]

    add_bos, bos = scalar("tokenizer.ggml.add_bos_token"), scalar("tokenizer.ggml.bos_token_id")
    return bool(add_bos) if add_bos is not None else False, bos


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Example (GPU machine, gguf wheel installed in /tmp/site): "
                                       "PYTHONPATH=/tmp/site python3 bench/peers/hf_generate.py --model-dir /tmp/models "
                                       "--new-tokens 128 --reps 5 --out $OUT/hf_generate_h100.json")
    p.add_argument("--model-dir", default="models", help="folder holding the GGUF file (default: models)")
    p.add_argument("--model-file", default="SmolLM2-135M-Instruct.Q4_1.gguf", help="GGUF file name in --model-dir")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu is for checking the script")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--prompt", default="The capital of France is")
    p.add_argument("--new-tokens", type=int, default=128, help="N: decode steps (loop) / new tokens (generate)")
    p.add_argument("--reps", type=int, default=5, help="timed runs per mode; the median is reported")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs per mode first (static compiles here)")
    p.add_argument("--modes", default="loop,generate,static", help="comma-separated: loop, generate, static")
    p.add_argument("--first-tokens", type=int, default=16, help="how many generated token ids to report")
    p.add_argument("--commit", default=None,
                   help="commit of the run this record belongs to (default: git HEAD of this script's checkout)")
    p.add_argument("--out", help="also write the JSON object to this file")
    a = p.parse_args()

    modes = [m for m in a.modes.split(",") if m]
    unknown = [m for m in modes if m not in ("loop", "generate", "static")]
    if unknown or not modes:
        fail(f"--modes: unknown mode(s) {unknown or a.modes!r}; choose from loop, generate, static")
    if a.new_tokens < 1 or a.reps < 1 or a.warmup < 0:
        fail("--new-tokens and --reps must be >= 1, --warmup >= 0")
    path = os.path.join(a.model_dir, a.model_file)
    if not os.path.isfile(path):
        fail(f"model file not found: {path}")

    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
        import gguf  # noqa: F401  (transformers needs it for gguf_file=; fail here with a clear message)
    except ImportError as e:
        fail(f"missing Python package: {e.name} ({e}); the gguf wheel can be carried, see the docstring")
    if a.device == "cuda" and not torch.cuda.is_available():
        fail("--device cuda but torch sees no CUDA device")
    dtype = getattr(torch, a.dtype)
    dev = torch.device(a.device)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(a.model_dir, gguf_file=a.model_file)
    model = AutoModelForCausalLM.from_pretrained(a.model_dir, gguf_file=a.model_file, dtype=dtype)
    model = model.to(dev).eval()
    load_s = time.perf_counter() - t0

    add_bos, bos_id = gguf_add_bos(path)
    ids = tokenizer.encode(a.prompt, add_special_tokens=False)
    if add_bos and bos_id is not None:
        ids = [bos_id] + ids
    prompt = torch.tensor([ids], dtype=torch.long, device=dev)
    mask = torch.ones_like(prompt)
    eos = model.generation_config.eos_token_id
    pad = eos[0] if isinstance(eos, list) else eos
    N = a.new_tokens

    @torch.inference_mode()
    def run_loop():
        sync()
        t0 = time.perf_counter()
        out = model(input_ids=prompt, attention_mask=mask, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        tok = int(out.logits[0, -1].argmax())
        sync()
        t1 = time.perf_counter()
        tokens = []
        step_ids = torch.empty((1, 1), dtype=torch.long, device=dev)
        for _ in range(N):
            tokens.append(tok)
            step_ids.fill_(tok)
            out = model(input_ids=step_ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            tok = int(out.logits[0, -1].argmax())  # host read each step, as bench_cuda_decode does
        sync()
        t2 = time.perf_counter()
        return {"tokens_per_s": N / (t2 - t1), "prefill_ms": (t1 - t0) * 1e3, "tokens": tokens}

    @torch.inference_mode()
    def run_generate(static):
        kwargs = dict(do_sample=False, max_new_tokens=N, min_new_tokens=N, use_cache=True, pad_token_id=pad,
                      temperature=None, top_p=None, top_k=None)
        if static:
            kwargs["cache_implementation"] = "static"
        sync()
        t0 = time.perf_counter()
        out = model.generate(prompt, attention_mask=mask, **kwargs)
        sync()
        t1 = time.perf_counter()
        tokens = out[0, prompt.shape[1]:].tolist()
        if len(tokens) != N:
            fail(f"generate returned {len(tokens)} new tokens, asked for {N}")
        return {"tokens_per_s": N / (t1 - t0), "tokens": tokens}

    labels = {
        "loop": "manual loop: prefill, then N one-token forward passes with DynamicCache; decode steps / decode time",
        "generate": "model.generate(do_sample=False, max_new_tokens=N, min_new_tokens=N), default cache; "
                    "N / wall time including prefill",
        "static": "model.generate as above with cache_implementation='static' (transformers auto-compiles "
                  "the decode forward with torch.compile on CUDA); N / wall time including prefill",
    }
    results = {}
    for mode in modes:
        fn = run_loop if mode == "loop" else (lambda s=(mode == "static"): run_generate(s))
        t0 = time.perf_counter()
        try:
            for _ in range(a.warmup):
                fn()
            warmup_s = time.perf_counter() - t0
            runs = [fn() for _ in range(a.reps)]
        except Exception as e:  # e.g. torch.compile failing on the device: keep the other modes' numbers
            traceback.print_exc()
            results[mode] = {"what": labels[mode], "error": f"{type(e).__name__}: {e}"}
            continue
        tps = [r["tokens_per_s"] for r in runs]
        entry = {"what": labels[mode], "tokens_per_s_runs": tps, "median_tokens_per_s": statistics.median(tps),
                 "warmup_runs": a.warmup, "warmup_seconds": warmup_s,
                 "first_tokens": runs[0]["tokens"][:a.first_tokens],
                 "tokens_same_every_run": all(r["tokens"] == runs[0]["tokens"] for r in runs)}
        if mode == "loop":
            entry["prefill_ms_runs"] = [r["prefill_ms"] for r in runs]
        if mode == "static":
            entry["compiled"] = hasattr(model, "_compiled_call")
        entry["_all_tokens"] = runs[0]["tokens"]
        results[mode] = entry

    # Greedy decoding of the same weights, but the modes need not agree to the last token:
    # generate's min_new_tokens bans EOS until N tokens (the loop, like bench_cuda_decode, takes
    # the raw argmax), and the static cache attends over its padded length, which rounds bf16
    # differently and can flip a near-tie. Report how far each mode agrees with the first one.
    measured = [m for m in modes if "_all_tokens" in results[m]]
    if not measured:
        fail("no mode ran: " + "; ".join(f"{m}: {results[m]['error']}" for m in modes))
    reference_mode = measured[0]
    reference = results[reference_mode]["_all_tokens"]
    for mode in measured:
        entry = results[mode]
        tokens = entry.pop("_all_tokens")
        n = 0
        while n < min(len(tokens), len(reference)) and tokens[n] == reference[n]:
            n += 1
        entry[f"same_tokens_as_{reference_mode}_for_first"] = n

    gpu_name, driver = nvidia_smi() if dev.type == "cuda" else (None, None)
    if dev.type == "cuda":
        device = {"name": torch.cuda.get_device_name(0), "driver": driver, "nvidia_smi_name": gpu_name,
                  "cuda_runtime": torch.version.cuda}
    else:
        device = {"name": f"CPU: {cpu_name()}", "driver": None, "threads": torch.get_num_threads()}
    import gguf as gguf_module
    doc = {
        "bench": "hf_generate",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": a.commit or git_commit(),
        "command": " ".join(shlex.quote(x) for x in [os.path.basename(sys.executable)] + sys.argv),
        "device": device,
        "host": {"cpu": cpu_name(), "hardware_threads": os.cpu_count(), "kernel": platform.release()},
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__,
                     "gguf": getattr(gguf_module, "__version__", None) or _dist_version("gguf")},
        "model": path,
        "weights": f"GGUF dequantized by transformers to {a.dtype} at load time",
        "dtype": a.dtype,
        "load_seconds": load_s,
        "prompt": a.prompt,
        "prompt_add_bos": add_bos,
        "prompt_ids": ids,
        "prompt_tokens": len(ids),
        "new_tokens": N,
        "reps": a.reps,
        "timing": "median of --reps runs after --warmup runs, time.perf_counter bracketed by "
                  "torch.cuda.synchronize on CUDA",
        "results": results,
    }
    text = json.dumps(doc, indent=1)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


def _dist_version(name):
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:
        return None


if __name__ == "__main__":
    main()
