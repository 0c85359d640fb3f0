#!/usr/bin/env python3
"""PyTorch peer of roundpipe's e2e figure on the GPU machine (bench/gpu/run.sh).

Trains the Qwen3 model a roundpipe config.json describes (by default
bench/gpu/qwen3-1.7b-config.json) the way a PyTorch user with the whole
model on one GPU would: every parameter, gradient and AdamW state resident on
the GPU, bf16 compute with SDPA attention (flash kernels, causal, grouped
key/value heads), fused AdamW on the GPU, the same sequence, batch and
microbatches as roundpipe's run (each microbatch's summed cross-entropy over
the step's token count, so the loss is the step's mean token loss), global
gradient-norm clipping at 1.0.

The model is written here in plain PyTorch (no transformers: its API moves
between versions, and nothing can be installed on the GPU machine): token
embedding, per block RMSNorm, q/k/v/o projections with Qwen3's per-head
RMSNorm of q and k, rotary positions (rotate-half, rope_theta), SwiGLU MLP,
final RMSNorm, head tied to the embedding or not as the config says; the
parameter count is printed and must equal 6 x N's N in run.sh.

--precision autocast (default): fp32 parameters and AdamW state, matrix work
  in bf16 under torch.autocast: fp32 master weights with bf16 compute, as
  roundpipe keeps them (its master copy is fp32, its compute copy bf16).
--precision bf16: parameters, gradients and AdamW state in bf16: less memory
  traffic, the fastest plain-PyTorch setting (an upper reference).

Random tokens (seeded; their values do not change the work). Timing: CUDA
synchronised wall clock per step; steps 1..--warmup excluded; tokens/s =
B x S / the median timed step. Prints one JSON object on stdout:
  {"tokens_per_s", "step_seconds", "params", "peak_gib", "first_loss",
   "last_loss", "precision", "seq_len", "batch_size", "microbatches", ...}
--check parses the config and prints the parameter count without importing
torch (bench/gpu/run.sh --selftest). Exit 3: torch or a GPU is missing.
"""

import argparse
import json
import math
import sys
import time


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="roundpipe config.json (Qwen3)")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--steps", type=int, default=6, help="steps, warm-up included")
    ap.add_argument("--warmup", type=int, default=2, help="steps excluded from timing")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--precision", choices=("autocast", "bf16"), default="autocast")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--check", action="store_true", help="config and parameter count only, no torch")
    a = ap.parse_args()
    if a.batch_size % a.microbatches:
        ap.error("--microbatches must divide --batch-size")
    if not 0 <= a.warmup < a.steps:
        ap.error("need 0 <= --warmup < --steps")
    return a


def load_config(path):
    with open(path) as f:
        c = json.load(f)
    if c.get("model_type", "qwen3") != "qwen3":
        raise SystemExit("torch_peer.py: %s: model_type %r; only qwen3" % (path, c.get("model_type")))
    c.setdefault("head_dim", c["hidden_size"] // c["num_attention_heads"])
    return c


def param_count(c):
    h, i, v, L = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    block = h * nh * hd + 2 * h * nkv * hd + nh * hd * h + 3 * h * i + 2 * h + 2 * hd
    return v * h * (1 if c.get("tie_word_embeddings") else 2) + L * block + h


def build(torch, c, dtype):
    nn = torch.nn
    F = torch.nn.functional
    h, hd, nh, nkv = c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    eps, std = c.get("rms_norm_eps", 1e-6), c.get("initializer_range", 0.02)

    class RMSNorm(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(n, dtype=dtype))

        def forward(self, x):
            y = x.float()
            y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps)
            return self.weight * y.to(x.dtype)

    def linear(i, o):
        m = nn.Linear(i, o, bias=False, dtype=dtype)
        nn.init.normal_(m.weight, 0.0, std)
        return m

    def rotate(x, cos, sin):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = RMSNorm(h)
            self.q_proj, self.k_proj = linear(h, nh * hd), linear(h, nkv * hd)
            self.v_proj, self.o_proj = linear(h, nkv * hd), linear(nh * hd, h)
            self.q_norm, self.k_norm = RMSNorm(hd), RMSNorm(hd)
            self.post_attention_layernorm = RMSNorm(h)
            self.gate_proj = linear(h, c["intermediate_size"])
            self.up_proj = linear(h, c["intermediate_size"])
            self.down_proj = linear(c["intermediate_size"], h)

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            y = self.input_layernorm(x)
            q = self.q_norm(self.q_proj(y).view(b, s, nh, hd)).transpose(1, 2)
            k = self.k_norm(self.k_proj(y).view(b, s, nkv, hd)).transpose(1, 2)
            v = self.v_proj(y).view(b, s, nkv, hd).transpose(1, 2)
            q, k = rotate(q, cos, sin).to(v.dtype), rotate(k, cos, sin).to(v.dtype)
            try:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            except TypeError:  # a torch before 2.5
                r = nh // nkv
                o = F.scaled_dot_product_attention(q, k.repeat_interleave(r, 1),
                                                   v.repeat_interleave(r, 1), is_causal=True)
            x = x + self.o_proj(o.transpose(1, 2).reshape(b, s, nh * hd))
            y = self.post_attention_layernorm(x)
            return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(c["vocab_size"], h, dtype=dtype)
            nn.init.normal_(self.embed_tokens.weight, 0.0, std)
            self.layers = nn.ModuleList(Block() for _ in range(c["num_hidden_layers"]))
            self.norm = RMSNorm(h)
            self.lm_head = None if c.get("tie_word_embeddings") else linear(h, c["vocab_size"])

        def forward(self, ids):
            s = ids.shape[1]
            pos = torch.arange(s, device=ids.device, dtype=torch.float32)
            inv = 1.0 / (c.get("rope_theta", 10000.0) ** (torch.arange(0, hd, 2, device=ids.device,
                                                                       dtype=torch.float32) / hd))
            ang = torch.outer(pos, inv)
            ang = torch.cat((ang, ang), dim=-1)
            cos, sin = ang.cos(), ang.sin()
            x = self.embed_tokens(ids)
            for blk in self.layers:
                x = blk(x, cos, sin)
            x = self.norm(x)
            w = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
            return F.linear(x, w)

    return Model()


def main():
    a = parse()
    c = load_config(a.config)
    n = param_count(c)
    if a.check:
        print(json.dumps({"check": "ok", "params": n, "seq_len": a.seq_len, "batch_size": a.batch_size,
                          "microbatches": a.microbatches, "precision": a.precision}))
        return 0
    try:
        import torch
    except ImportError as ex:
        print("torch_peer.py: %s" % ex, file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("torch_peer.py: torch %s sees no GPU" % torch.__version__, file=sys.stderr)
        return 3
    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    dtype = torch.bfloat16 if a.precision == "bf16" else torch.float32
    with torch.device("cuda"):
        model = build(torch, c, dtype)
    got = sum(p.numel() for p in model.parameters())
    if got != n:
        print("torch_peer.py: the model has %d parameters, the config's count is %d" % (got, n),
              file=sys.stderr)
        return 1
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01, fused=True)
    S, B, M = a.seq_len, a.batch_size, a.microbatches
    gen = torch.Generator(device="cuda").manual_seed(a.seed)
    F = torch.nn.functional
    losses, times = [], []
    for k in range(1, a.steps + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        tok = torch.randint(0, c["vocab_size"], (B, S + 1), device="cuda", generator=gen)
        opt.zero_grad(set_to_none=True)
        total = torch.zeros((), device="cuda")
        count = B * S
        for m in range(M):
            lo, hi = m * B // M, (m + 1) * B // M
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "autocast"):
                logits = model(tok[lo:hi, :-1])
            ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                 tok[lo:hi, 1:].reshape(-1), reduction="sum")
            (ce / count).backward()
            total += ce.detach()
            del logits, ce
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss = float(total) / count  # synchronises
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(loss)
        print("torch_peer.py: step %d loss %.4f %.3f s" % (k, loss, times[-1]), file=sys.stderr)
        if not math.isfinite(loss):
            print("torch_peer.py: step %d: loss %g" % (k, loss), file=sys.stderr)
            return 1
    timed = sorted(times[a.warmup:])
    med = timed[len(timed) // 2] if len(timed) % 2 else 0.5 * (timed[len(timed) // 2 - 1] + timed[len(timed) // 2])
    print(json.dumps({
        "tokens_per_s": B * S / med, "step_seconds": [round(t, 4) for t in times], "params": n,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30, "first_loss": losses[0],
        "last_loss": losses[-1], "precision": a.precision, "seq_len": S, "batch_size": B,
        "microbatches": M, "attention": "sdpa", "optimizer": "AdamW fused (GPU)",
        "torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
