#!/usr/bin/env bash
# Records per-query block selections of sparse verification on three real long prompts (CPU engine,
# default model), then exports them with bench/selection_overlap.py. Usage:
#   bench/selection_overlap_run.sh OUT_DIR [build/bin/specula-cli] [../shared/data]
# Sparse config: Quest top-k, 10% of committed blocks per KV head (dense_below 0, eta 0.1; sink 1
# and local 2 inside the budget), group-union groups of 8 in BFS order (each row selects alone,
# as per-query does; the groups are recorded). Tree: layerskip dynamic:6,4,63 (64 rows a round).
set -euo pipefail
out=${1:?OUT_DIR}
cli=${2:-build/bin/specula-cli}
data=${3:-../shared/data}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
python3 "$here/selection_overlap.py" prompts "$out/prompts" --data "$data"
cat >"$out/sparse.json" <<'JSON'
{"preset": "sa", "eta": 0.1, "dense_below": 0, "query_mode": "group-union", "group_size": 8}
JSON
for p in ${PROMPTS:-multi_news rag lcc}; do
  chat=""
  [ "$p" = rag ] && chat=--chat
  "$cli" generate -f "$out/prompts/$p.txt" $chat -n "${TOKENS:-24}" --drafter layerskip --tree dynamic:6,4,63 \
    --sparse-config "$out/sparse.json" --no-controller --threads 1 --backend cpu \
    --record "$out/$p.sqlite" --record-level full --overwrite --json >"$out/$p.json" &
done
wait
[ -n "${NO_EXPORT:-}" ] && exit 0
python3 "$here/selection_overlap.py" export "$out"/{multi_news,rag,lcc}.sqlite \
  --out "$out/selections.bin" --summary "$out/overlap.json" --rounds "${ROUNDS:-3}" --commit "$(git -C "$here" rev-parse --short HEAD)"
