#!/bin/bash
# Two builds of the tree-attention kernels timed side by side on one warm machine (a change that
# has no run-time switch): bench_attention at 64K and 128K, 10% of blocks kept, old / new / old /
# new, and bench_cuda_decode's synthetic Llama-3.1-8B 60-node verify at 64K the same way.
# Logs and JSON go to $AB_DIR (default /tmp/$AB_NAME) and into $OUT/$AB_NAME.tgz (AB_NAME defaults
# to binary_ab); bench/attention_switch_summary.py folds them (old as "off", new as "on").
# AB_PHASES (default "attention verify8b") picks the halves to run.
# Usage: bench/attention_binary_ab.sh <old dir> <new dir> <old commit> <new commit> [old bench_attention
#        flags] [old bench_cuda_decode flags]   (flags that give the old build the new one's defaults)
OLD=${1:?usage: bench/attention_binary_ab.sh OLD_DIR NEW_DIR OLD_COMMIT NEW_COMMIT [OLD_FLAGS [OLD_DECODE_FLAGS]]}
NEW=${2:?usage: bench/attention_binary_ab.sh OLD_DIR NEW_DIR OLD_COMMIT NEW_COMMIT [OLD_FLAGS [OLD_DECODE_FLAGS]]}
OLD_COMMIT=${3:?old commit}
NEW_COMMIT=${4:?new commit}
OLD_FLAGS=${5:-}
OLD_DECODE_FLAGS=${6:-}
for d in "$OLD" "$NEW"; do
  for b in bench_attention bench_cuda_decode; do
    [ -x "$d/$b" ] || { echo "attention_binary_ab: $d/$b is missing or not executable" >&2; exit 2; }
  done
done
NAME=${AB_NAME:-binary_ab}  # the archive name (and the logs directory under /tmp without AB_DIR)
R=${AB_DIR:-/tmp/$NAME}
PHASES=" ${AB_PHASES:-attention verify8b} "
mkdir -p "$R"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$R/smi.txt"
A="--contexts 65536 131072 --nodes 8 16 32 48 60 64 --keep-fraction 0.1 --kernels dense first_query group_shared"
V="--synthetic llama-3.1-8b --tokens 8 --reps 1 --long-verify 65536 --long-verify-nodes 60 --sparse-eta 0.1 --sparse-dense-below 1024"
[[ $PHASES == *" attention "* ]] && for round in 1 2; do
  for side in off on; do
    if [ $side = off ]; then dir=$OLD; commit=$OLD_COMMIT; flags=$OLD_FLAGS; else dir=$NEW; commit=$NEW_COMMIT; flags=; fi
    timeout 150 "$dir/bench_attention" $A $flags --commit "$commit" --out "$R/attention_$side.$round.json" \
      > /dev/null 2> "$R/attention_$side.$round.err"
    echo "bench_attention $commit round $round rc=$?" | tee -a "$R/summary.txt"
  done
done
[[ $PHASES == *" verify8b "* ]] && for round in 1 2; do
  for side in false true; do
    if [ $side = false ]; then dir=$OLD; commit=$OLD_COMMIT; flags=$OLD_DECODE_FLAGS; else dir=$NEW; commit=$NEW_COMMIT; flags=; fi
    timeout 200 "$dir/bench_cuda_decode" $V $flags --commit "$commit" --out "$R/verify8b_$side.$round.json" \
      > "$R/verify8b_$side.$round.log" 2>&1
    echo "bench_cuda_decode $commit round $round rc=$?" | tee -a "$R/summary.txt"
  done
done
[ -n "$OUT" ] && tar czf "$OUT/$NAME.tgz" -C "$R" .
cat "$R/summary.txt"
