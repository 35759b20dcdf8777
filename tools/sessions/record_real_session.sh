#!/usr/bin/env bash
# Records tests/data/sessions/real-ngram-hybrid.sqlite: a real CPU run of the default model
# (SmolLM2-135M Q4_1) with the ngram drafter on a static tree, sparse verification (hybrid:
# block selection with anchors 0/8/16/24 and sparse FFN, dense below 64 tokens so a short prompt
# is sparse) recorded at level full. The UI screenshot tests draw it. No GPU: no kernels, CPU
# phases only. Usage: tools/sessions/record_real_session.sh [build dir]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$root/build}"
config="$(mktemp --suffix=.json)"
trap 'rm -f "$config"' EXIT
cat >"$config" <<'JSON'
{"preset": "hybrid", "dense_below": 64, "eta": 0.3, "sink_blocks": 1, "local_blocks": 2, "anchors": [0, 8, 16, 24],
 "query_mode": "per-query", "ffn_threshold": 0.05}
JSON
prompt="The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog again. \
A list of the planets in order from the sun: Mercury, Venus, Earth, Mars, Jupiter, Saturn, Uranus, Neptune. \
A list of the planets in order from the sun: Mercury, Venus, Earth, Mars, Jupiter, Saturn, Uranus, Neptune. \
The days of the week are Monday, Tuesday, Wednesday, Thursday, Friday, Saturday and Sunday. The days of the week are"
"$build/bin/specula-cli" generate --model default --prompt "$prompt" --max-tokens 24 --temperature 0 --threads 2 \
  --drafter ngram --tree static:2,2,1 --sparse-config "$config" \
  --record "$root/tests/data/sessions/real-ngram-hybrid.sqlite" --record-level full --overwrite
