#!/usr/bin/env python3
"""Dense tree-verify attention (bench_attention) against PyTorch scaled_dot_product_attention on
the same KV bytes, in the same run, plus the measured ceilings (copy bandwidth from the binary,
bf16 GEMM rate through torch.matmul, i.e. cuBLAS). Writes one JSON naming device, driver, commit,
command.

SDPA baselines (contiguous K/V [1, Hk, ctx + nodes, 128], GQA through enable_gqa):
  flash:     FLASH_ATTENTION backend, no mask (flash takes no arbitrary mask): same bytes, no tree mask
  efficient: EFFICIENT_ATTENTION backend with the boolean tree mask [nodes, ctx + nodes]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(fn, iters):
    for _ in range(3):
        fn(0)
    torch.cuda.synchronize()
    times = []
    for i in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(i)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def gemm_tflops(n=8192, iters=10):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = median_ms(lambda i: torch.matmul(a, b), iters)
    return 2 * n**3 / ms / 1e9


def tree_mask(nodes, ctx, gen):
    anc = []
    for j in range(nodes):
        parent = -1 if j == 0 else int(torch.randint(0, j, (1,), generator=gen))
        anc.append({j} | (anc[parent] if parent >= 0 else set()))
    m = torch.zeros(nodes, ctx + nodes, dtype=torch.bool)
    m[:, :ctx] = True
    for i in range(nodes):
        for j in anc[i]:
            m[i, ctx + j] = True
    return m


def sdpa_ms(ctx, nodes, hq, hk, iters):
    kv_bytes = 2 * hk * (ctx + nodes) * 128 * 2
    copies = max(1, (512 << 20) // (2 * kv_bytes))
    q = torch.randn(1, hq, nodes, 128, device="cuda", dtype=torch.bfloat16)
    ks = [torch.randn(1, hk, ctx + nodes, 128, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    vs = [torch.randn(1, hk, ctx + nodes, 128, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    gen = torch.Generator().manual_seed(ctx * 131 + nodes)
    mask = tree_mask(nodes, ctx, gen).cuda()[None, None]
    out = {}
    # Efficient-attention takes no GQA: its K/V are expanded to hq heads beforehand (outside the
    # timing), so it reads hq/hk times the KV bytes.
    kx = [k.repeat_interleave(hq // hk, dim=1) for k in ks[:1]]
    vx = [v.repeat_interleave(hq // hk, dim=1) for v in vs[:1]]
    for name, backend, m, kk, vv, gqa in (("flash_nomask", SDPBackend.FLASH_ATTENTION, None, ks, vs, True),
                                          ("efficient_treemask", SDPBackend.EFFICIENT_ATTENTION, mask, kx, vx, False)):
        try:
            with sdpa_kernel(backend):
                out[name] = median_ms(
                    lambda i: F.scaled_dot_product_attention(q, kk[i % len(kk)], vv[i % len(vv)], attn_mask=m,
                                                             enable_gqa=gqa), iters)
        except Exception as e:  # a backend that refuses the shape is reported, not hidden
            out[name] = None
            out[name + "_error"] = str(e).splitlines()[0][:200]
    del ks, vs, kx, vx
    torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=".carry/cuda/bin/bench_attention")
    ap.add_argument("--out", required=True)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--contexts", default="8192,16384,32768,65536,131072")
    ap.add_argument("--nodes", default="8,16,32,64")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--bench-json", default="/tmp/bench_attention.json")
    ap.add_argument("--base-bench", default="", help="an older bench_attention run in the same call (before/after)")
    ap.add_argument("--base-commit", default="base")
    ap.add_argument("--dense-only", action="store_true", help="pass --dense-only to bench_attention (no sparse rows)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("attention_vs_sdpa: skipped: no GPU", file=sys.stderr)
        return 0
    ctxs = [int(x) for x in args.contexts.split(",")]
    nodes = [int(x) for x in args.nodes.split(",")]
    cmd = [args.bench, "--commit", args.commit, "--out", args.bench_json, "--iterations", str(args.iterations),
           "--contexts", *map(str, ctxs), "--nodes", *map(str, nodes)] + (["--dense-only"] if args.dense_only else [])
    t0 = time.time()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    print(f"bench_attention done in {time.time() - t0:.1f} s", file=sys.stderr)
    with open(args.bench_json) as f:
        ours = json.load(f)
    base = None
    if args.base_bench:
        base_json = args.bench_json + ".base.json"
        base_cmd = [args.base_bench, "--commit", args.base_commit, "--out", base_json, "--iterations",
                    str(args.iterations), "--contexts", *map(str, ctxs), "--nodes", *map(str, nodes)]
        base_cmd += ["--dense-only"] if args.dense_only else []
        subprocess.run(base_cmd, check=True, stdout=subprocess.DEVNULL)
        with open(base_json) as f:
            base = json.load(f)
    gemm = gemm_tflops()
    compare = []
    for ctx in ctxs:
        for n in nodes:
            dense = next(r for r in ours["rows"] if r["kernel"] == "dense" and r["context"] == ctx and r["nodes"] == n)
            s = sdpa_ms(ctx, n, ours["shape"]["q_heads"], ours["shape"]["kv_heads"], args.iterations)
            row = {"context": ctx, "nodes": n, "ours_dense_ms": dense["ms"], "ours_fraction_of_copy": dense["fraction_of_copy"], **s}
            for k in ("flash_nomask", "efficient_treemask"):
                row["speedup_vs_" + k] = (s[k] / dense["ms"]) if s.get(k) else None
            if base:
                old = next(r for r in base["rows"] if r["kernel"] == "dense" and r["context"] == ctx and r["nodes"] == n)
                row["base_dense_ms"] = old["ms"]
                row["speedup_vs_base"] = old["ms"] / dense["ms"]
                row["base_speedup_vs_flash_nomask"] = (s["flash_nomask"] / old["ms"]) if s.get("flash_nomask") else None
            compare.append(row)
            print(f"ctx={ctx:6d} nodes={n:2d} ours {dense['ms']:.4f} ms ({100*dense['fraction_of_copy']:.0f}% copy)  "
                  f"base {row.get('base_dense_ms')}  flash {s.get('flash_nomask')}  eff+mask {s.get('efficient_treemask')}",
                  file=sys.stderr)
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip()
    result = {
        "bench": "attention_vs_sdpa",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": {"name": torch.cuda.get_device_name(0), "driver": driver, "torch": torch.__version__},
        "commit": args.commit,
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "bench_command": " ".join(cmd),
        "ceilings": {"copy_bandwidth_GBps": ours["copy_bandwidth_GBps"], "bf16_gemm_TFLOPs_8192_cublas_via_torch": gemm},
        "sdpa_note": "flash_nomask: SDPA flash, no mask (flash takes no tree mask), same KV bytes; "
                     "efficient_treemask: SDPA efficient-attention with the boolean tree mask, K/V expanded to the q heads "
                     "(it takes no GQA), one copy; flash uses enable_gqa; K/V contiguous [1, Hk, ctx+nodes, 128] bf16, copies rotated past L2",
        "compare": compare,
        "bench_attention": ours,
        "base_commit": args.base_commit if base else None,
        "bench_attention_base": base,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
