#!/usr/bin/env python3
"""Per-query block selections of sparse verification on real prompts: prompts, export, overlap.

  selection_overlap.py prompts OUT_DIR [--data ../shared/data] [--chars 15000]
      writes multi_news.txt and lcc.txt, LongBench's templates (longbench-dataset2prompt.json) over
      Spec-Bench summarization articles and a libstdc++ header, and rag.txt, Spec-Bench RAG items'
      passages with the first item's question (for the chat template).
  selection_overlap.py export SESSION.sqlite... --out FILE.bin --summary FILE.json [--rounds N]
      reads sessions that `specula-cli generate --record S --record-level full` wrote under a
      per-query or group-union sparse configuration, summarises the overlap of the rows' block
      selections over every round, and writes the first N sparse rounds of each session to FILE.bin
      (format below) for bench_union_replay.

Overlap, per (round, layer, KV head) and group of C consecutive rows in traversal order (the rows the
group-union kernel loads together): mean pairwise Jaccard of the rows' block sets, and the union's
size over the rows' mean size. loaded_ratio = Σ_groups |union| / Σ_rows |set|: the blocks
group-union loads over those per-query loads.

FILE.bin, little endian (bench/selection_replay.h reads it):
  magic "SPSEL001", int32 case count
  per case: int32 session, round, layer, kv_heads, rows, committed_tokens, committed_blocks, group_size
            int32 parent[rows]   (row r's parent row; -1 for row 0, the pending token)
            int32 order[rows]    (rows in traversal order: node i of the kernels is row order[i])
            uint8 bits[kv_heads][rows][ceil(committed_blocks / 8)]   (bit b: LSB-first in byte b / 8)
"""
import argparse
import collections
import datetime
import os
import platform
import itertools
import json
import math
import sqlite3
import struct
import sys
from pathlib import Path

MAGIC = b"SPSEL001"


# ---- prompts -------------------------------------------------------------------------------

def build_prompts(data_dir, chars):
    templates = json.loads((Path(data_dir) / "longbench-dataset2prompt.json").read_text())
    rows = [json.loads(line) for line in (Path(data_dir) / "specbench-dev.jsonl").read_text().splitlines() if line]

    def take(texts):
        out, n = [], 0
        for t in texts:
            if n >= chars:
                break
            out.append(t)
            n += len(t)
        return out

    summaries = [r["turns"][0].removeprefix("Summarize: ").strip() for r in rows if r["category"] == "summarization"]
    news = take(summaries)
    prompts = {"multi_news": templates["multi_news"].format(context="\n\n".join(news))}

    # A Spec-Bench RAG turn is passages, then the question on its last line. The first item's
    # question after its own passages and those of the next items (distractors, as in hotpotqa);
    # asked in the chat template (LongBench's hotpotqa template made the model stop at once).
    rag = [r["turns"][0].rstrip().rsplit("\n", 1) for r in rows if r["category"] == "rag"]
    passages = take(p for p, _ in rag)
    prompts["rag"] = "\n\n".join(passages) + "\n" + rag[0][1].strip()

    source = Path("/usr/include/c++/12/bits/stl_tree.h").read_text()
    prefix = source[: source.rfind("\n", 0, chars) + 1]
    prompts["lcc"] = templates["lcc"].format(context=prefix)
    return prompts


# ---- sessions ------------------------------------------------------------------------------

def unpack_bits(blob, total):
    return [b for b in range(total) if blob[b >> 3] >> (b & 7) & 1]


def bfs_order(parents):
    """Rows in BFS order, children in row order (engine/spec/draft_tree.cpp DraftTree::traversal)."""
    children = collections.defaultdict(list)
    for r, p in enumerate(parents):
        if p >= 0:
            children[p].append(r)
    order, queue = [], collections.deque([0])
    while queue:
        r = queue.popleft()
        order.append(r)
        queue.extend(children[r])
    return order


def read_session(path):
    """Yields one dict per (round, layer) with per-row selections, kv head by kv head."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    config = json.loads(db.execute("SELECT configJson FROM SPECULA_SESSION").fetchone()[0])
    rounds = {r: c for r, c in db.execute("SELECT round, contextLen FROM SPECULA_ROUNDS")}
    parents = collections.defaultdict(dict)
    for rnd, node, parent in db.execute("SELECT round, node, parent FROM SPECULA_DRAFT_NODES"):
        parents[rnd][node + 1] = parent + 1  # row = node + 1; the root (-1) is the pending token, row 0
    cases = collections.defaultdict(dict)
    for rnd, layer, query, group, mode, total, bits in db.execute(
            "SELECT round, layer, query, queryGroup, mode, totalBlocks, blockBits FROM SPECULA_LAYER_SELECTIONS "
            "WHERE query >= 0 ORDER BY round, layer, query"):
        cases[(rnd, layer)][query] = (group, mode, total, bytes(bits))
    for (rnd, layer), by_row in sorted(cases.items()):
        rows = len(parents[rnd]) + 1
        if sorted(by_row) != list(range(rows)):
            raise ValueError(f"{path}: round {rnd} layer {layer}: selections for rows {sorted(by_row)}, tree has {rows}")
        yield {"config": config, "round": rnd, "layer": layer, "context": rounds[rnd], "rows": rows,
               "parents": [-1] + [parents[rnd][r] for r in range(1, rows)], "by_row": by_row}


def split_heads(case, kv_heads):
    """[kv head][row] -> sorted block ids; committed blocks nb (total_blocks = kv_heads · nb)."""
    total = case["by_row"][0][2]
    if total % kv_heads:
        raise ValueError(f"round {case['round']} layer {case['layer']}: {total} blocks not a multiple of {kv_heads} heads")
    nb = total // kv_heads
    sets = [[[] for _ in range(case["rows"])] for _ in range(kv_heads)]
    for r, (_, _, t, bits) in case["by_row"].items():
        if t != total:
            raise ValueError(f"round {case['round']} layer {case['layer']} row {r}: {t} blocks, row 0 has {total}")
        for b in unpack_bits(bits, total):
            sets[b // nb][r].append(b % nb)
    return sets, nb


def jaccard(a, b):
    u = len(a | b)
    return len(a & b) / u if u else 1.0


def group_overlap(sets_by_row, order, C):
    """Per group of C rows in traversal order: (mean pairwise Jaccard or None, |union|, Σ|set|, rows)."""
    out = []
    for g0 in range(0, len(order), C):
        members = [set(sets_by_row[r]) for r in order[g0:g0 + C]]
        pairs = [jaccard(a, b) for a, b in itertools.combinations(members, 2)]
        out.append((sum(pairs) / len(pairs) if pairs else None, len(set().union(*members)),
                    sum(len(m) for m in members), len(members)))
    return out


def summarise(groups):
    """groups: list of (jaccard or None, union, sum_sizes, rows) over many (case, head, group)."""
    jac = [g[0] for g in groups if g[0] is not None]
    union = sum(g[1] for g in groups)
    sizes = sum(g[2] for g in groups)
    ratios = [g[1] / (g[2] / g[3]) for g in groups if g[3] > 1]
    return {"groups": len(groups), "mean_pairwise_jaccard": sum(jac) / len(jac) if jac else None,
            "mean_union_over_mean_size": sum(ratios) / len(ratios) if ratios else None,
            "loaded_ratio_union_over_per_query": union / sizes if sizes else None}


def write_cases(f, cases):
    f.write(MAGIC)
    f.write(struct.pack("<i", len(cases)))
    for c in cases:
        f.write(struct.pack("<8i", c["session"], c["round"], c["layer"], c["kv_heads"], c["rows"], c["context"],
                            c["nb"], c["group_size"]))
        f.write(struct.pack(f"<{c['rows']}i", *c["parents"]))
        f.write(struct.pack(f"<{c['rows']}i", *c["order"]))
        width = (c["nb"] + 7) // 8
        for head in c["sets"]:
            for blocks in head:
                row = bytearray(width)
                for b in blocks:
                    row[b >> 3] |= 1 << (b & 7)
                f.write(bytes(row))


def export(sessions, kv_heads, group_sizes, rounds_kept):
    """Returns (summary dict, cases to write)."""
    summary = {"kv_heads": kv_heads, "sessions": []}
    kept = []
    overall = {C: [] for C in group_sizes}
    for s, path in enumerate(sessions):
        per_c = {C: [] for C in group_sizes}
        per_layer = collections.defaultdict(list)
        sizes, blocks, rounds, kept_rounds, contexts, config = [], [], set(), [], [], None
        for case in read_session(path):
            config = case["config"]
            if case["rows"] < 2:
                continue  # a plain decode step (no tree): nothing to group
            sets, nb = split_heads(case, kv_heads)
            order = bfs_order(case["parents"])
            cfg_c = config.get("sparse", {}).get("group_size")
            for r, (group, *_rest) in case["by_row"].items():
                if group >= 0 and cfg_c and order.index(r) // cfg_c != group:
                    raise ValueError(f"{path}: round {case['round']} row {r}: recorded group {group}, "
                                     f"BFS position {order.index(r)} with groups of {cfg_c}")
            rounds.add(case["round"])
            blocks.append(nb)
            contexts.append(case["context"])
            for head in sets:
                sizes.extend(len(x) for x in head)
                for C in group_sizes:
                    g = group_overlap(head, order, C)
                    per_c[C].extend(g)
                    if C == group_sizes[-1]:
                        per_layer[case["layer"]].extend(g)
            if case["round"] not in kept_rounds and len(kept_rounds) < rounds_kept:
                kept_rounds.append(case["round"])
            if case["round"] in kept_rounds:
                kept.append({"session": s, "round": case["round"], "layer": case["layer"], "kv_heads": kv_heads,
                             "rows": case["rows"], "context": case["context"], "nb": nb,
                             "group_size": cfg_c or 0, "parents": case["parents"], "order": order, "sets": sets})
        for C in group_sizes:
            overall[C].extend(per_c[C])
        summary["sessions"].append({
            "session": Path(path).name, "index": s, "context_tokens_min_max": [min(contexts), max(contexts)] if contexts else None,
            "sparse": config.get("sparse") if config else None, "tree": config.get("tree") if config else None,
            "sparse_rounds": len(rounds), "rounds_in_replay_file": kept_rounds, "committed_blocks_min_max": [min(blocks), max(blocks)] if blocks else None,
            "mean_blocks_per_row": sum(sizes) / len(sizes) if sizes else None,
            "by_group_size": {str(C): summarise(per_c[C]) for C in group_sizes},
            f"by_layer_group_size_{group_sizes[-1]}": {str(k): summarise(v) for k, v in sorted(per_layer.items())},
        })
    summary["overall_by_group_size"] = {str(C): summarise(overall[C]) for C in group_sizes}
    return summary, kept


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prompts")
    p.add_argument("out_dir")
    p.add_argument("--data", default=str(Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))
    p.add_argument("--chars", type=int, default=15000)
    e = sub.add_parser("export")
    e.add_argument("sessions", nargs="+")
    e.add_argument("--out", required=True)
    e.add_argument("--summary", required=True)
    e.add_argument("--kv-heads", type=int, default=3)
    e.add_argument("--group-sizes", type=int, nargs="+", default=[4, 8])
    e.add_argument("--rounds", type=int, default=2, help="sparse rounds of each session written to --out")
    e.add_argument("--commit", default="unknown", help="commit of the specula-cli that recorded the sessions")
    a = ap.parse_args(argv)
    if a.cmd == "prompts":
        Path(a.out_dir).mkdir(parents=True, exist_ok=True)
        for name, text in build_prompts(a.data, a.chars).items():
            (Path(a.out_dir) / f"{name}.txt").write_text(text)
            print(f"{name}: {len(text)} chars")
        return 0
    summary, cases = export(a.sessions, a.kv_heads, a.group_sizes, a.rounds)
    summary = {"bench": "selection_overlap", "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "commit": a.commit, "command": " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]),
               "host": {"cpu": cpu_name(), "machine": platform.machine(), "hostname": platform.node()},
               "definitions": __doc__.split("FILE.bin, little endian")[0].split("Overlap, per")[1].strip(),
               **summary}
    summary["replay_file"] = {"path": a.out, "cases": len(cases)}
    with open(a.out, "wb") as f:
        write_cases(f, cases)
    Path(a.summary).write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary["overall_by_group_size"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
