#!/bin/bash
# Tree-verify attention variants side by side on the GPU machine (one device call): the GPU test
# under each SPECULA_TREE_ATTN pair (<= 64 rows, > 64 rows; kernels/cuda/tree_attention.cu lists
# the variants), bench_attention --dense-only per pair, then memcheck and racecheck on the
# default. Logs go to /tmp/tree_attn_variants and, after each phase, into $OUT/variants.tgz (the
# device returns at most 8 files). Usage: bench/tree_attention_variants.sh <dir with
# kernels_cuda_attention_test and bench_attention> <commit>
C=${1:-.carry/treeattn}
COMMIT=${2:-unknown}
PAIRS="m1b2,m2b1 m1b4,m2b2 m1b1,m2b4"
R=/tmp/tree_attn_variants
mkdir -p "$R"
snap() { tar czf "$OUT/variants.tgz" -C "$R" .; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$R/smi.txt"
for v in $PAIRS; do
  SPECULA_TREE_ATTN=$v timeout 45 "$C/kernels_cuda_attention_test" > "$R/test_$v.log" 2>&1
  echo "test $v rc=$?"
  grep -E "rel_err|FAILED" "$R/test_$v.log" | grep -vE "rel_err=[0-9.]+e-0[3-9]" | head -5
done
snap
for v in $PAIRS; do
  SPECULA_TREE_ATTN=$v timeout 50 "$C/bench_attention" --dense-only --commit "$COMMIT-$v" --iterations 30 \
    --contexts 8192 32768 131072 --nodes 8 16 32 64 --out "$R/bench_$v.json" > /dev/null 2> "$R/bench_$v.err"
  echo "bench $v rc=$?"
done
snap
for v in $PAIRS; do echo "== $v"; grep -E "^dense" "$R/bench_$v.err"; done
timeout 70 compute-sanitizer --tool memcheck "$C/kernels_cuda_attention_test" > "$R/memcheck.log" 2>&1
echo "memcheck (default variants) rc=$?"; tail -2 "$R/memcheck.log"
snap
timeout 70 compute-sanitizer --tool racecheck "$C/kernels_cuda_attention_test" > "$R/racecheck.log" 2>&1
echo "racecheck (default variants) rc=$?"; tail -2 "$R/racecheck.log"
snap
