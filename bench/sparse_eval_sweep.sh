#!/usr/bin/env bash
# The goal table of docs/sparse-eval.md: passkey and LCC at 4K and 8K tokens and few-shot GSM8K
# at 4K, each item in its own `specula-cli eval --sweep` process (1 thread; strict once per item,
# then every configuration from the same prefill), PARALLEL processes at a time, longest first.
# Then bench/sparse_eval_merge.py collects the reports into one results file and prints the table.
#   bench/sparse_eval_sweep.sh OUT_DIR [SPECULA_CLI] [DATA_DIR] [PARALLEL]
# The 2026-11-22 results ran this job list on the 16-core host of the H100 machine in two batches
# (the first 31 jobs with 8K items 0-1 / 0-2 and GSM8K 0-5, then the rest), with the configs below
# and group_score prob-sum as the default then (see the results file).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: bench/sparse_eval_sweep.sh OUT_DIR [SPECULA_CLI] [DATA_DIR] [PARALLEL]}"
cli="${2:-$root/build/bin/specula-cli}"
data="${3:-$root/../shared/data}"
parallel="${4:-$(nproc)}"
mkdir -p "$out/cfg"
for e in 0.05 0.1 0.2; do echo "{\"preset\":\"sa\",\"dense_below\":512,\"eta\":$e}" >"$out/cfg/sa_eta$e.json"; done
echo '{"preset":"sa","dense_below":512,"eta":0.1,"group_score":"logit-sum"}' >"$out/cfg/sa-logitsum_eta0.1.json"
for p in sa-reuse hybrid ssv-exact ssv-approx; do echo "{\"preset\":\"$p\",\"dense_below\":512,\"eta\":0.1}" >"$out/cfg/${p}_eta0.1.json"; done
echo '{"preset":"sa","dense_below":512,"eta":0.1,"scoring":"exact"}' >"$out/cfg/sa-oracle_eta0.1.json"
c() { for n in "$@"; do printf "%s " "$out/cfg/$n.json"; done; }
all=$(c sa_eta0.05 sa_eta0.1 sa_eta0.2 sa-logitsum_eta0.1 sa-reuse_eta0.1 hybrid_eta0.1 ssv-exact_eta0.1 ssv-approx_eta0.1 sa-oracle_eta0.1)
long=$(c sa_eta0.05 sa_eta0.1 sa_eta0.2 sa-logitsum_eta0.1 sa-reuse_eta0.1 hybrid_eta0.1 ssv-exact_eta0.1)
gsm=$(c sa_eta0.1 sa_eta0.2 hybrid_eta0.1)
lb="$data/longbench-dataset2prompt.json"
{
  for i in 0 1 2 3 4; do echo "lcc8k_$i --task lcc --data $lb --context 8000 --first $i --limit 1 --sweep $long"; done
  for i in $(seq 0 9); do echo "pk8k_$i --task passkey --context 8000 --first $i --limit 1 --sweep $long"; done
  for i in $(seq 0 9); do
    echo "gsm4k_$i --task gsm8k --data $data/gsm8k-dev.jsonl --few-shot --context 4096 --first $i --limit 1 --sweep $gsm"
  done
  for i in $(seq 0 11); do echo "lcc4k_$i --task lcc --data $lb --context 4096 --first $i --limit 1 --sweep $all"; done
  for i in $(seq 0 9); do echo "pk4k_$i --task passkey --context 4096 --first $i --limit 1 --sweep $all"; done
} | sed 's/ *$//' >"$out/jobs.txt"
export cli out
job() {
  local name=$1
  shift
  local start
  start=$(date +%s)
  "$cli" eval --model default --drafter ngram --tree chain:4 --threads 1 --json --out "$out/$name.json" "$@" \
    >/dev/null 2>"$out/$name.err" || echo "$name failed: $(tail -1 "$out/$name.err")" >&2
  echo "$name $(($(date +%s) - start))s" >>"$out/times.txt"
}
export -f job
# -L 1: one job line per process (the lines carry no trailing blank, which would join them).
xargs -P "$parallel" -L 1 bash -c 'job "$@"' _ <"$out/jobs.txt"
commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
"$root/bench/sparse_eval_merge.py" "$out/results.json" "CPU: $cpu ($(nproc) cores), $parallel eval processes of 1 thread" \
  "$commit" "bench/sparse_eval_sweep.sh $*" "$out"/*_[0-9]*.json
