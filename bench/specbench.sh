#!/usr/bin/env bash
# Spec-Bench on the CPU: per category, mean accepted length and speedup over plain decoding
# measured in the same run, for each drafter. Writes bench/results/specbench-cpu-<drafter>.json.
#   bench/specbench.sh [BUILD_DIR] [LIMIT_PER_CATEGORY] [MAX_TOKENS] [DRAFT_MODEL]
# The model drafter runs only when DRAFT_MODEL is given (it must share the target's tokenizer).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
limit="${2:-5}"
max_tokens="${3:-64}"
draft_model="${4:-}"
cli="$build/bin/specula-cli"
data="$root/../shared/data/specbench-dev.jsonl"
mkdir -p "$root/bench/results"
commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"

run() {  # name, flags...
  local name="$1"; shift
  local out="$root/bench/results/specbench-cpu-$name.json"
  echo "== $name: $*"
  "$cli" specbench --model default --data "$data" --limit "$limit" --max-tokens "$max_tokens" "$@" --out "$out.tmp"
  # Record where the figures come from next to them.
  python3 - "$out.tmp" "$out" "$commit" "$*" <<'PY'
import json, platform, sys
report = json.load(open(sys.argv[1]))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
report["device"] = "CPU: " + cpu
report["contended"] = "measured while other builds ran on the same 2 cores; plain and speculative alternate per item, so both see it"
report["commit"] = sys.argv[3]
report["command"] = "specula-cli specbench " + sys.argv[4]
json.dump(report, open(sys.argv[2], "w"), indent=2)
PY
  rm -f "$out.tmp"
}

run ngram --drafter ngram --tree static:2,2,1,1
run layerskip --drafter layerskip --layers every-other --tree chain:3
if [[ -n "$draft_model" ]]; then
  run model --drafter model --draft-model "$draft_model" --tree chain:4
fi
