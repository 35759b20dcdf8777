#!/bin/bash
# Runs on the device: checks and times the binary sets of bench/attention_builds.sh against each
# other, in steps, so one call can settle several kernel changes. Every step writes its own folder
# under a fresh /tmp/attention_builds_out.XXXX as it goes, and with $OUT set the whole of it is
# tarred to $OUT/attention_builds.tgz after each step: a call cut short still returns what finished,
# and one file comes back where the device would return only the first few of the ~80 loose ones
# (session 30 lost a call's logs so). bench/attention_switch_summary.py folds a folder into a
# bench/results JSON.
#
# Usage: bench/attention_builds_ab.sh ARCHIVE STEP...
#   test:NAME[:VAR=VAL]      kernels_cuda_attention_test of set NAME (VAR=VAL in its environment,
#                            e.g. SPECULA_TREE_ATTN=m1b4k2)
#   sanitize:NAME[:VAR=VAL]  racecheck, memcheck and synccheck of its tree and sparse tests
#   ab:OLD:NEW               bench/attention_binary_ab.sh: bench_attention at 64K and 128K and the
#                            synthetic 8B 60-node verify, OLD / NEW / OLD / NEW
#   attn:OLD:NEW             the same, bench_attention only (AB_PHASES=attention)
#   env:NAME:VAR=VAL         bench_attention of NAME at 8K and 64K, 4-16 nodes, without and with
#                            VAR=VAL, twice (the "without" side runs in the caller's environment)
set -uo pipefail
usage="usage: bench/attention_builds_ab.sh ARCHIVE test:NAME[:VAR=VAL]|sanitize:NAME[:VAR=VAL]|ab:OLD:NEW|attn:OLD:NEW|env:NAME:VAR=VAL..."
archive=${1:?$usage}
shift
[ $# -gt 0 ] || { echo "attention_builds_ab: name a step ($usage)" >&2; exit 2; }
[ -f "$archive" ] || { echo "attention_builds_ab: no archive $archive" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
sets=$(mktemp -d /tmp/attention_builds.XXXX)
trap 'rm -rf "$sets"' EXIT
xz -dc "$archive" | tar x -C "$sets" || { echo "attention_builds_ab: cannot unpack $archive" >&2; exit 2; }
commit_of() { awk -v n="$1" '$1 == n { print $2 }' "$sets/builds.txt"; }
need_set() {
  if [ -z "$(commit_of "$1")" ] || [ ! -d "$sets/$1" ]; then
    echo "attention_builds_ab: $archive has no set '$1' (it has: $(cut -d' ' -f1 "$sets/builds.txt" | tr '\n' ' '))" >&2
    exit 2
  fi
}
need_env() {
  [[ $1 =~ ^[A-Z_][A-Z0-9_]*=.*$ ]] || { echo "attention_builds_ab: '$1' is not VAR=VALUE" >&2; exit 2; }
}
# Check every step before running any: a typo should not cost a device call half-way through.
for step in "$@"; do
  IFS=: read -r kind a b <<< "$step"
  case $kind in
    test | sanitize) need_set "$a"; [ -z "$b" ] || need_env "$b" ;;
    ab | attn) need_set "$a"; need_set "$b" ;;
    env) need_set "$a"; need_env "$b" ;;
    *) echo "attention_builds_ab: unknown step '$step' ($usage)" >&2; exit 2 ;;
  esac
done
base=$(mktemp -d /tmp/attention_builds_out.XXXX)
echo "attention_builds_ab: results in $base${OUT:+, tarred to $OUT/attention_builds.tgz after each step}" >&2
pack() { [ -z "${OUT:-}" ] || tar czf "$OUT/attention_builds.tgz" -C "$base" .; }
nvidia-smi --query-gpu=name,driver_version --format=csv > "$base/smi.txt" 2>&1
tests='CudaTreeAttention.Dense*:CudaSparseAttention.*'
last_match() { grep -E "$1" "$2" | tail -1; }
for step in "$@"; do
  IFS=: read -r kind a b <<< "$step"
  tag=$(echo "$step" | tr -c 'A-Za-z0-9_\n' '_')
  R="$base/$tag"
  mkdir -p "$R"
  S="$R/summary.txt"
  t0=$(date +%s)
  case $kind in
    test)
      env ${b:+"$b"} timeout 150 "$sets/$a/kernels_cuda_attention_test" > "$R/test.log" 2>&1
      rc=$?
      echo "attention test $a $(commit_of "$a") ${b:-} rc=$rc $(grep -E '^\[  (PASSED|FAILED) ' "$R/test.log" | tr '\n' ' ')" |
        tee -a "$S"
      ;;
    sanitize)
      for tool in racecheck memcheck synccheck; do
        env ${b:+"$b"} timeout 200 compute-sanitizer --tool $tool "$sets/$a/kernels_cuda_attention_test" \
          --gtest_filter="$tests" > "$R/$tool.log" 2>&1
        rc=$?
        echo "$tool $a $(commit_of "$a") ${b:-} rc=$rc $(last_match 'ERROR SUMMARY|RACECHECK SUMMARY' "$R/$tool.log")" |
          tee -a "$S"
      done
      ;;
    ab | attn)
      # attention_binary_ab.sh's loops, its logs straight into this step's folder (no $OUT archive).
      phases="attention verify8b"; [ "$kind" = attn ] && phases=attention
      AB_DIR="$R" AB_PHASES="$phases" OUT="" "$here/attention_binary_ab.sh" "$sets/$a" "$sets/$b" \
        "$(commit_of "$a")" "$(commit_of "$b")" > "$R/ab.log" 2>&1
      ;;
    env)
      A=(--contexts 8192 65536 --nodes 4 8 16 --keep-fraction 0.1 --kernels dense first_query group_shared)
      c=$(commit_of "$a")
      for round in 1 2; do
        for side in off on; do
          extra=()
          [ $side = on ] && extra=("$b")
          env "${extra[@]}" timeout 150 "$sets/$a/bench_attention" "${A[@]}" --commit "$c" \
            --out "$R/attention_$side.$round.json" > /dev/null 2> "$R/attention_$side.$round.err"
          rc=$?
          echo "bench_attention $a $c ${extra[*]} round $round rc=$rc" | tee -a "$S"
        done
      done
      ;;
  esac
  echo "step $step took $(($(date +%s) - t0)) s" | tee -a "$base/steps.txt"
  pack
done
