#!/bin/bash
# One of tree attention's A/B switches (kernels/cuda/attention.h) checked and timed off against on,
# in one binary, in phases that fit separate device calls on one warm machine:
#   kv-multicast  the two row-split CTAs of groups over 192 rows share each K/V stage by TMA multicast
#                 (tests: CudaTreeAttention.KvMulticastGivesTheSameBits);
#   ws-pingpong   the warp-specialized tier's consumer warpgroups take turns issuing their MMAs
#                 (tests: CudaTreeAttention.WsPingPongGivesTheSameBits).
# Phases:
#   tests      kernels_cuda_attention_test and, if present, engine_cuda_cuda_tree_attention_kernels_test
#              (the synthetic whole verify);
#   sanitize   racecheck, memcheck and synccheck of the switch's test and the sparse tests;
#   attention  bench_attention at 64K and 128K, 10% of blocks kept, off / on / off / on;
#   verify8b   bench_cuda_decode's synthetic Llama-3.1-8B 60-node verify at 64K, off / on / off / on.
# Logs go to /tmp/<switch> and, after each phase, into $OUT/<switch>.tgz.
# Usage: bench/attention_switch_ab.sh <dir with the binaries> <commit> <switch> <phase>...
usage="usage: bench/attention_switch_ab.sh DIR COMMIT kv-multicast|ws-pingpong PHASE..."
C=${1:?$usage}
COMMIT=${2:?$usage}
SWITCH=${3:?$usage}
shift 3
case $SWITCH in
  kv-multicast) FILTER='CudaTreeAttention.KvMulticast*:CudaSparseAttention.Every*'; MARK="kv multicast" ;;
  ws-pingpong) FILTER='CudaTreeAttention.WsPingPong*:CudaSparseAttention.Every*'; MARK="ws ping-pong" ;;
  *) echo "attention_switch_ab: unknown switch '$SWITCH' ($usage)" >&2; exit 2 ;;
esac
[ $# -gt 0 ] || { echo "attention_switch_ab: name a phase: tests sanitize attention verify8b" >&2; exit 2; }
need() {
  [ -x "$C/$1" ] || { echo "attention_switch_ab: $C/$1 is missing or not executable" >&2; exit 2; }
}
R=/tmp/${SWITCH//-/_}
mkdir -p "$R"
snap() { [ -n "$OUT" ] && tar czf "$OUT/${SWITCH//-/_}.tgz" -C "$R" .; }
nvidia-smi --query-gpu=name,driver_version --format=csv > "$R/smi.txt"
T="$C/kernels_cuda_attention_test"
for phase in "$@"; do
  case $phase in
    tests)
      need kernels_cuda_attention_test
      timeout 150 "$T" > "$R/test.log" 2>&1
      echo "attention test rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$R/test.log" | tr '\n' ' ')" | tee -a "$R/summary.txt"
      grep "$MARK" "$R/test.log" | tee -a "$R/summary.txt"
      if [ -x "$C/engine_cuda_cuda_tree_attention_kernels_test" ]; then
        timeout 150 "$C/engine_cuda_cuda_tree_attention_kernels_test" > "$R/tree_kernels_test.log" 2>&1
        echo "tree attention kernels test rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$R/tree_kernels_test.log" | tr '\n' ' ')" |
          tee -a "$R/summary.txt"
      fi
      ;;
    sanitize)
      need kernels_cuda_attention_test
      for tool in racecheck memcheck synccheck; do
        timeout 240 compute-sanitizer --tool $tool "$T" --gtest_filter="$FILTER" > "$R/$tool.log" 2>&1
        echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$R/$tool.log" | tail -1)" | tee -a "$R/summary.txt"
      done
      ;;
    attention)
      need bench_attention
      A="--contexts 65536 131072 --nodes 8 16 32 48 60 64 --keep-fraction 0.1 --kernels dense first_query group_shared"
      for round in 1 2; do
        for on in off on; do
          timeout 150 "$C/bench_attention" $A --$SWITCH $on --commit "$COMMIT-$SWITCH-$on" \
            --out "$R/attention_$on.$round.json" > /dev/null 2> "$R/attention_$on.$round.err"
          echo "bench_attention $SWITCH=$on round $round rc=$?" | tee -a "$R/summary.txt"
        done
      done
      ;;
    verify8b)
      need bench_cuda_decode
      for round in 1 2; do
        for on in false true; do
          timeout 200 "$C/bench_cuda_decode" --synthetic llama-3.1-8b --tokens 8 --reps 1 --long-verify 65536 \
            --long-verify-nodes 60 --sparse-eta 0.1 --sparse-dense-below 1024 --$SWITCH $on \
            --commit "$COMMIT-$SWITCH-$on" --out "$R/verify8b_$on.$round.json" > "$R/verify8b_$on.$round.log" 2>&1
          echo "bench_cuda_decode $SWITCH=$on round $round rc=$?" | tee -a "$R/summary.txt"
        done
      done
      ;;
    *)
      echo "attention_switch_ab: unknown phase '$phase' (tests sanitize attention verify8b)" >&2
      exit 2
      ;;
  esac
  snap
done
cat "$R/summary.txt"
