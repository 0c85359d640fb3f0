#!/usr/bin/env python3
"""Generate the golden training fixtures in mpi-tests/fixtures/golden/.

Each case is a tiny random model (Hugging Face layout), a token file, an
optional loss mask, the roundpipe train options, and what a plain PyTorch
loop that follows roundpipe's training contract produces: per-step loss,
learning rate and gradient norm (expected.jsonl) and the final weights.
The C side trains the same model with the same options and compares.

The contract implemented here (keep in step with DESIGN.md section 4/5):
  * tokens t, S = seq-len, n = (len(t) - 1) // S samples; sample i has inputs
    t[i*S : i*S+S] and targets t[i*S+1 : i*S+S+1]; target position p counts
    iff mask[p] == 1 (every target counts without a mask).
  * step k (1-based) takes samples ((k-1)*B + j) mod n, j = 0..B-1;
    microbatch m holds j in [m*B/M, (m+1)*B/M).
  * loss = sum of token cross-entropies of the counted targets of the step /
    number of counted targets of the step, with the weights before the update;
    the gradient is that loss's gradient, accumulated microbatch by microbatch.
  * grad_norm = global L2 norm before clipping (each parameter once).
  * AdamW; weight decay only on parameters with ndim >= 2; lr from the
    schedule (linear warmup, then cosine / linear decay to min-lr, or constant).

Everything is fp32 on the CPU, single-threaded, with fixed seeds, so two runs
write byte-identical files.  Run from anywhere:  python3 tools/make_golden.py
(--check-only recomputes into a temporary directory and compares sha256 sums).
"""

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN_REL = os.path.join("mpi-tests", "fixtures", "golden")

# ---------------------------------------------------------------------------
# The two cases.  Shapes are tiny so that the C test runs in well under a
# second; they still have GQA, several layers and microbatches, a sample
# index that wraps around mod n in the middle of a step, and (qwen3) a loss
# mask with runs of zeros including one fully masked sample.
# ---------------------------------------------------------------------------
CASES = {
    "qwen3": {
        "arch": "qwen3",
        "model_seed": 1001,
        "data_seed": 2001,
        # n = (16*10+1+5 - 1)//16 = 10 samples; 6 steps of 4 use 24 samples,
        # so step 3 takes samples 8 9 0 1 (wrap inside a step).
        "data_len": 16 * 10 + 1 + 5,
        "mask": True,
        "train": {
            "seq-len": 16, "batch-size": 4, "microbatches": 2, "steps": 6,
            "lr": "3e-3", "min-lr": "3e-4", "warmup-steps": 2, "lr-schedule": "cosine",
            "weight-decay": "0.1", "beta1": "0.9", "beta2": "0.95", "eps": "1e-8",
            "grad-clip": "4.0", "dtype": "fp32", "seed": 1,
        },
    },
    "llama": {
        "arch": "llama",
        "model_seed": 1002,
        "data_seed": 2002,
        # n = (16*11+1+3 - 1)//16 = 11 samples; step 2 takes 6..10 then 0.
        "data_len": 16 * 11 + 1 + 3,
        "mask": False,
        "train": {
            "seq-len": 16, "batch-size": 6, "microbatches": 3, "steps": 5,
            "lr": "2e-3", "min-lr": "2e-4", "warmup-steps": 1, "lr-schedule": "linear",
            "weight-decay": "0.01", "beta1": "0.9", "beta2": "0.999", "eps": "1e-6",
            "grad-clip": "0", "dtype": "fp32", "seed": 1,
        },
    },
}

# The one-step-stale optimizer (--optimizer-lag 1, the RoundPipe reference's
# default): the qwen3 case again, with iteration k's update applied only after
# iteration k+1 has computed its gradients, so iteration k trains on the
# weights after updates 1..k-2.
# Its model, data and mask are qwen3's (named in inputs.txt, not copied).
CASES["qwen3-lag"] = dict(CASES["qwen3"], inputs_from="qwen3",
                          train=dict(CASES["qwen3"]["train"], **{"optimizer-lag": 1}))

# Two cases computed in float64 (the model is built in fp32, so roundpipe
# starts from the same weights, then trained in double): references for
# fp32 results that must agree more tightly than fp32-vs-fp32 would.
#  - tied-odd: one block, a tied embedding whose vocab x hidden (37 x 12 =
#    444) is not a multiple of 16, so the layer's padded length differs from
#    the tied head gradient's; six microbatches, so --pipelines 1, 2 and 3 all
#    apply. Its grad norms are compared at 1e-5 (the padding defect of the
#    engine's tied sum was 1e-4 to 7e-4).
#  - qwen3-skip: step 2's samples (4..7) have no counted target at all. The
#    step is logged with loss and grad_norm null, no update is applied and
#    the lr schedule still advances; AdamW's own step count (its bias
#    correction) counts applied updates only, as a PyTorch loop that skips
#    optimizer.step() for that step.
CASES["tied-odd"] = {
    "arch": "qwen3",
    "model_seed": 1003,
    "data_seed": 2003,
    "data_len": 4 * 12 + 1 + 2,
    "mask": False,
    "float64": True,
    "config": dict(vocab_size=37, hidden_size=12, intermediate_size=20, num_hidden_layers=1,
                   num_attention_heads=2, num_key_value_heads=1, head_dim=6),
    "train": {
        "seq-len": 4, "batch-size": 6, "microbatches": 6, "steps": 3,
        "lr": "1e-2", "min-lr": "1e-3", "warmup-steps": 1, "lr-schedule": "cosine",
        "weight-decay": "0.1", "beta1": "0.9", "beta2": "0.95", "eps": "1e-8",
        "grad-clip": "0.5", "dtype": "fp32", "seed": 1,
    },
}
CASES["qwen3-skip"] = {
    "arch": "qwen3",
    "model_seed": 1004,
    "data_seed": 2004,
    "data_len": 16 * 10 + 1 + 5,
    "mask": "skip",
    "float64": True,
    "train": {
        "seq-len": 16, "batch-size": 4, "microbatches": 2, "steps": 5,
        "lr": "3e-3", "min-lr": "3e-4", "warmup-steps": 1, "lr-schedule": "cosine",
        "weight-decay": "0.1", "beta1": "0.9", "beta2": "0.95", "eps": "1e-8",
        "grad-clip": "4.0", "dtype": "fp32", "seed": 1,
    },
}

# Packed documents (--documents), in float64: each packed sample's loss and
# gradient are computed here as the sum over its documents run as separate
# sequences (position ids from 0), with the target that would predict a
# document's first token from the previous document left out. Documents of
# random length cross sample boundaries; one has a single token; one starts
# at a sample's first token and one at the token after a sample's last
# input. eps 1e-3 makes AdamW's first updates follow the gradients'
# magnitudes, not only their signs.
CASES["qwen3-packed"] = {
    "arch": "qwen3",
    "model_seed": 1005,
    "data_seed": 2005,
    "data_len": 16 * 10 + 1 + 5,
    "mask": True,
    "documents": True,
    "float64": True,
    "train": {
        "seq-len": 16, "batch-size": 4, "microbatches": 2, "steps": 4,
        "lr": "3e-3", "min-lr": "3e-4", "warmup-steps": 1, "lr-schedule": "cosine",
        "weight-decay": "0.1", "beta1": "0.9", "beta2": "0.95", "eps": "1e-3",
        "grad-clip": "4.0", "dtype": "fp32", "seed": 1,
    },
}
CASES["llama-packed"] = {
    "arch": "llama",
    "model_seed": 1006,
    "data_seed": 2006,
    "data_len": 16 * 11 + 1 + 3,
    "mask": False,
    "documents": True,
    "float64": True,
    "train": {
        "seq-len": 16, "batch-size": 6, "microbatches": 3, "steps": 3,
        "lr": "2e-3", "min-lr": "2e-4", "warmup-steps": 1, "lr-schedule": "linear",
        "weight-decay": "0.01", "beta1": "0.9", "beta2": "0.999", "eps": "1e-3",
        "grad-clip": "0", "dtype": "fp32", "seed": 1,
    },
}

VOCAB = 96
INIT_RANGE = 0.1  # larger than the 0.02 default so logits are far from uniform


def make_config(arch, overrides=None):
    common = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=64, rms_norm_eps=1e-6, initializer_range=INIT_RANGE,
        attention_dropout=0.0, use_cache=False, dtype="float32",
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )
    common.update(overrides or {})
    if arch == "qwen3":
        return Qwen3Config(
            **common, tie_word_embeddings=True, attention_bias=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    # Llama 3.1 scaling.  With head_dim 16 and theta 1e4 the wavelengths are
    # 2*pi*1e4^(i/8) = 6.3, 19.9, 62.8, ...; original_max_position_embeddings
    # 32 puts the thresholds at 32/4 = 8 and 32/1 = 32, so the three branches
    # of the formula are all used: i = 0 kept, i = 1 smoothed, i >= 2 divided
    # by factor.  (With 16 the shortest wavelength 6.3 > 16/4 would already be
    # smoothed and no frequency would be kept.)
    return LlamaConfig(
        **common, tie_word_embeddings=False, attention_bias=True, mlp_bias=False,
        rope_parameters={
            "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
    )


def build_model(case):
    cfg = make_config(case["arch"], case.get("config"))
    cfg._attn_implementation = "eager"
    torch.manual_seed(case["model_seed"])
    cls = Qwen3ForCausalLM if case["arch"] == "qwen3" else LlamaForCausalLM
    model = cls(cfg).to(torch.float32)
    # transformers initialises norms to 1 and biases to 0; perturb them so an
    # implementation that ignores a norm weight or a bias fails from step 1.
    g = torch.Generator().manual_seed(case["model_seed"] + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    model.config._attn_implementation = "eager"
    if case.get("float64"):  # the fp32 weights, trained in double
        model = model.to(torch.float64)
    return model


def case_vocab(case):
    return case.get("config", {}).get("vocab_size", VOCAB)


def make_data(case):
    rng = np.random.default_rng(case["data_seed"])
    n = case["data_len"]
    tokens = rng.integers(0, case_vocab(case), size=n, dtype=np.int64).astype(np.int32)
    if not case["mask"]:
        return tokens, None
    S = case["train"]["seq-len"]
    if case["mask"] == "skip":
        # every target of samples 4..7 (step 2 with batch 4) masked, and
        # a few single zeros elsewhere
        mask = np.ones(n, dtype=np.uint8)
        mask[rng.integers(1, n, size=8)] = 0
        mask[4 * S + 1:8 * S + 1] = 0
        return tokens, mask
    # Zeros in runs of random length, plus samples 4 and 5 (target positions
    # 65..96) fully masked: with 2 samples per microbatch, steps 2 and 4 each
    # have a microbatch that counts no target at all (a per-microbatch mean
    # would divide by zero there; the contract divides by the step's count).
    mask = np.ones(n, dtype=np.uint8)
    p = 0
    while p < n:
        p += int(rng.integers(4, 16))
        run = int(rng.integers(1, 5))
        mask[p:p + run] = 0
        p += run
    mask[4 * S + 1:6 * S + 1] = 0
    return tokens, mask


def make_documents(case):
    """Sorted int64 document starts (first 0) for a case with documents."""
    if not case.get("documents"):
        return None
    rng = np.random.default_rng(case["data_seed"] + 7)
    n, S = case["data_len"], case["train"]["seq-len"]
    starts, p = [0], 0
    while True:
        p += int(rng.integers(2, 24))
        if p >= n:
            break
        starts.append(p)
    # a document at a sample's first token, one after a sample's last input
    # (its first token is that sample's last target), and a one-token one
    starts += [2 * S, 4 * S, 5 * S + 7, 5 * S + 8]
    return np.array(sorted(set(starts)), dtype=np.int64)


def lr_at(k, tr):
    lr, min_lr = float(tr["lr"]), float(tr["min-lr"])
    W, N = int(tr["warmup-steps"]), int(tr["steps"])
    if k <= W:
        return lr * k / W
    if tr["lr-schedule"] == "constant":
        return lr
    frac = (k - W) / (N - W)
    if tr["lr-schedule"] == "cosine":
        return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * frac))
    if tr["lr-schedule"] == "linear":
        return min_lr + (lr - min_lr) * (1.0 - frac)
    raise ValueError(tr["lr-schedule"])


def step_batches(k, tokens, mask, tr, docs=None):
    """Inputs, targets, counted-target weights and document segments (a list
    of [start, end) per sample, or None) of each microbatch of step k."""
    S, B, M = int(tr["seq-len"]), int(tr["batch-size"]), int(tr["microbatches"])
    n = (len(tokens) - 1) // S
    idx = [((k - 1) * B + j) % n for j in range(B)]
    t = torch.from_numpy(tokens.astype(np.int64))
    w_all = torch.ones(len(tokens)) if mask is None else torch.from_numpy(mask.astype(np.float32))
    w_all = w_all.to(torch.get_default_dtype())
    out = []
    for m in range(M):
        sel = idx[m * B // M:(m + 1) * B // M]
        inp = torch.stack([t[i * S:i * S + S] for i in sel])
        tgt = torch.stack([t[i * S + 1:i * S + S + 1] for i in sel])
        w = torch.stack([w_all[i * S + 1:i * S + S + 1] for i in sel])
        segs = None
        if docs is not None:
            segs = []
            for r, i in enumerate(sel):
                inside = [int(d) - i * S for d in docs if i * S < d < i * S + S]
                cuts = [0] + inside + [S]
                segs.append([(cuts[c], cuts[c + 1]) for c in range(len(cuts) - 1)])
                for d in docs:  # a target that is a document's first token
                    if i * S < d <= i * S + S:
                        w[r, int(d) - i * S - 1] = 0
        out.append((inp, tgt, w, segs))
    return idx, out


def ce_sum(model, inp, tgt, w, segs=None):
    if segs is not None:  # every document of every sample as a sequence of its own
        total = 0.0
        for r, row in enumerate(segs):
            for a, z in row:
                total = total + ce_sum(model, inp[r:r + 1, a:z], tgt[r:r + 1, a:z],
                                       w[r:r + 1, a:z])
        return total
    logits = model(input_ids=inp).logits
    ce = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="none")
    return (ce * w.reshape(-1)).sum()


def eval_all(model, tokens, mask, tr, docs):
    """The validation loss over every sample of the data (roundpipe train
    --eval-data with the same files): mean CE over the counted targets."""
    S = int(tr["seq-len"])
    n = (len(tokens) - 1) // S
    one = dict(tr, **{"batch-size": n, "microbatches": 1})
    _, mbs = step_batches(1, tokens, mask, one, docs)
    count = float(mbs[0][2].sum())
    with torch.no_grad():
        total = float(ce_sum(model, *mbs[0]))
    return total / count, int(count), n


def eval_loss(model, k, tokens, mask, tr, docs=None):
    _, mbs = step_batches(k, tokens, mask, tr, docs)
    count = sum(float(mb[2].sum()) for mb in mbs)
    with torch.no_grad():
        total = sum(float(ce_sum(model, *mb)) for mb in mbs)
    return total / count, int(count)


def train(model, tokens, mask, tr, log, docs=None):
    wd = float(tr["weight-decay"])
    params = list(model.named_parameters())  # tied weight appears once
    groups = [
        {"params": [p for _, p in params if p.ndim >= 2], "weight_decay": wd},
        {"params": [p for _, p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(
        groups, lr=float(tr["lr"]), betas=(float(tr["beta1"]), float(tr["beta2"])),
        eps=float(tr["eps"]), foreach=False)
    clip = float(tr["grad-clip"])
    all_params = [p for _, p in params]
    records = []
    lag = int(tr.get("optimizer-lag", 0))
    pending = None

    def apply_update(item):
        grads, lr_ = item
        for p_, g_ in zip(all_params, grads):
            p_.grad = g_
        for grp in opt.param_groups:
            grp["lr"] = lr_
        opt.step()

    model.train()
    for k in range(1, int(tr["steps"]) + 1):
        idx, mbs = step_batches(k, tokens, mask, tr, docs)
        count = sum(float(mb[2].sum()) for mb in mbs)
        opt.zero_grad(set_to_none=True)
        lr = lr_at(k, tr)
        if count == 0:
            # nothing counted: no gradient, no optimizer.step(); the lr
            # schedule advances with k all the same
            assert not lag, "a skipped step is not modelled in lagged mode"
            records.append({"step": k, "loss": None, "lr": lr, "grad_norm": None, "tokens": 0})
            log("  step %d samples %s tokens   0: skipped" % (k, idx))
            continue
        total = 0.0
        for mb in mbs:
            s = ce_sum(model, *mb)
            (s / count).backward()
            total += s.item()
        if clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(all_params, clip)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in all_params])
        if lag:
            # apply the previous iteration's (already clipped) gradients now
            fresh = [p.grad for p in all_params]
            if pending is not None:
                apply_update(pending)
            pending = (fresh, lr)
        else:
            for grp in opt.param_groups:
                grp["lr"] = lr
            opt.step()
        rec = {"step": k, "loss": total / count, "lr": lr, "grad_norm": float(norm),
               "tokens": int(count)}
        records.append(rec)
        log("  step %d samples %s tokens %3d loss %.6f lr %.6g grad_norm %.6f%s" % (
            k, idx, count, rec["loss"], lr, rec["grad_norm"],
            " (clipped)" if clip > 0 and rec["grad_norm"] > clip else ""))
    if pending is not None:
        apply_update(pending)
    return records


def args_line(tr):
    return " ".join("--%s %s" % (k, v) for k, v in tr.items())


def check_rope(model, case, log):
    """inv_freq of the model against a closed form written out here.

    The llama3 case must use all three branches of the scaling (kept,
    smoothed, divided); the qwen3 case must be plain RoPE."""
    cfg = model.config
    rp = cfg.rope_parameters
    hd = cfg.head_dim
    plain = [1.0 / rp["rope_theta"] ** (2.0 * i / hd) for i in range(hd // 2)]
    want, branch = [], []
    for f in plain:
        if rp["rope_type"] == "default":
            want.append(f)
            branch.append("kept")
            continue
        lo, hi = rp["low_freq_factor"], rp["high_freq_factor"]
        orig, factor = rp["original_max_position_embeddings"], rp["factor"]
        wl = 2 * math.pi / f
        if wl < orig / hi:
            want.append(f)
            branch.append("kept")
        elif wl > orig / lo:
            want.append(f / factor)
            branch.append("divided")
        else:
            sm = (orig / wl - lo) / (hi - lo)
            want.append((1 - sm) * f / factor + sm * f)
            branch.append("smoothed")
    inv = model.model.rotary_emb.inv_freq.double()
    assert torch.allclose(inv, torch.tensor(want, dtype=torch.float64), rtol=1e-6, atol=0), \
        (inv, want)
    assert float(model.model.rotary_emb.attention_scaling) == 1.0
    changed = sum(1 for a, b in zip(inv.tolist(), plain) if abs(a - b) > 1e-6 * b)
    log("  rope %s: %d of %d inv_freq differ from unscaled; branches %s"
        % (rp["rope_type"], changed, len(plain), branch))
    if case["arch"] == "llama":
        assert set(branch) == {"kept", "smoothed", "divided"}
    else:
        assert changed == 0


def save_fp32(model, tmp):
    """save_pretrained in float32 (a float64 case's weights rounded)."""
    if next(model.parameters()).dtype == torch.float32:
        model.save_pretrained(tmp, safe_serialization=True)
        return
    model.to(torch.float32).save_pretrained(tmp, safe_serialization=True)
    model.to(torch.float64)


def save_model_dir(model, dst):
    """save_pretrained, keeping only config.json and model.safetensors."""
    with tempfile.TemporaryDirectory() as tmp:
        save_fp32(model, tmp)
        os.makedirs(dst, exist_ok=True)
        for f in ("config.json", "model.safetensors"):
            shutil.copyfile(os.path.join(tmp, f), os.path.join(dst, f))


def reload_check(case, indir, outdir, model, tokens, mask, tr, last, log):
    """Load final weights from disk into transformers and reproduce numbers."""
    cls = Qwen3ForCausalLM if case["arch"] == "qwen3" else LlamaForCausalLM
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copyfile(os.path.join(indir, "model", "config.json"), os.path.join(tmp, "config.json"))
        shutil.copyfile(os.path.join(outdir, "final", "model.safetensors"),
                        os.path.join(tmp, "model.safetensors"))
        loaded = cls.from_pretrained(tmp, dtype=torch.float32, attn_implementation="eager")
    loaded.train()
    ref = dict(model.named_parameters())
    for name, p in loaded.named_parameters():
        assert torch.equal(p, ref[name]), name
    if case["arch"] == "qwen3":
        assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()
    N = int(tr["steps"])
    # Loss of the last step's batch and of the next step's batch with the final weights.
    for k in (N, N + 1):
        a, _ = eval_loss(model, k, tokens, mask, tr)
        b, _ = eval_loss(loaded, k, tokens, mask, tr)
        assert a == b, (k, a, b)
    # Initial weights on disk reproduce step 1's loss exactly.
    init = cls.from_pretrained(os.path.join(indir, "model"), dtype=torch.float32,
                               attn_implementation="eager")
    init.train()
    l1, _ = eval_loss(init, 1, tokens, mask, tr)
    assert l1 == last[0]["loss"], (l1, last[0]["loss"])
    log("  reload: final weights equal, losses reproduced; initial weights give step-1 loss")


def dumps(obj):
    return json.dumps(obj, sort_keys=False) + "\n"


def make_case(name, case, outdir, log):
    log("case %s -> %s" % (name, outdir))
    if os.path.isdir(outdir):
        shutil.rmtree(outdir)
    os.makedirs(outdir)
    tr = case["train"]
    model = build_model(case)
    check_rope(model, case, log)
    tokens, mask = make_data(case)
    docs = make_documents(case)
    indir = outdir
    if "inputs_from" in case:
        # same model and data as another case (built from the same seeds)
        indir = os.path.join(os.path.dirname(outdir), case["inputs_from"])
        with open(os.path.join(outdir, "inputs.txt"), "w") as f:
            f.write(case["inputs_from"] + "\n")
    else:
        save_model_dir(model, os.path.join(outdir, "model"))
        np.save(os.path.join(outdir, "data.npy"), tokens)
        if mask is not None:
            np.save(os.path.join(outdir, "mask.npy"), mask)
            log("  mask: %d of %d zero" % (int((mask == 0).sum()), len(mask)))
        if docs is not None:
            np.save(os.path.join(outdir, "documents.npy"), docs)
            log("  documents: %d, starts %s" % (len(docs), docs.tolist()))
    with open(os.path.join(outdir, "args.txt"), "w") as f:
        f.write(args_line(tr) + "\n")
    with open(os.path.join(outdir, "provenance.json"), "w") as f:
        f.write(dumps({
            "tokens": "numpy.random.default_rng(%d).integers(0, %d, size=%d) as int32"
                      % (case["data_seed"], case_vocab(case), case["data_len"]),
            "mask": None if mask is None else (
                "every target of samples 4..7 and 8 random positions zeroed; see make_data() "
                "in tools/make_golden.py" if case["mask"] == "skip" else
                "runs of zeros from the same generator, plus target positions %d..%d "
                "(samples 4 and 5) zeroed; see make_data() in tools/make_golden.py"
                % (4 * tr["seq-len"] + 1, 6 * tr["seq-len"])),
            "model": "%s, torch.manual_seed(%d), norms/biases perturbed with seed %d"
                     % (type(model).__name__, case["model_seed"], case["model_seed"] + 1),
            "generator": "tools/make_golden.py",
            "torch": torch.__version__.split("+")[0],
            "transformers": transformers.__version__,
        } | ({"precision": "float64 (fp32 initial weights)"} if case.get("float64") else {})
          | ({"documents": "random starts from numpy.random.default_rng(%d) plus fixed ones; "
                           "see make_documents() in tools/make_golden.py"
                           % (case["data_seed"] + 7)} if docs is not None else {})))
    records = train(model, tokens, mask, tr, log, docs)
    with open(os.path.join(outdir, "expected.jsonl"), "w") as f:
        for r in records:
            f.write(dumps(r))
    with tempfile.TemporaryDirectory() as tmp:
        save_fp32(model, tmp)
        os.makedirs(os.path.join(outdir, "final"))
        shutil.copyfile(os.path.join(tmp, "model.safetensors"),
                        os.path.join(outdir, "final", "model.safetensors"))
    N = int(tr["steps"])
    nl, nc = eval_loss(model, N + 1, tokens, mask, tr, docs)
    with open(os.path.join(outdir, "final", "eval.json"), "w") as f:
        f.write(dumps({"step": N + 1, "loss": nl, "tokens": nc}))
    if docs is not None:  # the validation loss over the whole data, documents apart
        al, ac, an = eval_all(model, tokens, mask, tr, docs)
        with open(os.path.join(outdir, "final", "eval_all.json"), "w") as f:
            f.write(dumps({"eval_loss": al, "eval_tokens": ac, "eval_samples": an}))
        log("  eval over all %d samples: %.9f over %d targets" % (an, al, ac))
    if not case.get("float64"):  # a float64 model does not reload bit for bit from fp32
        reload_check(case, indir, outdir, model, tokens, mask, tr, records, log)


def all_files(base):
    out = []
    for d, _, fs in os.walk(base):
        for f in fs:
            out.append(os.path.relpath(os.path.join(d, f), base))
    return sorted(out)


def write_files_mk(base, rel=GOLDEN_REL, what="tools/make_golden.py: the golden fixtures"):
    files = [f for f in all_files(base) if f != "files.mk"]
    lines = ["# Generated by %s, for make dist.\n" % what]
    for f in files:
        lines.append("EXTRA_DIST += %s\n" % os.path.join(rel, f))
    with open(os.path.join(base, "files.mk"), "w") as fh:
        fh.writelines(lines)


def sha256(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def sha_table(base):
    return {f: sha256(os.path.join(base, f)) for f in all_files(base)}


def parse_cases(ap, a, cases):
    """The --cases list (None: all), an argparse error for an unknown one."""
    names = a.cases.split(",") if a.cases else None
    unknown = sorted(set(names or []) - set(cases))
    if unknown:
        ap.error("unknown case(s): %s (known: %s)" % (", ".join(unknown), ", ".join(cases)))
    return names


def write_or_check(a, generate, names, log):
    """Write the fixtures into a.out (generate(dir, names)), or with
    --check-only regenerate all of them into a temporary directory and
    compare sha256 sums with a.out; the exit status."""
    if not a.check_only:
        generate(a.out, names)
        total = sum(os.path.getsize(os.path.join(a.out, f)) for f in all_files(a.out))
        log("wrote %d files, %d bytes" % (len(all_files(a.out)), total))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(tmp, None)
        want, got = sha_table(a.out), sha_table(tmp)
    bad = sorted(set(want) ^ set(got)) + sorted(f for f in want if f in got and want[f] != got[f])
    for f in bad:
        print("differs: %s" % f)
    print("fixtures %s" % ("differ" if bad else "are byte-identical to a fresh run"))
    return 1 if bad else 0


def generate(base, log, names=None):
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(base, exist_ok=True)
    for name, case in CASES.items():
        if names and name not in names:
            continue
        torch.set_default_dtype(torch.float64 if case.get("float64") else torch.float32)
        try:
            make_case(name, case, os.path.join(base, name), log)
        finally:
            torch.set_default_dtype(torch.float32)
    write_files_mk(base)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, GOLDEN_REL))
    ap.add_argument("--check-only", action="store_true",
                    help="regenerate into a temporary directory and compare with --out")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--cases", help="comma-separated cases to (re)write; default: all")
    a = ap.parse_args()
    names = parse_cases(ap, a, CASES)
    log = (lambda s: None) if a.quiet else (lambda s: print(s, flush=True))
    return write_or_check(a, lambda out, n: generate(out, log, n), names, log)


if __name__ == "__main__":
    sys.exit(main())
