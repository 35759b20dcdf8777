#!/bin/bash
# SPECULA_SPARSE_WHOLE_STAGES (kernels/cuda/tree_attention.cu, read_stage) checked and timed in one
# device call: 0 masks every sparse stage (the path before session 25), anything else (or unset) is
# the default, whole stages. Session 25 ran it before the default changed
# (bench/results/sparse_whole_stages_ab_s25_h100_2026-12-07.json); it stays for re-measuring:
#   1. kernels_cuda_attention_test, and its sparse test under SPECULA_TREE_ATTN=wg4s4 / wg4p4
#      (the selectable tiers that also call read_stage);
#   2. racecheck and memcheck of CudaSparseAttention.* (MaskedStagesMatchReference sets it to 0);
#   3. bench_attention at 64K, 10% of blocks kept, switch off / on / off / on (one binary);
#   4. if bench_cuda_decode is there, the synthetic Llama-3.1-8B 60-node verify at 64K, off / on.
# Logs go to /tmp/whole_stages and, after each phase, into $OUT/whole_stages.tgz.
# Usage: bench/sparse_whole_stages_ab.sh <dir with kernels_cuda_attention_test, bench_attention
#        [, bench_cuda_decode]> <commit>
C=${1:?usage: bench/sparse_whole_stages_ab.sh DIR COMMIT}
COMMIT=${2:?usage: bench/sparse_whole_stages_ab.sh DIR COMMIT}
for b in kernels_cuda_attention_test bench_attention; do
  [ -x "$C/$b" ] || { echo "sparse_whole_stages_ab: $C/$b is missing or not executable" >&2; exit 2; }
done
R=/tmp/whole_stages
mkdir -p "$R"
snap() { [ -n "$OUT" ] && tar czf "$OUT/whole_stages.tgz" -C "$R" .; }
nvidia-smi --query-gpu=name,driver_version --format=csv > "$R/smi.txt"
T="$C/kernels_cuda_attention_test"
timeout 120 "$T" > "$R/test.log" 2>&1; echo "attention test rc=$?" | tee -a "$R/summary.txt"
for v in wg4s4,wg4s4,wg4s4,wg4s4 wg4p4,wg4p4,wg4p4,wg4p4; do
  SPECULA_TREE_ATTN=$v timeout 60 "$T" --gtest_filter='CudaSparseAttention.*' > "$R/test_$v.log" 2>&1
  echo "sparse test SPECULA_TREE_ATTN=$v rc=$?" | tee -a "$R/summary.txt"
done
snap
for tool in racecheck memcheck; do
  timeout 240 compute-sanitizer --tool $tool "$T" --gtest_filter='CudaSparseAttention.*' > "$R/$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$R/$tool.log" | tail -1)" | tee -a "$R/summary.txt"
done
snap
A="--contexts 65536 --nodes 8 16 32 48 60 64 --keep-fraction 0.1 --kernels dense first_query group_shared group_union"
for round in 1 2; do
  for on in 0 1; do
    SPECULA_SPARSE_WHOLE_STAGES=$on timeout 90 "$C/bench_attention" $A --commit "$COMMIT-whole$on" \
      --out "$R/attention_whole${on}_$round.json" > /dev/null 2> "$R/attention_whole${on}_$round.err"
    echo "bench_attention whole=$on round $round rc=$?" | tee -a "$R/summary.txt"
  done
done
snap
if [ -x "$C/bench_cuda_decode" ]; then
  for on in 0 1; do
    SPECULA_SPARSE_WHOLE_STAGES=$on timeout 200 "$C/bench_cuda_decode" --synthetic llama-3.1-8b --tokens 8 --reps 1 \
      --long-verify 65536 --long-verify-nodes 60 --sparse-eta 0.1 --sparse-dense-below 1024 \
      --commit "$COMMIT-whole$on" --out "$R/verify8b_whole$on.json" > "$R/verify8b_whole$on.log" 2>&1
    echo "bench_cuda_decode whole=$on rc=$?" | tee -a "$R/summary.txt"
  done
  snap
fi
cat "$R/summary.txt"
