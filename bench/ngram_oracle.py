#!/usr/bin/env python3
"""Upper bounds for prompt-lookup (ngram) drafting on replayed greedy outputs (issue 3 point 10).

Reads the plain greedy runs that `bench_draft_replay --save-outputs F` writes (per item: category,
prompt ids, output ids) and replays them round by round as a speculative loop would: at each round
a drafting policy proposes branches (token lists continuing the context), the round accepts the
longest branch prefix that equals the real output plus the target's own token, and costs
cost(rows) = 1 + slope * (rows - 1) one-token steps for a verify of rows = 1 + the draft's trie nodes
(drafting is free here). Reported per category: tokens per round (what a free verify would give
as speedup) and tokens per unit cost (the modeled speedup).

Policies, each a superset of the one before in what it can propose:
  chain     the engine's ngram drafter without its confidence cut: the continuation of the most
            recent earlier occurrence of the longest suffix (n = 3 down to 1) that occurs;
  tree:W    the W most recent distinct continuations of that suffix, as a tree;
  oracle:longest  every continuation of every earlier occurrence of that longest suffix;
  oracle:1  every continuation of every earlier occurrence of the last token alone: the best any
            drafter that continues an earlier occurrence of a suffix could pick, with hindsight.
The oracles' modeled speedup is low (their trees have hundreds of nodes); their tokens per round
bound every prompt-lookup drafter, whatever its verify costs.
Why Python: this is an offline bound over saved token ids, not engine code (the engine's drafter is
engine/spec/drafters.cpp and bench_draft_replay replays it exactly).
"""
import argparse
import collections
import json
import sys


def occurrences(ctx, length):
    """Positions right after each earlier occurrence of ctx's last `length` tokens, most recent first."""
    suffix = ctx[-length:]
    first = suffix[0]
    found = []
    for j in range(len(ctx) - length - 1, -1, -1):
        if ctx[j] == first and ctx[j:j + length] == suffix:
            found.append(j + length)
    return found


def suffix_policy(n, depth, width, longest_only):
    def propose(ctx):
        branches = []
        for length in range(min(n, len(ctx) - 1), 0, -1):
            for start in occurrences(ctx, length):
                branch = ctx[start:start + depth]
                if branch and branch not in branches:
                    branches.append(branch)
            if branches and longest_only:
                break
        return branches[:width]
    return propose


def trie_nodes(branches):
    return len({tuple(b[:k]) for b in branches for k in range(1, len(b) + 1)})


def replay(items, propose, slope):
    per = collections.defaultdict(lambda: [0, 0, 0.0])  # tokens, rounds, cost
    for item in items:
        seq = item["prompt"] + item["output"]
        pos, end = len(item["prompt"]), len(seq)
        while pos < end:
            ctx = seq[:pos]
            branches = propose(ctx)
            best = 0
            for b in branches:
                k = 0
                while k < len(b) and pos + k < end and b[k] == seq[pos + k]:
                    k += 1
                best = max(best, k)
            advance = min(best + 1, end - pos)
            rows = 1 + trie_nodes(branches)
            acc = per[item["category"]]
            acc[0] += advance
            acc[1] += 1
            acc[2] += 1 + slope * (rows - 1)
            pos += advance
    out, total = {}, [0, 0, 0.0]
    for category, (tokens, rounds, cost) in sorted(per.items()):
        out[category] = {"tokens_per_round": round(tokens / rounds, 3), "modeled_speedup": round(tokens / cost, 3)}
        total = [total[0] + tokens, total[1] + rounds, total[2] + cost]
    out["overall"] = {"tokens_per_round": round(total[0] / total[1], 3),
                      "modeled_speedup": round(total[0] / total[2], 3)}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--outputs", required=True, help="bench_draft_replay --save-outputs JSON")
    ap.add_argument("--slope", type=float, default=0.13,
                    help="verify cost per extra row, in one-token steps (0.13: 2-thread int8 curve, n = 1..16)")
    ap.add_argument("--depth", type=int, default=16, help="longest branch")
    ap.add_argument("--out", help="write the JSON report here too")
    args = ap.parse_args()
    try:
        items = json.load(open(args.outputs))["items"]
        for item in items:
            item["prompt"], item["output"], item["category"]  # noqa: B018 (shape check)
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"ngram_oracle: {args.outputs} is no bench_draft_replay --save-outputs file ({e})")
    d = args.depth
    policies = {
        "chain n=3 depth=4": suffix_policy(3, 4, 1, True),
        f"chain n=3 depth={d}": suffix_policy(3, d, 1, True),
        "tree:2 n=3 depth=4": suffix_policy(3, 4, 2, True),
        "tree:4 n=3 depth=6": suffix_policy(3, 6, 4, True),
        f"oracle:longest n=3 depth={d}": suffix_policy(3, d, 10**9, True),
        f"oracle:1 depth={d}": suffix_policy(1, d, 10**9, False),
    }
    report = {"outputs": args.outputs, "items": len(items), "slope": args.slope, "policies": {}}
    for name, propose in policies.items():
        r = replay(items, propose, args.slope)
        report["policies"][name] = r
        cats = " ".join(f"{c[:5]} {v['tokens_per_round']:.2f}/{v['modeled_speedup']:.2f}" for c, v in r.items())
        print(f"{name:28s} {cats}", flush=True)
    if args.out:
        json.dump(report, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
