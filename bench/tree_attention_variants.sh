#!/bin/bash
# Tree-verify attention variants side by side on the GPU machine (one device call): the GPU test
# under each SPECULA_TREE_ATTN setting (variants for <= 64, <= 128, <= 192 and more query rows a kv head;
# kernels/cuda/tree_attention.cu lists them), bench_attention --dense-only per setting, and the
# same bench from a baseline binary (bench_attention_base, if present) for a before/after in one
# run. SANITIZE=1 adds memcheck and racecheck on the default. Logs go to /tmp/tree_attn_variants
# and, after each phase, into $OUT/variants.tgz (the device returns at most 8 files).
# Usage: bench/tree_attention_variants.sh <dir with kernels_cuda_attention_test and bench_attention>
#        <commit> [settings, space-separated]
C=${1:-.carry/treeattn}
COMMIT=${2:-unknown}
SETTINGS=${3:-"m1b4,q2b4w4,q2b4s4"}
R=/tmp/tree_attn_variants
mkdir -p "$R"
snap() { tar czf "$OUT/variants.tgz" -C "$R" .; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$R/smi.txt"
for v in $SETTINGS; do
  SPECULA_TREE_ATTN=$v timeout 45 "$C/kernels_cuda_attention_test" > "$R/test_$v.log" 2>&1
  echo "test $v rc=$?"
  grep -E "rel_err|FAILED" "$R/test_$v.log" | grep -vE "rel_err=[0-9.]+e-0[3-9]" | head -5
done
snap
BENCH="--dense-only --iterations 30 --contexts 8192 32768 131072 --nodes 8 16 32 64"
if [ -x "$C/bench_attention_base" ]; then
  timeout 50 "$C/bench_attention_base" $BENCH --commit "base" --out "$R/bench_base.json" > /dev/null 2> "$R/bench_base.err"
  echo "bench base rc=$?"
fi
for v in $SETTINGS; do
  SPECULA_TREE_ATTN=$v timeout 50 "$C/bench_attention" $BENCH --commit "$COMMIT-$v" --out "$R/bench_$v.json" \
    > /dev/null 2> "$R/bench_$v.err"
  echo "bench $v rc=$?"
done
snap
for f in "$R"/bench_*.err; do echo "== $(basename "$f" .err)"; grep -E "^dense" "$f"; done
if [ "${SANITIZE:-0}" = 1 ]; then
  timeout 70 compute-sanitizer --tool memcheck "$C/kernels_cuda_attention_test" > "$R/memcheck.log" 2>&1
  echo "memcheck (default variants) rc=$?"; tail -2 "$R/memcheck.log"
  snap
  timeout 70 compute-sanitizer --tool racecheck "$C/kernels_cuda_attention_test" > "$R/racecheck.log" 2>&1
  echo "racecheck (default variants) rc=$?"; tail -2 "$R/racecheck.log"
  snap
fi
