#!/usr/bin/env bash
# One device call for the sparse FFN / MoE kernels (kernels/cuda/sparse_ffn.h, moe.h): the two
# GPU tests, the same under compute-sanitizer memcheck, then bench_ffn_moe. Run from the
# repository root of the device copy with the binaries carried in $1 (default .carry/ffnmoe);
# writes the test log and the results JSON to $OUT:
#   ffn_moe_tests_h100_2026-11-24.txt, ffn_moe_h100_2026-11-24.json (commit them under bench/results/).
set -o pipefail
BIN=${1:-.carry/ffnmoe}
COMMIT=${2:-unknown}
LOG=$OUT/ffn_moe_tests_h100_2026-11-24.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/device: /' | tee "$LOG"
echo "commit: $COMMIT" | tee -a "$LOG"
status=0
for t in kernels_cuda_sparse_ffn_test kernels_cuda_moe_test; do
  echo "== $t" | tee -a "$LOG"
  "$BIN/$t" 2>&1 | tee -a "$LOG" || status=1
  echo "== compute-sanitizer --tool memcheck $t" | tee -a "$LOG"
  compute-sanitizer --tool memcheck --error-exitcode 99 "$BIN/$t" 2>&1 | tee -a "$LOG" || status=1
done
echo "== bench_ffn_moe" | tee -a "$LOG"
"$BIN/bench_ffn_moe" --commit "$COMMIT" --out "$OUT/ffn_moe_h100_2026-11-24.json" 2>&1 | tee -a "$LOG" || status=1
exit $status
