#!/bin/bash
# ncu of the tree-attention kernels where their speed goals are missed (kernels/cuda/attention_notes.md):
#   dense 64K at 48 nodes (one 192-row ws3s4 CTA a chunk) against 64 nodes (two 128-row ws2s3 CTAs,
#   a multicast pair), and first-query 64K / 10% at 8 and 64 nodes (chunk kernel and merge kernel).
# Usage: bench/ncu_tree_attention.sh <dir with bench_attention> <out dir>
# Writes ncu_dense_<n>.txt, ncu_fq_<n>.txt and pipes_<n>.txt (tensor / MUFU pipe shares) there.
C=${1:?usage: bench/ncu_tree_attention.sh BIN_DIR OUT_DIR}
O=${2:?usage: bench/ncu_tree_attention.sh BIN_DIR OUT_DIR}
[ -x "$C/bench_attention" ] || { echo "ncu_tree_attention: $C/bench_attention is missing" >&2; exit 2; }
mkdir -p "$O"
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section WarpStateStats"
S="$S --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats --section InstructionStats"
M=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
M=$M,sm__cycles_elapsed.avg.per_second,gpu__time_duration.sum
run() { timeout 200 ncu --clock-control none "$@"; }
for n in 48 64; do
  A="--contexts 65536 --nodes $n --kernels dense --iterations 1 --batch-calls 1"
  run $S -k regex:ws_kernel -c 1 "$C/bench_attention" $A > "$O/ncu_dense_$n.txt" 2>&1
  run --metrics $M -k regex:ws_kernel -c 1 "$C/bench_attention" $A > "$O/pipes_dense_$n.txt" 2>&1
  echo "ncu dense $n nodes rc=$?"
done
for n in 8 64; do
  A="--contexts 65536 --nodes $n --kernels first_query --keep-fraction 0.1 --iterations 1 --batch-calls 1"
  run $S -k regex:tree_attention -c 2 "$C/bench_attention" $A > "$O/ncu_fq_$n.txt" 2>&1
  echo "ncu first-query $n nodes rc=$?"
done
