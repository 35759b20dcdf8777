#!/usr/bin/env bash
# The sparse-eval rows of docs/sparse-eval.md as they were run on a 16-core host: eight
# `specula-cli eval` processes of 2 threads side by side, each with a preset plus
# {dense_below: 512, eta}. Writes one report per row into OUT_DIR (see
# bench/results/sparse_eval_device_cpu_2026-11-22.json, which collects them).
#   bench/sparse_eval_parallel.sh OUT_DIR [SPECULA_CLI] [DATA_DIR]
# The results file was made in two batches of eight (the first eight rows below, then the rest).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: bench/sparse_eval_parallel.sh OUT_DIR [SPECULA_CLI] [DATA_DIR]}"
cli="${2:-$root/build/bin/specula-cli}"
data="${3:-$root/../shared/data}"
mkdir -p "$out/configs"
for eta in 0.1 0.2; do
  for preset in sa sa-reuse ssv-exact hybrid; do
    echo "{\"preset\":\"$preset\",\"dense_below\":512,\"eta\":$eta}" >"$out/configs/${preset}_eta$eta.json"
  done
done
run() {  # name config eval-args...
  local name=$1 cfg=$2
  shift 2
  "$cli" eval --model default --drafter ngram --tree chain:4 --threads 2 --sparse-config "$out/configs/$cfg.json" \
    "$@" --json --out "$out/$name.json" >/dev/null 2>"$out/$name.err" &
}
batch() { wait; }
lb="$data/longbench-dataset2prompt.json"
run pk4k_sa01 sa_eta0.1 --task passkey --context 4096 --limit 5
run pk4k_sareuse01 sa-reuse_eta0.1 --task passkey --context 4096 --limit 5
run pk4k_ssv01 ssv-exact_eta0.1 --task passkey --context 4096 --limit 5
run pk4k_sa02 sa_eta0.2 --task passkey --context 4096 --limit 5
run lcc4k_sa01 sa_eta0.1 --task lcc --data "$lb" --context 4096 --limit 5
run lcc4k_hybrid01 hybrid_eta0.1 --task lcc --data "$lb" --context 4096 --limit 5
run pk8k_sa01 sa_eta0.1 --task passkey --context 8000 --limit 2
run sb_sa01 sa_eta0.1 --task specbench --data "$data/specbench-dev.jsonl" --limit 12 --max-tokens 64
batch
run lcc8k_sa01 sa_eta0.1 --task lcc --data "$lb" --context 8000 --limit 2
run gsm_sa01 sa_eta0.1 --task gsm8k --data "$data/gsm8k-dev.jsonl" --limit 6
run lcc4k_sa02 sa_eta0.2 --task lcc --data "$lb" --context 4096 --limit 5
run lcc4k_ssv01 ssv-exact_eta0.1 --task lcc --data "$lb" --context 4096 --limit 5
batch
echo "$out"
