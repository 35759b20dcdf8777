#!/bin/bash
# Host emulation of the tree-attention kernels against the double-precision reference, for when no
# GPU is at hand: every chunk-kernel variant, dense and sparse, several stages per CTA and partial
# last stages. Threads are std::threads, warp operations meet at per-warp barriers, and cp.async
# copies land only at their wait_group (a read before the wait sees the poisoned buffer). It checks
# indexing, fragment layouts, masks and the pipeline order, not timing; ~4 minutes on 2 cores
# (EMU_QUICK=1: one variant, ~20 s). Usage: tools/tree_attention_emu/run.sh [seed]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${TMPDIR:-/tmp}/tree_attention_emu
mkdir -p "$out"
python3 "$root/tools/tree_attention_emu/gen.py" "$root" "$out"
g++ -std=c++20 -O2 -I/usr/local/cuda/include -I"$root" -I"$out" "$root/tools/tree_attention_emu/emu.cpp" \
  -o "$out/emu" -lpthread
"$out/emu" "$@"
