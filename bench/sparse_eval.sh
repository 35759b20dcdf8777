#!/usr/bin/env bash
# The sparse-verification evaluation table (docs/sparse-eval.md) on the CPU: for each
# verification configuration, `specula-cli eval` on passkey and LCC at 4K and 8K-token contexts,
# GSM8K and Spec-Bench (short prompts), each item run strict and configured. Writes one JSON file
# with every report, the commands, commit and device.
#   bench/sparse_eval.sh OUT.json [BUILD_DIR] [LIMIT] [CONFIG...]     (CONFIG default: strict)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
invocation="bench/sparse_eval.sh $*"
out="${1:?usage: bench/sparse_eval.sh OUT.json [BUILD_DIR] [LIMIT] [CONFIG...]}"
build="${2:-$root/build}"
limit="${3:-3}"
shift $(( $# < 3 ? $# : 3 ))
configs=("$@")
((${#configs[@]})) || configs=(strict)
cli="$build/bin/specula-cli"
data="$root/../shared/data"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
commit="$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
if [[ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then commit="$commit-dirty"; fi

runs=(
  "passkey --context 4096 --limit $limit"
  "passkey --context 8000 --limit $limit"
  "lcc --data $data/longbench-dataset2prompt.json --context 4096 --limit $limit"
  "lcc --data $data/longbench-dataset2prompt.json --context 8000 --limit $limit"
  "gsm8k --data $data/gsm8k-dev.jsonl --limit $((limit * 3))"
  "specbench --data $data/specbench-dev.jsonl --limit $((limit * 3)) --max-tokens 64"
)
i=0
for config in "${configs[@]}"; do
  for r in "${runs[@]}"; do
    i=$((i + 1))
    cmd="eval --task $r --model default --drafter ngram --tree chain:4 --sparse $config"
    echo "== specula-cli $cmd" >&2
    start=$(date +%s)
    # shellcheck disable=SC2086  # the run lines are word lists on purpose
    "$cli" $cmd --json --out "$tmp/$i.json" >/dev/null
    echo "$cmd" >"$tmp/$i.cmd"
    echo $(( $(date +%s) - start )) >"$tmp/$i.wall"
  done
done
python3 - "$tmp" "$i" "$out" "$commit" "$invocation" <<'PY'
import datetime, json, os, platform, sys
tmp, n, out, commit = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
runs = []
for i in range(1, n + 1):
    report = json.load(open(f"{tmp}/{i}.json"))
    report["command"] = "specula-cli " + open(f"{tmp}/{i}.cmd").read().strip()
    report["wall_seconds"] = int(open(f"{tmp}/{i}.wall").read())
    runs.append(report)
json.dump({"bench": "sparse_eval", "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "device": "CPU: " + cpu, "hardware_threads": os.cpu_count(), "commit": commit,
           "command": sys.argv[5],
           "contended": "2 cores shared with other builds and tests; timings are indicative only",
           "runs": runs}, open(out, "w"), indent=2)
print(out)
PY
