#!/usr/bin/env python3
"""Trains a draft head for the ngram-free `head` drafter (engine/spec/head_drafter.h) on the GPU
machine: self-distillation from the target model, no dev-set text.

The head (format in engine/spec/head_drafter.h, "specula-draft-head" v1) maps the target's
final-normed hidden row f (the vector its lm_head multiplies) at the row that produced token x,
plus x's input embedding, to the predicted feature of the next row:
    u  = fc([f; emb(x)]) ;  h = u + down(silu(gate(rms(u))) * up(rms(u)))
    f' = rms(h) * out_norm ;  logits = W_out[vocab_ids] @ f'
and drafts autoregressively from (f', argmax). EAGLE (Li et al. 2024) regresses features with
one decoder layer; this head has no attention (no KV cache of its own) so that a CPU draft step
costs a few per cent of a target step.

Data (all made here, from --seed):
  1. instructions built from templates over English words taken from the model's own vocabulary
     (topics), plus arithmetic word problems with random numbers; the target answers them, sampled
     at --temperature (greedy answers on templated prompts repeat themselves: a head trained on
     them memorised them, 0.87 top-1 in training against 0.28 on Spec-Bench);
  2. its longer answers become documents: "Summarize: <doc>" and "<docs>\\n<question>" prompts
     (Spec-Bench's summarization and RAG shapes), answered the same way.
The labels are always the target's greedy tokens at each row of that text.
Spec-Bench dev items (../shared/data/specbench-dev.jsonl) are only evaluated on, never trained on.

Every sequence (prompt + answer) then runs through the target in float32; each row t gives the
feature f_t and the target's greedy token a_t. Training unrolls the head --unroll steps from a
true feature with the real next tokens as inputs (the tokens a greedy chain feeds while its drafts
are accepted) and predicted features after the first step (what drafting feeds), loss =
cross-entropy to a_{t+k} over vocab_ids + --feature-weight * smooth-L1(f', f_{t+k}).

Evaluation on Spec-Bench dev: the target's greedy 128-token answers (float32), and for every
position the number of head drafts a greedy chain of K would get accepted; rounds are then walked
as the engine runs them (tokens a round = accepted + 1). Writes the head (--out), a report
(--report) and reference vectors for tests/spec (--reference).

Needs torch, transformers and the gguf package (carry its wheel to an offline machine).
"""
import argparse
import datetime
import json
import math
import os
import platform
import random
import shlex
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------
# prompts


def topic_words(tokenizer, n, rng):
    """English words among the vocabulary's whole-word tokens (a leading space, letters only)."""
    words = set()
    for tok in tokenizer.get_vocab():
        if tok.startswith("\u0120") and tok[1:].isalpha() and tok[1:].islower() and 5 <= len(tok) - 1 <= 12:
            words.add(tok[1:])
    words = sorted(words)
    rng.shuffle(words)
    return words[:n]


INSTRUCTIONS = [
    "Write a short news article about {a} and {b}.",
    "Write a news report about a recent event involving {a}.",
    "Explain what {a} is and why it matters.",
    "Give me five practical tips about {a}.",
    "Write an email to a colleague about {a} and {b}.",
    "Write a short story that involves {a} and {b}.",
    "What is the difference between {a} and {b}?",
    "Describe a day in the life of someone who works with {a}.",
    "Write a blog post about {a}.",
    "Explain how {a} works to a ten-year-old.",
    "What are the advantages and disadvantages of {a}?",
    "Write a poem about {a}.",
    "Answer briefly: what is {a}?",
    "List the main steps to get started with {a}.",
    "Pretend you are an expert on {a}. What would you tell a beginner?",
    "Write a Python function related to {a}, and explain it.",
    "Compare {a} and {b} in a short essay.",
    "Why do people care about {a}?",
    "Who first thought of {a}, and when?",
    "In one paragraph, what should everyone know about {a}?",
    "Imagine you are a tour guide. Describe {a} to visitors.",
    "Write a short dialogue between two friends about {a} and {b}.",
]

NAMES = ["Maria", "John", "Aisha", "Tom", "Lena", "Carlos", "Mei", "Ravi", "Sara", "Peter", "Olga", "Ken"]
THINGS = ["apples", "books", "marbles", "pencils", "cookies", "stamps", "tickets", "shirts", "eggs", "coins"]


def math_problem(rng):
    n = rng.choice(NAMES)
    t = rng.choice(THINGS)
    a, b, c = rng.randint(3, 90), rng.randint(2, 60), rng.randint(1, 30)
    p = rng.randint(2, 20)
    forms = [
        f"{n} has {a} {t}. {n} buys {b} more and gives {c} to a friend. How many {t} does {n} have now?",
        f"{n} sells {t} for ${p} each. On Monday {n} sells {a} and on Tuesday {b}. How much money does {n} make?",
        f"A box holds {p} {t}. {n} has {a * p} {t}. How many boxes does {n} need?",
        f"{n} reads {p} pages a day. The book has {a * p + c} pages. How many days does {n} need to finish it?",
        f"{n} earns ${a} an hour and works {p} hours a week. After {b}% tax, how much does {n} keep each week?",
    ]
    return rng.choice(forms)


def stage1_prompts(words, n, rng):
    out = []
    for i in range(n):
        if i % 6 == 5:
            out.append(math_problem(rng))
        else:
            a, b = rng.sample(words, 2)
            out.append(rng.choice(INSTRUCTIONS).format(a=a, b=b))
    return out


RAG_QUESTIONS = [
    "What does the text say about {w}?",
    "According to the passages, why is {w} important?",
    "Describe {w} based on the text above.",
    "What is the main point of the passages?",
    "Who or what is {w}, according to the text?",
]


def stage2_prompts(docs, n, rng):
    """docs: answer texts of stage 1 long enough to be documents."""
    out = []
    for i in range(n):
        if i % 2 == 0:
            out.append("Summarize: " + rng.choice(docs))
        else:
            k = rng.randint(2, 4)
            passages = rng.sample(docs, k)
            words = [w.strip(".,;:!?\"'()") for w in passages[0].split()]
            words = [w for w in words if len(w) >= 6 and w.isalpha()] or ["it"]
            q = rng.choice(RAG_QUESTIONS).format(w=rng.choice(words))
            out.append("\n".join(passages) + "\n" + q)
    return out


# ---------------------------------------------------------------------------------------------
# target model


def chat_ids(tokenizer, prompt):
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                         tokenize=False)
    return tokenizer.encode(text, add_special_tokens=False)


@torch.no_grad()
def generate(model, tokenizer, prompts, max_new, batch, dev, max_prompt, temperature=0.0):
    """Greedy answers (or sampled at `temperature` > 0); returns list of (prompt_ids, answer_ids) with EOS kept and padding cut."""
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    enc = [chat_ids(tokenizer, p)[-max_prompt:] for p in prompts]
    order = sorted(range(len(enc)), key=lambda i: len(enc[i]))
    res = [None] * len(enc)
    t0 = time.time()
    for s in range(0, len(order), batch):
        idx = order[s:s + batch]
        L = max(len(enc[i]) for i in idx)
        ids = torch.full((len(idx), L), pad, dtype=torch.long)
        mask = torch.zeros((len(idx), L), dtype=torch.long)
        for r, i in enumerate(idx):
            ids[r, L - len(enc[i]):] = torch.tensor(enc[i])
            mask[r, L - len(enc[i]):] = 1
        outs = model.generate(input_ids=ids.to(dev), attention_mask=mask.to(dev), max_new_tokens=max_new,
                              pad_token_id=pad, eos_token_id=eos,
                              **({"do_sample": True, "temperature": temperature, "top_p": 0.95} if temperature > 0
                                 else {"do_sample": False}))
        outs = outs[:, L:].tolist()
        for r, i in enumerate(idx):
            a = outs[r]
            if eos in a:
                a = a[:a.index(eos) + 1]
            res[i] = (enc[i], a)
        log(f"  generated {min(s + batch, len(order))}/{len(order)} (prompt up to {L} tokens, {time.time() - t0:.0f} s)")
    return res


@torch.no_grad()
def features(model, seqs, dev, max_tokens=32768):
    """Per sequence: (features [T, H] bf16, greedy [T] int32) from a float32 forward."""
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    res = [None] * len(seqs)
    s = 0
    while s < len(order):
        e = s + 1  # sorted by length: the batch's last sequence is its longest
        while e < len(order) and (e + 1 - s) * len(seqs[order[e]]) <= max_tokens:
            e += 1
        idx = order[s:e]
        L = max(len(seqs[i]) for i in idx)
        ids = torch.zeros((len(idx), L), dtype=torch.long)
        mask = torch.zeros((len(idx), L), dtype=torch.long)
        for r, i in enumerate(idx):
            ids[r, :len(seqs[i])] = torch.tensor(seqs[i])
            mask[r, :len(seqs[i])] = 1
        hid = model.model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).last_hidden_state  # post final norm
        greedy = model.lm_head(hid).argmax(-1)
        for r, i in enumerate(idx):
            T = len(seqs[i])
            res[i] = (hid[r, :T].to(torch.bfloat16), greedy[r, :T].to(torch.int32))
        s += len(idx)
    return res


# ---------------------------------------------------------------------------------------------
# head


class RMSNorm(nn.Module):
    def __init__(self, h, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class DraftHead(nn.Module):
    def __init__(self, h, f, eps):
        super().__init__()
        self.fc = nn.Linear(2 * h, h)
        self.ffn_norm = RMSNorm(h, eps)
        self.ffn_gate = nn.Linear(h, f, bias=False)
        self.ffn_up = nn.Linear(h, f, bias=False)
        self.ffn_down = nn.Linear(f, h, bias=False)
        self.out_norm = RMSNorm(h, eps)

    def forward(self, feat, emb):
        u = self.fc(torch.cat([feat, emb], -1))
        n = self.ffn_norm(u)
        h = u + self.ffn_down(F.silu(self.ffn_gate(n)) * self.ffn_up(n))
        return self.out_norm(h)


def flatten(data):
    """Concatenates sequences; returns tokens, features, greedy, and valid start positions."""
    toks, feats, greedy, starts = [], [], [], []
    off = 0
    for ids, (f, g) in data:
        toks.append(torch.tensor(ids, dtype=torch.int32))
        feats.append(f)
        greedy.append(g)
        starts.append((off, len(ids)))
        off += len(ids)
    return torch.cat(toks), torch.cat(feats), torch.cat(greedy), starts


def train(head, emb, w_sub, sub_index, data, args, dev):
    toks, feats, greedy, spans = flatten(data)
    toks, feats, greedy = toks.to(dev).long(), feats.to(dev), greedy.to(dev).long()
    K = args.unroll
    # start rows t with t + K inside the same sequence: inputs x_{t+1..t+K}, labels a_{t+1..t+K}
    valid = torch.cat([torch.arange(o, o + n - K, dtype=torch.long) for o, n in spans if n > K]).to(dev)
    log(f"training rows {valid.numel()} ({toks.numel()} tokens), unroll {K}")
    labels_sub = sub_index[greedy]  # -100 outside the subset
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr, weight_decay=0.0, betas=(0.9, 0.95))
    t0 = time.time()
    step = 0
    hist = []
    while True:
        el = time.time() - t0
        if el > args.train_seconds or step >= args.max_steps:
            break
        lr = args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, el / args.train_seconds))))
        for g in opt.param_groups:
            g["lr"] = lr
        t = valid[torch.randint(0, valid.numel(), (args.batch,), device=dev)]
        f = feats[t].float()
        loss = 0.0
        accs = []
        for k in range(1, K + 1):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                f = head(f, emb[toks[t + k]])
            f = f.float()
            logits = f @ w_sub.T
            lab = labels_sub[t + k]
            loss = loss + F.cross_entropy(logits, lab, ignore_index=-100) \
                + args.feature_weight * F.smooth_l1_loss(f, feats[t + k].float())
            accs.append((logits.argmax(-1) == lab).float().mean().item() if k <= 2 and step % 200 == 0 else None)
        opt.zero_grad(set_to_none=True)
        (loss / K).backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        if step % 200 == 0:
            hist.append({"step": step, "seconds": round(el, 1), "loss": round(loss.item() / K, 4),
                         "top1_step1": round(accs[0], 4), "top1_step2": round(accs[1], 4)})
            log(f"  step {step} loss {loss.item() / K:.4f} top1 {accs[0]:.3f}/{accs[1]:.3f} lr {lr:.2e}")
        step += 1
    return {"steps": step, "seconds": round(time.time() - t0, 1), "history": hist}


@torch.no_grad()
def chain_accept(head, emb, w_sub, vocab_ids, ids, feat, greedy, start, depth, dev, top1=None, truth_greedy=False):
    """For every position p in [start, T-1): how many of a greedy chain's `depth` head drafts,
    hanging off token ids[p] with the feature of row p-1, match the target's greedy tokens.
    top1 (k): the first draft may be any of the head's top-k (a tree of shape k,1,1,...)."""
    T = len(ids)
    pos = torch.arange(max(start, 1), T - 1, device=dev)
    if pos.numel() == 0:
        return torch.zeros(0, dtype=torch.long)
    ids_t = torch.tensor(ids, device=dev)
    # the answer is the target's greedy output: ids[p+1] follows ids[p]; for sampled text the
    # target's greedy token after row p (greedy[p]) is what a draft must match, the input tokens
    # staying the text's
    truth = ids_t if not truth_greedy else torch.cat([greedy[:1].long() * 0, greedy[:-1].long()])
    best = torch.zeros(pos.numel(), dtype=torch.long, device=dev)
    f0 = feat[pos - 1].float()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        f1 = head(f0, emb[ids_t[pos]])
    f1 = f1.float()
    logits = f1 @ w_sub.T
    k1 = top1 or 1
    cands = vocab_ids[logits.topk(k1, -1).indices]  # [P, k1]
    for c in range(k1):
        d = cands[:, c]
        alive = (pos + 1 < T) & (d == truth[(pos + 1).clamp(max=T - 1)])
        n = alive.long()
        f = f1
        for k in range(2, depth + 1):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                f = head(f, emb[d]).float()
            d = vocab_ids[(f @ w_sub.T).argmax(-1)]
            q = pos + k
            alive = alive & (q < T) & (d == truth[q.clamp(max=T - 1)])
            n = n + alive.long()
        best = torch.maximum(best, n)
    return best.cpu()


def walk_rounds(accepted, depth):
    """accepted[i] = drafts accepted for a round starting at answer position i; tokens a round."""
    i, rounds, tokens = 0, 0, 0
    while i < len(accepted):
        a = min(int(accepted[i]), depth)
        i += a + 1
        tokens += a + 1
        rounds += 1
    return tokens, rounds


def export(head, vocab_ids, meta, path):
    from safetensors.torch import save_file  # noqa: PLC0415 (optional dependency, only here)
    sd = head.state_dict()
    t = {
        "fc.weight": sd["fc.weight"], "fc.bias": sd["fc.bias"], "ffn_norm.weight": sd["ffn_norm.weight"],
        "ffn_gate.weight": sd["ffn_gate.weight"], "ffn_up.weight": sd["ffn_up.weight"],
        "ffn_down.weight": sd["ffn_down.weight"], "out_norm.weight": sd["out_norm.weight"],
    }
    t = {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in t.items()}
    t["vocab_ids"] = vocab_ids.to(torch.int32).contiguous().cpu()
    save_file(t, path, metadata={k: str(v) for k, v in meta.items()})


def add_data_args(ap):
    """The data flags train_draft_head.py and eagle_probe.py share (same values: same cached data)."""
    ap.add_argument("--work", default="/tmp/draft_head", help="cache of generated data between runs")
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--stage1", type=int, default=4096)
    ap.add_argument("--stage2", type=int, default=2048)
    ap.add_argument("--new1", type=int, default=256)
    ap.add_argument("--new2", type=int, default=160)
    ap.add_argument("--temperature", type=float, default=0.9,
                    help="sampling temperature of the training answers (0 = greedy); labels stay greedy")
    ap.add_argument("--gen-batch", type=int, default=512)


def training_pairs(a, tok, m16, dev, rng):
    """The generated (prompt, answer) pairs, from a.work's cache when it holds them: returns
    (held-out pairs, training sequences prompt + answer)."""
    os.makedirs(a.work, exist_ok=True)
    cache = os.path.join(a.work, f"data_s{a.seed}_{a.stage1}_{a.stage2}_t{a.temperature}.pt")
    if os.path.exists(cache):
        log(f"reusing {cache}")
    else:
        words = topic_words(tok, 4000, rng)
        p1 = stage1_prompts(words, a.stage1, rng)
        log(f"stage 1: {len(p1)} prompts from {len(words)} topic words")
        g1 = generate(m16, tok, p1, a.new1, a.gen_batch, dev, 512, a.temperature)
        docs = [tok.decode([t for t in ans if t != tok.eos_token_id]) for _, ans in g1 if len(ans) >= min(150, a.new1 * 3 // 4)]
        p2 = stage2_prompts(docs, a.stage2, rng)
        log(f"stage 2: {len(p2)} prompts from {len(docs)} documents")
        g2 = generate(m16, tok, p2, a.new2, a.gen_batch // 2, dev, 1536, a.temperature)
        torch.save(g1 + g2, cache)
    pairs = torch.load(cache)
    rng.shuffle(pairs)
    held = pairs[:len(pairs) // 20]  # held out: measures how far training accuracy generalizes
    seqs = [p + ans for p, ans in pairs[len(held):]]
    log(f"{len(seqs)} sequences, {sum(map(len, seqs))} tokens")
    return held, seqs


CATEGORIES = ("translation", "summarization", "qa", "math_reasoning", "rag")


def category_of(c):
    """Spec-Bench's categories, MT-bench's eight folded into one."""
    return c if c in CATEGORIES else "mt_bench"


def load_target(a, dev):
    """The target GGUF through transformers: (tokenizer, bf16 model for generation, float32 model for
    features and labels); seeds torch and returns the data RNG too."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    mdir, mfile = os.path.dirname(os.path.abspath(a.model)), os.path.basename(a.model)
    tok = AutoTokenizer.from_pretrained(mdir, gguf_file=mfile)
    log("loading the target (bf16 for generation, float32 for features)")
    m16 = AutoModelForCausalLM.from_pretrained(mdir, gguf_file=mfile, dtype=torch.bfloat16).to(dev).eval()
    m32 = AutoModelForCausalLM.from_pretrained(mdir, gguf_file=mfile, dtype=torch.float32).to(dev).eval()
    tok.padding_side = "left"
    return tok, m16, m32, rng


def gpu_driver():
    """The GPU driver version as nvidia-smi reports it, for the reports."""
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:  # noqa: BLE001
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="target GGUF (SmolLM2-135M-Instruct.Q4_1.gguf)")
    ap.add_argument("--eval-data", required=True, help="specbench-dev.jsonl (evaluation only)")
    ap.add_argument("--out", required=True, help="head file to write (.safetensors)")
    ap.add_argument("--report", required=True, help="JSON report")
    ap.add_argument("--reference", help="reference vectors JSON for tests/spec")
    ap.add_argument("--commit", default="unknown")
    add_data_args(ap)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--unroll", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--feature-weight", type=float, default=0.5)
    ap.add_argument("--train-seconds", type=float, default=150)
    ap.add_argument("--max-steps", type=int, default=1 << 30)
    ap.add_argument("--eval-limit", type=int, default=0, help="Spec-Bench items (0 = all)")
    ap.add_argument("--stop-after-data", action="store_true")
    a = ap.parse_args()

    import transformers  # noqa: PLC0415
    dev = "cuda"
    tok, m16, m32, rng = load_target(a, dev)
    mfile = os.path.basename(a.model)

    held, seqs = training_pairs(a, tok, m16, dev, rng)
    if a.stop_after_data:
        return

    log("target features (float32)")
    fg = features(m32, seqs, dev)
    data = list(zip(seqs, fg))
    counts = torch.bincount(torch.cat([g for _, g in fg]).long().cpu(), minlength=m32.config.vocab_size)
    vocab_ids = counts.topk(a.vocab).indices.sort().values
    coverage = counts[vocab_ids].sum().item() / counts.sum().item()
    log(f"vocab subset {a.vocab}: covers {coverage:.4f} of the target's greedy tokens")
    sub_index = torch.full((m32.config.vocab_size,), -100, dtype=torch.long)
    sub_index[vocab_ids] = torch.arange(a.vocab)
    sub_index = sub_index.to(dev)
    vocab_ids = vocab_ids.to(dev)
    emb = m32.model.embed_tokens.weight.detach().float()
    w_out = m32.lm_head.weight.detach().float()
    w_sub = w_out[vocab_ids].contiguous()
    H = m32.config.hidden_size
    eps = m32.config.rms_norm_eps
    head = DraftHead(H, a.ffn, eps).to(dev)
    tr = train(head, emb, w_sub, sub_index, data, a, dev)
    head.eval()

    log("evaluating on Spec-Bench dev (never trained on)")
    items = [json.loads(line) for line in open(a.eval_data)]
    if a.eval_limit:
        items = items[:a.eval_limit]
    ev = generate(m32, tok, [it["turns"][0] for it in items], 128, 256, dev, 4096)
    ev_seqs = [p + ans for p, ans in ev]
    ev_fg = features(m32, ev_seqs, dev)
    # held-out training-like sequences: drafts against the target's greedy tokens a_t (their
    # text was sampled, so compare with g, not with the next token)
    held_fg = features(m32, [p + ans for p, ans in held], dev)
    held_acc = {}
    for depth in (1,):  # later steps would feed the sampled text, not the drafts
        tot, n = 0, 0
        for (p, ans), (f, g) in zip(held, held_fg):
            ids = p + ans
            acc = chain_accept(head, emb, w_sub, vocab_ids, ids, f.to(dev), g.to(dev), len(p), depth, dev,
                               truth_greedy=True)
            tot += acc.sum().item() + acc.numel()
            n += acc.numel()
        held_acc[f"chain:{depth}"] = round(tot / max(n, 1), 3)
    log(f"  held-out training-like answers, tokens a round if every position started one: {held_acc}")
    shapes = {"chain:1": (1, None), "chain:2": (2, None), "chain:3": (3, None), "chain:4": (4, None),
              "chain:6": (6, None), "chain:8": (8, None), "static:2,1,1,1": (4, 2), "static:4,1,1,1": (4, 4)}
    per = {}
    for (p, ans), (f, g), it in zip(ev, ev_fg, items):
        ids = p + ans
        for name, (depth, k1) in shapes.items():
            acc = chain_accept(head, emb, w_sub, vocab_ids, ids, f.to(dev), g.to(dev), len(p), depth, dev, k1)
            tokens, rounds = walk_rounds(acc.tolist(), depth)
            for c in (category_of(it["category"]), "overall"):
                d = per.setdefault(name, {}).setdefault(c, [0, 0])
                d[0] += tokens
                d[1] += rounds
    table = {s: {c: round(t / max(r, 1), 3) for c, (t, r) in v.items()} for s, v in per.items()}
    for s, v in table.items():
        log(f"  {s:16s} " + " ".join(f"{c} {x}" for c, x in sorted(v.items())))

    meta = {"format": "specula-draft-head", "version": 1, "hidden_size": H, "ffn_size": a.ffn,
            "vocab_size": m32.config.vocab_size, "rms_eps": eps, "target": mfile,
            "trained_by": "scripts/draft_head/train_draft_head.py", "commit": a.commit, "seed": a.seed,
            "train_sequences": len(seqs), "train_tokens": sum(map(len, seqs)), "train_steps": tr["steps"]}
    export(head, vocab_ids, meta, a.out)
    log(f"wrote {a.out}")

    if a.reference:
        # Four real (feature, token) pairs from Spec-Bench answers, and what the exported (bf16)
        # head gives for them: one step's f' and top logits, and a greedy chain of 4.
        ref_head = DraftHead(H, a.ffn, eps).to(dev)
        ref_head.load_state_dict({k: v.to(torch.bfloat16).float() for k, v in head.state_dict().items()})
        cases = []
        for j in sorted({0, len(ev) // 4, len(ev) // 2, 3 * len(ev) // 4}):
            (p, ans), (f, g) = ev[j], ev_fg[j]
            r = len(p) + min(5, len(ans) - 2) - 1
            ids = p + ans
            feat = f[r].float().to(dev)
            x = ids[r + 1]
            fp = ref_head(feat[None], emb[torch.tensor([x], device=dev)])[0]
            lg = fp @ w_sub.T
            top = lg.topk(8)
            chain, ff, tt = [], feat, x
            for _ in range(4):
                ff = ref_head(ff[None], emb[torch.tensor([tt], device=dev)])[0]
                tt = int(vocab_ids[(ff @ w_sub.T).argmax()])
                chain.append(tt)
            cases.append({"item": items[j]["question_id"], "feature": [round(v, 6) for v in feat.tolist()],
                          "token": x, "next_feature": [round(v, 6) for v in fp.tolist()],
                          "top_ids": [int(vocab_ids[i]) for i in top.indices.tolist()],
                          "top_logits": [round(v, 5) for v in top.values.tolist()], "chain4": chain})
        json.dump({"producer": "scripts/draft_head/train_draft_head.py (PyTorch " + torch.__version__ + ", float32 "
                   "forward of the exported bf16 weights)", "head": os.path.basename(a.out), "cases": cases},
                  open(a.reference, "w"), indent=1)

    rep = {
        "benchmark": "draft_head_training", "date": datetime.date.today().isoformat(), "commit": a.commit,
        "command": " ".join(shlex.quote(x) for x in sys.argv),
        "device": torch.cuda.get_device_name(0), "driver": gpu_driver(),
        "torch": torch.__version__, "transformers": transformers.__version__, "host": platform.node(),
        "data": {"sequences": len(seqs), "tokens": sum(map(len, seqs)), "stage1_prompts": a.stage1,
                 "stage2_prompts": a.stage2, "source": "templates over the model's vocabulary words and random "
                 "arithmetic; answers and documents generated by the target itself (bf16, "
                 + (f"sampled at temperature {a.temperature}, top-p 0.95" if a.temperature > 0 else "greedy") + ")"},
        "head": {"hidden": H, "ffn": a.ffn, "vocab_subset": a.vocab, "subset_coverage": round(coverage, 4),
                 "params": sum(p.numel() for p in head.parameters())},
        "training": tr, "held_out": {"sequences": len(held), "tokens_per_position": held_acc},
        "eval": {"data": a.eval_data, "items": len(items), "answer_tokens": 128,
                 "what": "tokens a round (accepted drafts + 1) of greedy chains / trees drafted by the head, "
                         "rounds walked over the target's float32 greedy answers; 'static:k,1,1,1' = top-k "
                         "first drafts, each continued greedily",
                 "tokens_per_round": table},
    }
    json.dump(rep, open(a.report, "w"), indent=1)
    log(f"wrote {a.report}")


if __name__ == "__main__":
    main()
