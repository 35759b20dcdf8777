#!/usr/bin/env python3
"""Measures, offline on the GPU machine, what a draft head that sees the context would accept on
Spec-Bench dev, beside the shipped MLP head (engine/spec/head_drafter.h) in the same run.

The shipped head maps (f, emb(x)) to the next feature with an MLP, so it cannot look back at the
context. This probe trains EAGLE's shape instead (Li et al. 2024): the same fc([f; emb(x)]), then
one decoder layer (causal self-attention with RoPE over the head's own keys of every earlier row,
then SwiGLU), then RMSNorm. In an engine it would need a KV cache of its own filled with the
target's features of every committed row, the prompt's included; this script answers whether that
is worth building, and writes no head file.

Training uses the same generated data as train_draft_head.py (same flags, same cache) and
EAGLE-3's "training-time test": windows of --window rows, teacher-forced at the first step (every
row's input is the true feature of the row before), then --unroll - 1 further steps where each row
continues from its own predicted feature and attends to the true rows up to it plus its own
earlier steps, as drafting does.

Evaluation walks rounds over the target's float32 greedy answers to Spec-Bench dev exactly as
train_draft_head.py does (tokens a round = accepted drafts + 1), for both heads.
"""
import argparse
import datetime
import json
import math
import os
import platform
import shlex
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_draft_head as tdh  # noqa: E402

log = tdh.log


def rope(x, pos, theta):
    """x [..., P, d] rotated by positions pos [P] (rotate-half, as Llama)."""
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    ang = pos.float()[:, None] * inv[None]  # [P, d/2]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return (x.float() * cos + torch.cat([-x2, x1], -1).float() * sin).to(x.dtype)


class EagleHead(nn.Module):
    def __init__(self, h, f, heads, kv_heads, eps, theta):
        super().__init__()
        self.heads, self.kv, self.d, self.theta = heads, kv_heads, h // heads, theta
        self.fc = nn.Linear(2 * h, h)
        self.attn_norm = tdh.RMSNorm(h, eps)
        self.q = nn.Linear(h, heads * self.d, bias=False)
        self.k = nn.Linear(h, kv_heads * self.d, bias=False)
        self.v = nn.Linear(h, kv_heads * self.d, bias=False)
        self.o = nn.Linear(heads * self.d, h, bias=False)
        self.ffn_norm = tdh.RMSNorm(h, eps)
        self.ffn_gate = nn.Linear(h, f, bias=False)
        self.ffn_up = nn.Linear(h, f, bias=False)
        self.ffn_down = nn.Linear(f, h, bias=False)
        self.out_norm = tdh.RMSNorm(h, eps)

    def inputs(self, feat, emb):
        """u = fc([f; emb(x)]): [B, P, H]."""
        return self.fc(torch.cat([feat, emb], -1))

    def qkv(self, u, pos):
        """q [B, heads, P, d], k and v [B, heads, P, d] (kv heads repeated), RoPE at pos [P]."""
        B, P, _ = u.shape
        n = self.attn_norm(u)
        q = self.q(n).view(B, P, self.heads, self.d).transpose(1, 2)
        k = self.k(n).view(B, P, self.kv, self.d).transpose(1, 2)
        v = self.v(n).view(B, P, self.kv, self.d).transpose(1, 2)
        rep = self.heads // self.kv
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        return rope(q, pos, self.theta), rope(k, pos, self.theta), v

    def finish(self, u, att):
        """att [B, heads, P, d] -> the predicted feature [B, P, H]."""
        B, _, P, _ = att.shape
        h = u + self.o(att.transpose(1, 2).reshape(B, P, -1))
        n = self.ffn_norm(h)
        h = h + self.ffn_down(F.silu(self.ffn_gate(n)) * self.ffn_up(n))
        return self.out_norm(h)


def attend(q, k1, v1, key_ok, extra, rows=None):
    """A draft step's attention: query i (base row rows[i], all rows when None) sees the true
    keys k1/v1 [B, h, W, d] at rows <= its base (and key_ok [B, W]), and its own earlier steps'
    keys `extra` [(k, v) each [B, h, Q, d]] at the same index. Returns [B, h, Q, d]."""
    W = k1.shape[2]
    Q = q.shape[2]
    base = torch.arange(W, device=q.device) if rows is None else rows
    scale = 1.0 / math.sqrt(q.shape[-1])
    s1 = (q @ k1.transpose(-1, -2)).float() * scale  # [B, h, Q, W]
    causal = torch.arange(W, device=q.device)[None, :] <= base[:, None]  # [Q, W]
    s1 = s1.masked_fill(~(causal[None, None] & key_ok[:, None, None, :]), float("-inf"))
    sd = [((q * k).sum(-1).float() * scale)[..., None] for k, _ in extra]  # [B, h, Q, 1] each
    p = torch.softmax(torch.cat([s1] + sd, -1), -1)
    out = p[..., :W].to(v1.dtype) @ v1
    for i, (_, v) in enumerate(extra):
        out = out + p[..., W + i:W + i + 1].to(v.dtype) * v
    assert out.shape[2] == Q
    return out


def unrolled(head, feat_prev, x_tok, emb, steps_tokens, key_ok):
    """Runs `len(steps_tokens) + 1` draft steps over windows: step 1 from the true previous
    features feat_prev [B, W, H] and tokens x_tok [B, W]; step s from step s-1's prediction and
    steps_tokens[s-2] [B, W]. Returns the predicted features of every step, [B, W, H] each."""
    B, W, _ = feat_prev.shape
    pos = torch.arange(W, device=feat_prev.device)
    u = head.inputs(feat_prev, emb[x_tok])
    q, k1, v1 = head.qkv(u, pos)
    f = head.finish(u, attend(q, k1, v1, key_ok, []))
    outs = [f]
    extra = []
    for s, toks in enumerate(steps_tokens, start=2):
        u = head.inputs(f, emb[toks])
        q, k, v = head.qkv(u, pos + s - 1)
        extra.append((k, v))
        f = head.finish(u, attend(q, k1, v1, key_ok, extra))
        outs.append(f)
    return outs


def train(head, emb, w_sub, sub_index, data, a, dev):
    toks, feats, greedy, spans = tdh.flatten(data)
    toks, feats, greedy = toks.to(dev).long(), feats.to(dev), greedy.to(dev).long()
    labels = sub_index[greedy]
    spans = [(o, n) for o, n in spans if n >= 3]
    off = torch.tensor([o for o, _ in spans], device=dev)
    lens = torch.tensor([n for _, n in spans], device=dev)
    W, U = a.window, a.unroll
    opt = torch.optim.AdamW(head.parameters(), lr=a.lr, weight_decay=0.0, betas=(0.9, 0.95))
    log(f"training on {len(spans)} sequences, {toks.numel()} tokens, windows of {W}, {U} steps")
    t0, step, hist = time.time(), 0, []
    ar = torch.arange(W, device=dev)
    while time.time() - t0 < a.train_seconds:
        el = time.time() - t0
        lr = a.lr * min(1.0, (step + 1) / 100) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, el / a.train_seconds))))
        for g in opt.param_groups:
            g["lr"] = lr
        j = torch.multinomial(lens.float(), a.batch, replacement=True)  # sequences, by length
        o, n = off[j], lens[j]
        s = 1 + (torch.rand(a.batch, device=dev) * (n - W).clamp(min=1)).long()
        r = s[:, None] + ar[None]  # rows [B, W]
        key_ok = r < n[:, None]
        row = lambda k: o[:, None] + torch.minimum(r + k, n[:, None] - 1)  # noqa: E731
        step_toks = [toks[row(k)] for k in range(1, U)]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            outs = unrolled(head, feats[row(-1)].float(), toks[row(0)], emb, step_toks, key_ok)
        loss, accs = 0.0, []
        for k, f in enumerate(outs):
            ok = (r + k) < n[:, None]
            f = f.float()
            lab = labels[row(k)].masked_fill(~ok, -100)
            logits = f @ w_sub.T
            loss = loss + F.cross_entropy(logits.view(-1, logits.shape[-1]), lab.view(-1), ignore_index=-100) \
                + a.feature_weight * (F.smooth_l1_loss(f, feats[row(k)].float(), reduction="none").mean(-1)[ok]).mean()
            if step % 100 == 0:
                m = lab >= 0
                accs.append(round((logits.argmax(-1)[m] == lab[m]).float().mean().item(), 4))
        opt.zero_grad(set_to_none=True)
        (loss / U).backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        if step % 100 == 0:
            hist.append({"step": step, "seconds": round(el, 1), "loss": round(loss.item() / U, 4), "top1_by_step": accs})
            log(f"  step {step} loss {loss.item() / U:.4f} top1 {accs} lr {lr:.2e}")
        step += 1
    return {"steps": step, "seconds": round(time.time() - t0, 1), "history": hist}


@torch.no_grad()
def eagle_accept(head, emb, w_sub, vocab_ids, ids, feat, greedy, start, depth, dev, truth_greedy=False):
    """chain_accept's measure for the attention head: for every base row p in [start, T-1), the
    head drafts `depth` tokens from (f_{p-1}, ids[p]) with the true rows 1..p as its context."""
    T = len(ids)
    ids_t = torch.tensor(ids, device=dev)
    truth = ids_t if not truth_greedy else torch.cat([greedy[:1].long() * 0, greedy[:-1].long()])
    # the head's rows are 1..T-1 (row r: input (f_{r-1}, x_r)); index i = r - 1
    fp = feat[:-1].float()[None]
    xt = ids_t[1:][None]
    W = T - 1
    pos = torch.arange(W, device=dev)
    key_ok = torch.ones(1, W, dtype=torch.bool, device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        u = head.inputs(fp, emb[xt])
        q, k1, v1 = head.qkv(u, pos)
        f = head.finish(u, attend(q, k1, v1, key_ok, []))
    bases = torch.arange(max(start, 1), T - 1, device=dev)  # rows p
    if bases.numel() == 0:
        return torch.zeros(0, dtype=torch.long)
    idx = bases - 1
    f = f[:, idx].float()
    d = vocab_ids[(f @ w_sub.T).argmax(-1)]  # [1, P]
    alive = d[0] == truth[bases + 1]
    n = alive.long()
    extra = []
    for s in range(2, depth + 1):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            u = head.inputs(f, emb[d])
            q, k, v = head.qkv(u, idx + s - 1)
            extra.append((k, v))
            f = head.finish(u, attend(q, k1, v1, key_ok, extra, rows=idx)).float()
        d = vocab_ids[(f @ w_sub.T).argmax(-1)]
        qpos = bases + s
        alive = alive & (qpos < T) & (d[0] == truth[qpos.clamp(max=T - 1)])
        n = n + alive.long()
    return n.cpu()


def load_shipped(path, H, eps, dev):
    from safetensors.torch import load_file  # noqa: PLC0415
    t = load_file(path)
    head = tdh.DraftHead(H, t["ffn_gate.weight"].shape[0], eps).to(dev)
    head.load_state_dict({k: v.float() for k, v in t.items() if k != "vocab_ids"})
    return head.eval(), t["vocab_ids"].long().to(dev)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="target GGUF (SmolLM2-135M-Instruct.Q4_1.gguf)")
    ap.add_argument("--eval-data", required=True, help="specbench-dev.jsonl (evaluation only)")
    ap.add_argument("--shipped-head", required=True, help="the MLP head to evaluate beside (resources/draft_heads/)")
    ap.add_argument("--report", required=True)
    ap.add_argument("--commit", default="unknown")
    tdh.add_data_args(ap)
    ap.add_argument("--ffn", type=int, default=1536)
    ap.add_argument("--heads", type=int, default=9)
    ap.add_argument("--kv-heads", type=int, default=3)
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("--unroll", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32, help="windows a step")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--feature-weight", type=float, default=0.5)
    ap.add_argument("--train-seconds", type=float, default=240)
    ap.add_argument("--eval-limit", type=int, default=0)
    ap.add_argument("--in-domain", type=int, default=0, metavar="N",
                    help="diagnostic: train both heads (a fresh MLP head too) only on N answers sampled from the target "
                         "for each prompt of one half of Spec-Bench dev, and evaluate on the other half")
    ap.add_argument("--mlp-seconds", type=float, default=120, help="--in-domain: the fresh MLP head's training time")
    a = ap.parse_args()

    import transformers  # noqa: PLC0415
    dev = "cuda"
    tok, m16, m32, rng = tdh.load_target(a, dev)
    items = [json.loads(line) for line in open(a.eval_data)]
    if a.in_domain:
        # every other item of each category trains, the rest evaluates: no evaluated prompt is seen
        seen = {}
        halves = ([], [])
        for it in items:
            c = tdh.category_of(it["category"])
            halves[seen.get(c, 0) % 2].append(it)
            seen[c] = seen.get(c, 0) + 1
        train_items, items = halves
        prompts = [it["turns"][0] for it in train_items for _ in range(a.in_domain)]
        log(f"in-domain diagnostic: {len(train_items)} training prompts x {a.in_domain} samples, {len(items)} evaluated")
        pairs = tdh.generate(m16, tok, prompts, 128, a.gen_batch, dev, 4096, a.temperature)
        rng.shuffle(pairs)
        held = pairs[:len(pairs) // 20]
        seqs = [p + ans for p, ans in pairs[len(held):]]
    else:
        held, seqs = tdh.training_pairs(a, tok, m16, dev, rng)
    del m16
    H, eps = m32.config.hidden_size, m32.config.rms_norm_eps
    theta = float(getattr(m32.config, "rope_theta", None) or m32.config.rope_parameters["rope_theta"])
    emb = m32.model.embed_tokens.weight.detach().float()
    w_out = m32.lm_head.weight.detach().float()

    mlp, vocab_ids = load_shipped(a.shipped_head, H, eps, dev)  # same vocabulary subset for both
    w_sub = w_out[vocab_ids].contiguous()
    sub_index = torch.full((m32.config.vocab_size,), -100, dtype=torch.long, device=dev)
    sub_index[vocab_ids] = torch.arange(vocab_ids.numel(), device=dev)

    log("target features (float32)")
    fg = tdh.features(m32, seqs, dev)
    head = EagleHead(H, a.ffn, a.heads, a.kv_heads, eps, theta).to(dev)
    tr = train(head, emb, w_sub, sub_index, list(zip(seqs, fg)), a, dev)
    head.eval()
    tr_mlp = None
    if a.in_domain:  # the MLP head retrained on the same data, as train_draft_head.py trains it
        log("fresh MLP head on the same data")
        mlp = tdh.DraftHead(H, 1024, eps).to(dev)
        opts = argparse.Namespace(unroll=4, batch=4096, lr=2e-3, feature_weight=a.feature_weight,
                                  train_seconds=a.mlp_seconds, max_steps=1 << 30)
        tr_mlp = tdh.train(mlp, emb, w_sub, sub_index, list(zip(seqs, fg)), opts, dev)
        mlp.eval()
    del fg

    log("evaluating on Spec-Bench dev (never trained on)")
    if a.eval_limit:
        items = items[:a.eval_limit]
    ev = tdh.generate(m32, tok, [it["turns"][0] for it in items], 128, 256, dev, 4096)
    ev_fg = tdh.features(m32, [p + ans for p, ans in ev], dev)
    held_fg = tdh.features(m32, [p + ans for p, ans in held], dev)
    held_acc = {}
    for name in ("mlp", "eagle"):
        tot, n = 0, 0
        for (p, ans), (f, g) in zip(held, held_fg):
            ids = p + ans
            if name == "mlp":
                acc = tdh.chain_accept(mlp, emb, w_sub, vocab_ids, ids, f.to(dev), g.to(dev), len(p), 1, dev,
                                       truth_greedy=True)
            else:
                acc = eagle_accept(head, emb, w_sub, vocab_ids, ids, f.to(dev), g.to(dev), len(p), 1, dev,
                                   truth_greedy=True)
            tot += acc.sum().item()
            n += acc.numel()
        held_acc[name] = round(tot / max(n, 1), 4)
    log(f"  first-draft accuracy on held-out training-like answers: {held_acc}")
    depths = (1, 2, 3, 4, 6)
    per = {}
    first = {"mlp": [0, 0], "eagle": [0, 0]}
    for (p, ans), (f, g), it in zip(ev, ev_fg, items):
        ids = p + ans
        for name in ("mlp", "eagle"):
            # A greedy chain's first k drafts do not depend on its length: drafted once to the
            # deepest, a chain of k accepts min(accepted, k).
            if name == "mlp":
                deepest = tdh.chain_accept(mlp, emb, w_sub, vocab_ids, ids, f.to(dev), g.to(dev), len(p), depths[-1], dev)
            else:
                deepest = eagle_accept(head, emb, w_sub, vocab_ids, ids, f.to(dev), g.to(dev), len(p), depths[-1], dev)
            for depth in depths:
                acc = deepest.clamp(max=depth)
                if depth == 1:
                    first[name][0] += acc.sum().item()
                    first[name][1] += acc.numel()
                tokens, rounds = tdh.walk_rounds(acc.tolist(), depth)
                for c in (tdh.category_of(it["category"]), "overall"):
                    d = per.setdefault(f"{name} chain:{depth}", {}).setdefault(c, [0, 0])
                    d[0] += tokens
                    d[1] += rounds
    table = {s: {c: round(t / max(r, 1), 3) for c, (t, r) in v.items()} for s, v in per.items()}
    for s, v in table.items():
        log(f"  {s:16s} " + " ".join(f"{c} {x}" for c, x in sorted(v.items())))
    first_acc = {k: round(v[0] / max(v[1], 1), 4) for k, v in first.items()}
    log(f"  first-draft accuracy on Spec-Bench answers: {first_acc}")

    def macs(m):
        return sum(p.numel() for n_, p in m.named_parameters() if n_.endswith("weight") and p.dim() == 2)
    target_macs = sum(p.numel() for p in m32.model.layers.parameters() if p.dim() == 2) + w_out.numel()

    rep = {
        "benchmark": "draft_head_context_probe", "date": datetime.date.today().isoformat(), "commit": a.commit,
        "command": " ".join(shlex.quote(x) for x in sys.argv),
        "device": torch.cuda.get_device_name(0),
        "driver": tdh.gpu_driver(),
        "torch": torch.__version__, "transformers": transformers.__version__, "host": platform.node(),
        "what": "an EAGLE-shaped head (fc, one causal attention layer with RoPE over its own keys of the true "
                "rows, SwiGLU, RMSNorm) trained on train_draft_head.py's generated data, against the shipped MLP "
                "head, both over the same 8192-id vocabulary subset; offline, no engine code",
        "data": {"sequences": len(seqs), "tokens": sum(map(len, seqs)), "held_out_sequences": len(held)},
        "eagle_head": {"hidden": H, "ffn": a.ffn, "heads": a.heads, "kv_heads": a.kv_heads, "window": a.window,
                       "unroll": a.unroll, "params": sum(p.numel() for p in head.parameters()),
                       "matmul_macs_per_draft_token": macs(head) + w_sub.numel()},
        "mlp_head": {"file": a.shipped_head if not a.in_domain else "retrained (--in-domain)", "params": sum(p.numel() for p in mlp.parameters()),
                     "matmul_macs_per_draft_token": macs(mlp) + w_sub.numel()},
        "target_matmul_macs_per_token": target_macs,
        "training": tr,
        "in_domain": None if not a.in_domain else {
            "samples_per_prompt": a.in_domain, "temperature": a.temperature,
            "what": "DIAGNOSTIC, no head shipped: both heads (the MLP one retrained, FFN 1024) trained only on the "
                    "target's sampled answers to every other Spec-Bench dev item of each category; evaluated on "
                    "the other half", "mlp_training": tr_mlp},
        "first_draft_accuracy": {"held_out_training_like": held_acc, "specbench": first_acc},
        "eval": {"data": a.eval_data, "items": len(items), "answer_tokens": 128,
                 "what": "tokens a round (accepted drafts + 1) of greedy chains drafted by each head, rounds "
                         "walked over the target's float32 greedy answers, as train_draft_head.py reports them",
                 "tokens_per_round": table},
    }
    json.dump(rep, open(a.report, "w"), indent=1)
    log(f"wrote {a.report}")


if __name__ == "__main__":
    main()
