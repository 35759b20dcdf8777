#!/usr/bin/env python3
"""Merges `specula-cli eval --sweep` reports of one item each (bench/sparse_eval_sweep.sh runs one
item per process) into one results file and prints the docs/sparse-eval.md table.

  bench/sparse_eval_merge.py OUT.json DEVICE COMMIT COMMAND REPORT.json...

Per (task, context, configuration): the score is the mean over items (points), ROUGE-L the mean,
KV the configured bytes over the strict bytes summed over items. Token agreement and accepted
length are means over items of each item's value (a one-item report does not keep the token
and round counts that eval's own summary weights by).
"""
import collections
import datetime
import json
import re
import sys


def main():
    out, device, commit, command = sys.argv[1:5]
    groups = collections.OrderedDict()
    for path in sorted(sys.argv[5:]):
        doc = json.load(open(path))
        for r in doc["sweep"]:
            key = (r["task"], r["context"] if r["task"] in ("lcc", "passkey") or r.get("few_shot_context") else None,
                   r["name"])
            groups.setdefault(key, []).append(r)
    rows = []
    for (task, context, name), reports in groups.items():
        items = [it for r in reports for it in r["per_item"]]
        n = len(items)
        mean = lambda xs: sum(xs) / len(xs)
        scored = all(it["strict_score"] is not None for it in items)
        strict_kv = sum(it["strict_kv_bytes_read"] for it in items)
        conf_kv = sum(it["configured_kv_bytes_read"] for it in items)
        s_len = mean([it["strict_accepted_length"] for it in items])
        c_len = mean([it["configured_accepted_length"] for it in items])
        row = {
            "task": task, "context": context, "config": name, "sparse": reports[0]["sparse"], "items": n,
            "mean_prompt_tokens": round(mean([it["prompt_tokens"] for it in items])),
            "strict_score": 100 * mean([it["strict_score"] for it in items]) if scored else None,
            "configured_score": 100 * mean([it["configured_score"] for it in items]) if scored else None,
            "token_agreement": mean([it["token_agreement"] for it in items]),
            "rouge_l": mean([it["rouge_l"] for it in items]),
            "identical_outputs": sum(it["strict_text"] == it["configured_text"] for it in items),
            "strict_accepted_length": s_len, "configured_accepted_length": c_len,
            "kv_read_ratio": conf_kv / strict_kv if strict_kv else 1.0,
            "items_detail": [{k: it[k] for k in ("id", "prompt_tokens", "strict_score", "configured_score",
                                                  "token_agreement", "common_prefix", "rouge_l",
                                                  "strict_accepted_length", "configured_accepted_length",
                                                  "strict_kv_bytes_read", "configured_kv_bytes_read",
                                                  "strict_text", "configured_text")} for it in items],
        }
        row["goals"] = {
            "token_agreement_ge_95pct": row["token_agreement"] >= 0.95,
            "score_within_1_point": None if not scored else abs(row["configured_score"] - row["strict_score"]) <= 1.0,
            "accepted_length_within_2pct": abs(c_len - s_len) <= 0.02 * s_len,
        }
        rows.append(row)
    result = {"bench": "sparse_eval_sweep", "date": datetime.date.today().isoformat(), "device": device,
              "commit": commit, "model": "SmolLM2-135M-Instruct Q4_1 (sha256 b179c952...)", "model_synthetic": False,
              "command": command,
              "note": __doc__.strip().split("\n\n", 1)[1].replace("\n", " "), "rows": rows}
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print("| task, context | configuration | items | score strict → sparse | token agreement | ROUGE-L | "
          "accepted length strict → sparse | KV |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        score = "–" if r["strict_score"] is None else f'{r["strict_score"]:.1f} → {r["configured_score"]:.1f}'
        ctx = f'{r["context"] // 1000}K' if r["context"] else "short"
        if r["context"] == 8000:
            ctx = "8K"
        print(f'| {r["task"]}, {ctx} | `{r["config"]}` | {r["items"]} | {score} | {100 * r["token_agreement"]:.1f}% | '
              f'{r["rouge_l"]:.2f} | {r["strict_accepted_length"]:.2f} → {r["configured_accepted_length"]:.2f} | '
              f'{r["kv_read_ratio"]:.2f} |')


if __name__ == "__main__":
    main()
