#!/usr/bin/env python3
"""The PyTorch peer of bench/bench_train_peer.sh: a plain eager training loop.

Trains the model a roundpipe config.json describes (Qwen3 or Llama, built
with transformers, random init from normal(0, initializer_range)) on a token
.npy with roundpipe's training contract, so that both sides do the same work:

  * sample i = tokens[i*S : i*S+S+1]; step k takes samples ((k-1)*B + j) mod n;
  * the step's B samples are split into M microbatches and the gradient is
    accumulated over them (each microbatch's summed cross-entropy divided by
    the step's token count, so the result is the mean token loss);
  * global gradient-norm clipping, AdamW with weight decay only on parameters
    with two or more dimensions, linear warm-up then cosine schedule; fp32.

Timing: the wall clock from the end of step W (the warm-up steps, excluded)
to the end of step K, optimizer step included; tokens/s = (K - W) * B * S /
that time.  Prints one JSON object on stdout:
  {"tokens_per_s": ..., "steps_timed": ..., "seconds": ..., "params": ...,
   "first_loss": ..., "last_loss": ..., "threads": ...}

Exit status 3 when torch, transformers or numpy cannot be imported (the
caller skips this peer), 2 for a usage error.
"""

import argparse
import json
import math
import os
import sys
import time


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="config.json (roundpipe's --init-config)")
    ap.add_argument("--data", required=True, help="token ids, 1-D .npy")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--steps", type=int, default=6, help="steps, warm-up included")
    ap.add_argument("--warmup", type=int, default=1, help="steps excluded from timing")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--min-lr", type=float, default=0.0)
    ap.add_argument("--warmup-steps", type=int, default=0, help="lr warm-up steps")
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--attn", default="sdpa", choices=("sdpa", "eager"),
                    help="transformers attention implementation (default sdpa)")
    a = ap.parse_args()
    if a.batch_size % a.microbatches:
        ap.error("--microbatches must divide --batch-size")
    if not 1 <= a.warmup < a.steps:
        ap.error("need 1 <= --warmup < --steps")
    return a


def lr_at(k, a):
    """roundpipe's schedule: linear warm-up, then cosine to min-lr."""
    if k <= a.warmup_steps:
        return a.lr * k / a.warmup_steps
    frac = (k - a.warmup_steps) / max(1, a.steps - a.warmup_steps)
    return a.min_lr + (a.lr - a.min_lr) * 0.5 * (1.0 + math.cos(math.pi * frac))


def main():
    a = parse()
    # Threads must be fixed before torch starts its pools.
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    os.environ["MKL_NUM_THREADS"] = str(a.threads)
    try:
        import numpy as np
        import torch
        import transformers
    except ImportError as ex:
        print("torch_train_peer: %s" % ex, file=sys.stderr)
        return 3
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)

    with open(a.config) as f:
        cfg = json.load(f)
    arch = cfg.get("model_type", "qwen3")
    cfg.pop("architectures", None)
    cfg.pop("torch_dtype", None)
    cfg["use_cache"] = False
    if arch == "qwen3":
        conf = transformers.Qwen3Config(**cfg)
        cls = transformers.Qwen3ForCausalLM
    elif arch == "llama":
        conf = transformers.LlamaConfig(**cfg)
        cls = transformers.LlamaForCausalLM
    else:
        print("torch_train_peer: model_type %r not supported" % arch, file=sys.stderr)
        return 2
    conf._attn_implementation = a.attn
    torch.manual_seed(a.seed)
    model = cls(conf).to(torch.float32)
    model.train()
    params = sum(p.numel() for p in model.parameters())  # tied weights counted once

    tokens = torch.from_numpy(np.load(a.data).astype(np.int64))
    S, B, M = a.seq_len, a.batch_size, a.microbatches
    n = (len(tokens) - 1) // S
    if n < 1:
        print("torch_train_peer: %s has fewer than %d tokens" % (a.data, S + 1), file=sys.stderr)
        return 2
    if int(tokens.max()) >= conf.vocab_size:
        print("torch_train_peer: token id %d >= vocab_size %d"
              % (int(tokens.max()), conf.vocab_size), file=sys.stderr)
        return 2

    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)

    losses = []
    t0 = None
    for k in range(1, a.steps + 1):
        idx = [((k - 1) * B + j) % n for j in range(B)]
        inp = torch.stack([tokens[i * S:i * S + S] for i in idx])
        tgt = torch.stack([tokens[i * S + 1:i * S + S + 1] for i in idx])
        count = tgt.numel()  # no loss mask: every target counts
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for m in range(M):
            lo, hi = m * B // M, (m + 1) * B // M
            logits = model(input_ids=inp[lo:hi]).logits
            ce = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), tgt[lo:hi].reshape(-1), reduction="sum")
            (ce / count).backward()
            total += float(ce.detach())
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        for g in opt.param_groups:
            g["lr"] = lr_at(k, a)
        opt.step()
        losses.append(total / count)
        if not math.isfinite(losses[-1]):
            print("torch_train_peer: step %d: loss %g" % (k, losses[-1]), file=sys.stderr)
            return 1
        if k == a.warmup:
            t0 = time.perf_counter()
    dt = time.perf_counter() - t0
    timed = a.steps - a.warmup
    print(json.dumps({
        "tokens_per_s": timed * B * S / dt, "steps_timed": timed, "seconds": dt,
        "params": params, "first_loss": losses[0], "last_loss": losses[-1],
        "threads": a.threads, "microbatches": M, "attn": a.attn,
        "torch": torch.__version__, "transformers": transformers.__version__,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
