#!/usr/bin/env python3
"""Generate the gpt-oss golden training fixtures in mpi-tests/fixtures/golden-gpt-oss/.

Each case is a tiny random gpt-oss model (transformers' GptOssForCausalLM,
model_type gpt_oss, saved as transformers saves it: the experts fused,
mlp.experts.gate_up_proj [E, H, 2I] with gate and up columns interleaved,
gate_up_proj_bias [E, 2I], down_proj [E, I, H], down_proj_bias [E, H]), a
token file, an optional loss mask, the `roundpipe train` options, and what
transformers' model trained by a plain PyTorch loop produces in float64:
per-step loss, router_aux_loss, lr and grad_norm (expected.jsonl) and the
final weights (final/model.safetensors, fused as transformers saves them).

The training contract is tools/make_golden.py's and tools/make_moe_golden.py's
(sample order, microbatch split, loss mask, loss = counted-target CE sum /
counted targets of the step, the aux loss per microbatch averaged over the
step's microbatches: ce_sum_m / count + coef * aux_m / M, AdamW, clipping,
lr schedules; their helpers are imported), with these gpt-oss points:
  * every block is a mixture of experts: router logits = h Wr^T + br; the
    top k of those logits, a softmax over the k; expert e:
    gu = x @ gate_up_proj[e] + gate_up_proj_bias[e], gate = gu[..., ::2]
    clamped above at swiglu_limit, up = gu[..., 1::2] clamped to
    +-swiglu_limit, out = ((up + 1) * gate * sigmoid(swiglu_alpha * gate))
    @ down_proj[e] + down_proj_bias[e], weighted by the routing weight.
  * attention with biases on q/k/v/o, q width heads x head_dim != hidden,
    a learned sink logit per head (self_attn.sinks, trained), sliding-window
    blocks from layer_types (query i sees keys i - W < j <= i), YaRN RoPE
    whose cos and sin are scaled by its attention factor.
  * AdamW's weight decay falls on the weight matrices (the fused experts,
    the projections, the router, embeddings and LM head), not on biases
    (gate_up_proj_bias and down_proj_bias included, 2-D as they are), sinks
    or norms: roundpipe's rule (decay on its >= 2-D tensors; it holds each
    expert's biases as 1-D tensors).

Float64, transformers patched where it computes in fp32 in a float64 model:
GptOssRMSNorm (its .to(float32)), the rotary embedding's cos and sin (fp32
products, then scaled; here in float64 from the same fp32 inv_freq), and
load_balancing_loss_func's fp32 sums; the cross-entropy is taken here in
float64 (transformers' loss upcasts to fp32 only).  Attention "eager" (the
sinks), experts "eager".  The script measures what the patches change
(provenance.json) and checks: transformers loads model/ back to the built
parameters; with M = 1, transformers' own outputs.loss (labels,
output_router_logits) equals the logged loss to 1e-6; no routing is close to
a top-k tie; a share of the gate and up values lies past the clamp; the
window hides keys; the logged numbers move without the aux gradient; and
final/ loads in transformers to the trained weights.

The MXFP4 case (oss-mxfp4) is oss-m2's model with its experts rounded to
MXFP4 values (32 values share a power-of-two scale; FP4 in {0, .5, 1, 1.5,
2, 3, 4, 6} with a sign), written twice: model/ plain (fp32, fused) and
model-mxfp4/ as the Hub ships gpt-oss (gate_up_proj_blocks/_scales,
down_proj_blocks/_scales, U8; quantization_config mxfp4); transformers'
convert_moe_packed_tensors decodes the blocks to exactly model/'s experts.

The head_dim-16 case (oss-hd16) is oss-m2 with heads of 16 (q width 64):
the CUDA attention takes head dims that are multiples of 8 only (12 is
refused there), so bench/gpu/parity.sh proves gpt-oss on the device with
it; trained on the CPU against this reference like the others.

Single-threaded, fixed seeds: two runs write byte-identical files.
Run from anywhere:  python3 tools/make_gpt_oss_golden.py
(--check-only recomputes into a temporary directory and compares sha256 sums).
"""

import argparse
import copy
import json
import math
import os
import shutil
import sys
import tempfile

import numpy as np
import safetensors
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import GptOssConfig, GptOssForCausalLM
from transformers.integrations import mxfp4 as tf_mxfp4
from transformers.models.gpt_oss import modeling_gpt_oss as tf_oss

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402  (contract helpers: batches, loss, lr, files)

ROOT = mg.ROOT
OSS_REL = os.path.join("mpi-tests", "fixtures", "golden-gpt-oss")
INIT_RANGE = 0.1
ROUTER_STD = 0.6     # router logits of a few units: top-k choices far from ties
GATE_UP_STD = 0.3    # gate and up values of about 1.7: many past the clamp at 1.5
SINK_STD = 1.0       # sinks of the order of the attention logits
BIAS_STD = 0.1       # every bias non-zero, so its gradient path is exercised
MIN_TOPK_GAP = 2e-3

# Hidden 32, 4 heads of 12 (q width 48) / 2 KV heads, vocab 40, 4 experts of
# width 32 top 2 (hidden and width multiples of 32: MXFP4's groups), 3 blocks
# (sliding, full, sliding; window 6 < seq-len 16), YaRN factor 8 over 8
# original positions, swiglu_limit 1.5 and alpha 1.3 (not the default
# 1.702: the test sees alpha read).
COMMON_CONFIG = dict(
    vocab_size=40, hidden_size=32, intermediate_size=32, num_hidden_layers=3,
    num_attention_heads=4, num_key_value_heads=2, head_dim=12, num_local_experts=4,
    num_experts_per_tok=2, sliding_window=6,
    layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    max_position_embeddings=64, rms_norm_eps=1e-5, initializer_range=INIT_RANGE,
    attention_bias=True, attention_dropout=0.0, swiglu_limit=1.5, swiglu_alpha=1.3,
    tie_word_embeddings=False, use_cache=False, dtype="float32",
    bos_token_id=None, eos_token_id=None, pad_token_id=None,
    rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 8.0,
                     "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                     "original_max_position_embeddings": 8},
)


def train_opts(**over):
    tr = {
        "seq-len": 16, "batch-size": 4, "microbatches": 2, "steps": 4,
        "lr": "3e-3", "min-lr": "3e-4", "warmup-steps": 1, "lr-schedule": "cosine",
        "weight-decay": "0.1", "beta1": "0.9", "beta2": "0.95", "eps": "1e-3",
        "grad-clip": "0", "dtype": "fp32", "seed": 1,
    }
    tr.update(over)
    return tr


CASES = {
    # one microbatch, aux from config.json: transformers' outputs.loss is
    # the reference as it stands
    "oss-m1": {
        "model_seed": 7011, "data_seed": 8001, "data_len": 16 * 10 + 1 + 5, "mask": True,
        "config": dict(COMMON_CONFIG, output_router_logits=True, router_aux_loss_coef=0.05),
        "train": train_opts(**{"microbatches": 1, "grad-clip": "2.0"}),
    },
    # two microbatches, a large aux coefficient (the aux gradient moves the
    # router visibly)
    "oss-m2": {
        "model_seed": 7032, "data_seed": 8002, "data_len": 16 * 10 + 1 + 5, "mask": True,
        "config": dict(COMMON_CONFIG, output_router_logits=True, router_aux_loss_coef=0.5),
        "train": train_opts(**{"lr-schedule": "linear"}),
    },
    # oss-m2's model with MXFP4-exact experts, also written quantised
    # LoRA (tools/gpt_oss_golden_lora.py): PEFT's all-linear adapts q/k/v/o
    # only; from a non-zero adapter, the base oss-m2's
    "oss-lora": {
        "model_seed": 7032, "data_seed": 8002, "data_len": 16 * 10 + 1 + 5, "mask": True,
        "config": dict(COMMON_CONFIG, output_router_logits=True, router_aux_loss_coef=0.5),
        "train": train_opts(**{"lr-schedule": "linear", "lr": "1e-2"}),
        "lora": {"r": 2, "alpha": 4, "init_seed": 9037},
    },
    # LoRA on the router and the experts as PEFT adapts them
    # (target_parameters: mlp.experts.gate_up_proj, mlp.experts.down_proj,
    # mlp.router.weight) and on q/k/v/o, M = 2 and M = 1; oss-lora's base
    # (model_from: its model/ is this case's, not stored twice)
    "oss-lora-params": {
        "model_seed": 7032, "data_seed": 8002, "data_len": 16 * 10 + 1 + 5, "mask": True,
        "config": dict(COMMON_CONFIG, output_router_logits=True, router_aux_loss_coef=0.5),
        "train": train_opts(**{"lr-schedule": "linear", "lr": "1e-2"}),
        "lora": {"r": 2, "alpha": 4, "init_seed": 9047, "parameters": True},
        "model_from": "oss-lora",
    },
    "oss-lora-params-m1": {
        "model_seed": 7032, "data_seed": 8002, "data_len": 16 * 10 + 1 + 5, "mask": True,
        "config": dict(COMMON_CONFIG, output_router_logits=True, router_aux_loss_coef=0.5),
        "train": train_opts(**{"microbatches": 1, "lr": "1e-2", "grad-clip": "2.0"}),
        "lora": {"r": 2, "alpha": 4, "init_seed": 9051, "parameters": True},
        "model_from": "oss-lora",
    },
    # oss-lora-params' adapter made by PEFT with target_parameters listed
    # down_proj first (lora_init/ only: PEFT saves it under the same names;
    # trained against oss-lora-params' expected.jsonl and final/)
    "oss-lora-params-reversed": {
        "model_seed": 7032, "data_seed": 8002, "data_len": 16 * 10 + 1 + 5, "mask": True,
        "config": dict(COMMON_CONFIG, output_router_logits=True, router_aux_loss_coef=0.5),
        "train": train_opts(**{"lr-schedule": "linear", "lr": "1e-2"}),
        "lora": {"r": 2, "alpha": 4, "init_seed": 9047, "parameters": True,
                 "reversed": "oss-lora-params"},
        "model_from": "oss-lora",
    },
    # oss-m2 with heads of 16 (a multiple of 8, as CUDA's attention takes)
    "oss-hd16": {
        "model_seed": 7067, "data_seed": 8064, "data_len": 16 * 10 + 1 + 5, "mask": True,
        "config": dict(COMMON_CONFIG, head_dim=16, output_router_logits=True,
                       router_aux_loss_coef=0.5),
        "train": train_opts(**{"lr-schedule": "linear"}),
    },
    "oss-mxfp4": {
        "model_seed": 7032, "data_seed": 8002, "data_len": 16 * 10 + 1 + 5, "mask": True,
        "mxfp4": True,
        "config": dict(COMMON_CONFIG, output_router_logits=True, router_aux_loss_coef=0.5),
        "train": train_opts(**{"lr-schedule": "linear", "steps": 2}),
    },
}


# ---------------------------------------------------------------------------
# float64 patches of transformers' fp32 arithmetic
# ---------------------------------------------------------------------------
def rmsnorm_forward(self, hidden_states):
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def rotary_forward(self, x, position_ids):
    freqs = position_ids[..., None].to(torch.float64) * self.inv_freq.to(torch.float64)
    return ((freqs.cos() * self.attention_scaling).to(x.dtype),
            (freqs.sin() * self.attention_scaling).to(x.dtype))


def aux_float64(gate_logits, num_experts, top_k, attention_mask=None):
    """load_balancing_loss_func in float64: E * sum_e f_e * P_e, f_e = top-k
    assignments to e / rows, P_e = mean router probability of e, rows pooled
    over the blocks, every token counting."""
    assert attention_mask is None
    rows = torch.cat([x.to(torch.float64) for x in gate_logits])
    probs = torch.softmax(rows, dim=-1)
    chosen = torch.topk(probs, top_k, dim=-1).indices
    f = torch.zeros(num_experts, dtype=torch.float64).index_add_(
        0, chosen.reshape(-1), torch.ones(chosen.numel(), dtype=torch.float64)) / rows.shape[0]
    return num_experts * (f * probs.mean(dim=0)).sum()


ORIGINAL = {"rmsnorm": tf_oss.GptOssRMSNorm.forward,
            "rotary": tf_oss.GptOssRotaryEmbedding.forward,
            "aux": tf_oss.load_balancing_loss_func}


def patch(on):
    tf_oss.GptOssRMSNorm.forward = rmsnorm_forward if on else ORIGINAL["rmsnorm"]
    tf_oss.GptOssRotaryEmbedding.forward = rotary_forward if on else ORIGINAL["rotary"]
    tf_oss.load_balancing_loss_func = aux_float64 if on else ORIGINAL["aux"]


# ---------------------------------------------------------------------------
# Model and files
# ---------------------------------------------------------------------------
def aux_coef(case):
    c = case["config"]
    return float(c["router_aux_loss_coef"]) if c["output_router_logits"] else 0.0


def make_config(case):
    cfg = GptOssConfig(**case["config"])
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    return cfg


FP4 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)


def mxfp4_quantise(w):
    """A fused expert tensor [E, in, out] rounded to MXFP4: (blocks U8 [E,
    out, in/32, 16], scales U8 [E, out, in/32], the rounded values [E, in,
    out] fp32).  Each group of 32 inputs of an output shares 2^(s - 127),
    the smallest with max|w| / 2^(s-127) <= 6; each value is the nearest FP4
    (ties to the lower index), sign in bit 3, element 2j the low nibble."""
    lin = w.detach().to(torch.float64).transpose(1, 2).contiguous()  # [E, out, in]
    E, out, n = lin.shape
    g = lin.reshape(E, out, n // 32, 32)
    amax = g.abs().amax(dim=-1).clamp_min(1e-30)
    exp = torch.ceil(torch.log2(amax / 6.0))
    scale = torch.pow(2.0, exp)
    v = g / scale[..., None]
    idx = (v.abs()[..., None] - FP4).abs().argmin(dim=-1)
    sign = (v < 0) & (idx > 0)
    nib = (idx + 8 * sign.to(torch.int64)).to(torch.uint8)
    blocks = (nib[..., 0::2] | (nib[..., 1::2] << 4)).to(torch.uint8)
    scales = (exp + 127).to(torch.uint8)
    vals = FP4[idx] * torch.where(sign, -1.0, 1.0) * scale[..., None]
    rounded = vals.reshape(E, out, n).transpose(1, 2).contiguous().to(torch.float32)
    return blocks.contiguous(), scales.contiguous(), rounded


def build_model(case):
    """GptOssForCausalLM from a seed, fp32: matrices normal(0, INIT_RANGE)
    (transformers' init), then norms 1 + 0.1 randn, biases BIAS_STD randn,
    sinks SINK_STD randn, router weights ROUTER_STD randn and gate_up_proj
    GATE_UP_STD randn from a generator of model_seed + 1; with mxfp4 the
    experts rounded to MXFP4 values."""
    cfg = make_config(case)
    torch.manual_seed(case["model_seed"])
    model = GptOssForCausalLM(cfg).to(torch.float32)
    g = torch.Generator().manual_seed(case["model_seed"] + 1)

    def rnd(p, std):
        return std * torch.randn(p.shape, generator=g, dtype=torch.float32)

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + rnd(p, 0.1))
            elif name.endswith("bias"):
                p.copy_(rnd(p, BIAS_STD))
            elif name.endswith(".sinks"):
                p.copy_(rnd(p, SINK_STD))
            elif name.endswith(".mlp.router.weight"):
                p.copy_(rnd(p, ROUTER_STD))
            elif name.endswith(".mlp.experts.gate_up_proj"):
                p.copy_(rnd(p, GATE_UP_STD))
            elif name.endswith(".mlp.experts.down_proj"):
                p.copy_(rnd(p, INIT_RANGE))
        if case.get("mxfp4"):
            for name, p in model.named_parameters():
                if name.endswith((".mlp.experts.gate_up_proj", ".mlp.experts.down_proj")):
                    p.copy_(mxfp4_quantise(p)[2])
    assert model.config._experts_implementation == "eager"
    model.config.architectures = ["GptOssForCausalLM"]
    return model


def config_json(model, quantised=False):
    with tempfile.TemporaryDirectory() as tmp:
        model.config.save_pretrained(tmp)
        with open(os.path.join(tmp, "config.json")) as f:
            d = json.load(f)
    if quantised:  # as the Hub's gpt-oss-20b
        d["quantization_config"] = {
            "quant_method": "mxfp4",
            "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                       "model.embed_tokens", "lm_head"]}
    return json.dumps(d, indent=2, sort_keys=True) + "\n"


def fp32_tensors(model):
    return {n: p.detach().to(torch.float32).contiguous() for n, p in model.named_parameters()}


def quantised_tensors(model, log):
    """The Hub's layout: the experts as MXFP4 blocks and scales, checked
    against transformers' own decoder."""
    out = {}
    for n, t in fp32_tensors(model).items():
        if n.endswith((".mlp.experts.gate_up_proj", ".mlp.experts.down_proj")):
            blocks, scales, rounded = mxfp4_quantise(t)
            assert torch.equal(rounded, t), n  # the model holds MXFP4 values
            dec = tf_mxfp4.convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
            assert torch.equal(dec, t), n  # transformers decodes them to the same
            out[n + "_blocks"], out[n + "_scales"] = blocks, scales
        else:
            out[n] = t
    log("  MXFP4: transformers' convert_moe_packed_tensors decodes the blocks to model/'s "
        "experts exactly")
    return out


def write_model_dir(dst, config_text, tensors):
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(dst, "config.json"), "w") as f:
        f.write(config_text)
    save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})


def load_tf(model_dir, dtype=torch.float64):
    model = GptOssForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager",
        experts_implementation="eager")
    model.train()
    return model.to(dtype)


def assert_same_params(a, b, what):
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert sorted(pa) == sorted(pb), what
    for n in pa:
        assert pa[n].dtype == pb[n].dtype and torch.equal(pa[n], pb[n]), (what, n)


# ---------------------------------------------------------------------------
# Router logits, clamp statistics, training
# ---------------------------------------------------------------------------
class Recorder:
    """The router logits [tokens, E] of every block in forward order, and
    how many gate/up values the clamps cut."""

    def __init__(self, model):
        self.logits, self.handles = [], []
        self.gate_clamped = self.up_clamped = self.values = 0
        # by class: PEFT's target_parameters wrap these modules (the
        # wrapped one computes with the adapted weight)
        for mod in model.modules():
            if isinstance(mod, tf_oss.GptOssTopKRouter):
                self.handles.append(mod.register_forward_hook(self._router))
            if isinstance(mod, tf_oss.GptOssExperts):
                self.handles.append(mod.register_forward_hook(self._experts))
        self.limit = model.config.swiglu_limit
        self.model = model

    def _router(self, module, args, output):
        self.logits.append(output[0])

    def _experts(self, module, args, output):
        x, idx = args[0], args[1]
        with torch.no_grad():
            for e in range(module.num_experts):
                tok = (idx == e).any(dim=-1)
                gu = x[tok] @ module.gate_up_proj[e] + module.gate_up_proj_bias[e]
                self.gate_clamped += int((gu[:, ::2] > self.limit).sum())
                self.up_clamped += int((gu[:, 1::2].abs() > self.limit).sum())
                self.values += gu.numel() // 2

    def take(self):
        out, self.logits = tuple(self.logits), []
        return out

    def close(self):
        for h in self.handles:
            h.remove()


def topk_gap(logits, k):
    gap = float("inf")
    for x in logits:
        s = torch.sort(x.detach(), dim=-1, descending=True).values
        gap = min(gap, float((s[:, k - 1] - s[:, k]).min()))
    return gap


def param_groups(named, wd):
    decay, plain = [], []
    for n, p in named:
        (decay if p.ndim >= 2 and not n.endswith("_bias") else plain).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": plain, "weight_decay": 0.0}]


def train(model, tokens, mask, tr, coef, log, aux_grad=True, check_m1=False, params=None):
    """params: the (name, parameter) pairs trained (LoRA's adapters), by
    default all of the model's."""
    cfg = model.config
    named = list(model.named_parameters()) if params is None else params
    plist = [p for _, p in named]
    opt = torch.optim.AdamW(
        param_groups(named, float(tr["weight-decay"])), lr=float(tr["lr"]),
        betas=(float(tr["beta1"]), float(tr["beta2"])), eps=float(tr["eps"]), foreach=False)
    clip = float(tr["grad-clip"])
    rec = Recorder(model)
    stats = {"min_topk_gap": float("inf"), "tf_loss_rel": 0.0, "clipped_steps": []}
    records = []
    for k in range(1, int(tr["steps"]) + 1):
        idx, mbs = mg.step_batches(k, tokens, mask, tr)
        M = len(mbs)
        count = sum(float(mb[2].sum()) for mb in mbs)
        opt.zero_grad(set_to_none=True)
        lr = mg.lr_at(k, tr)
        if check_m1:
            stats["tf_loss_rel"] = max(stats["tf_loss_rel"], tf_loss_check(model, mbs, coef))
        total, aux_total = 0.0, 0.0
        for mb in mbs:
            rec.take()
            s = mg.ce_sum(model, *mb[:3])
            logits = rec.take()
            part = s / count
            if coef:
                aux = tf_oss.load_balancing_loss_func(logits, cfg.num_local_experts,
                                                      cfg.num_experts_per_tok)
                aux_total += aux.item()
                if aux_grad:
                    part = part + coef * aux / M
            part.backward()
            total += s.item()
            stats["min_topk_gap"] = min(stats["min_topk_gap"],
                                        topk_gap(logits, cfg.num_experts_per_tok))
        if clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(plist, clip)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in plist])
        for grp in opt.param_groups:
            grp["lr"] = lr
        opt.step()
        r = {"step": k, "loss": total / count + coef * (aux_total / M)}
        if coef:
            r["router_aux_loss"] = aux_total / M
        r.update({"lr": lr, "grad_norm": float(norm), "tokens": int(count)})
        records.append(r)
        if clip > 0 and r["grad_norm"] > clip:
            stats["clipped_steps"].append(k)
        log("  step %d samples %s tokens %3d loss %.9f%s lr %.6g grad_norm %.9f" % (
            k, idx, count, r["loss"], " aux %.9f" % r["router_aux_loss"] if coef else "", lr,
            r["grad_norm"]))
    stats["clamped"] = {"gate": rec.gate_clamped / rec.values, "up": rec.up_clamped / rec.values}
    rec.close()
    return records, stats


def tf_loss_check(model, mbs, coef):
    """M = 1: transformers' outputs.loss (labels -100 where the mask is 0,
    as shift_labels; output_router_logits) against CE mean + coef * aux
    here (transformers takes the CE in fp32)."""
    inp, tgt, w, _ = mbs[0]
    labels = torch.where(w > 0, tgt, torch.full_like(tgt, -100))
    with torch.no_grad():
        out = model(input_ids=inp, labels=labels, shift_labels=labels, output_router_logits=True)
        ce = mg.ce_sum(model, inp, tgt, w) / float(w.sum())
        cfg = model.config
        mine = float(ce) + coef * float(aux_float64(out.router_logits, cfg.num_local_experts,
                                                    cfg.num_experts_per_tok))
    rel = abs(float(out.loss) - mine) / mine
    assert rel < 1e-6, (float(out.loss), mine)
    return rel


def patch_effect(model_dir, case, tokens, mask, log):
    """Step 1's loss and gradients with transformers as it stands (fp32
    norms, rotary, aux sums) against the float64 patches."""
    out = {}
    for on in (False, True):
        patch(on)
        m = load_tf(model_dir)
        _, mbs = mg.step_batches(1, tokens, mask, case["train"])
        count = sum(float(mb[2].sum()) for mb in mbs)
        m.zero_grad(set_to_none=True)
        total = 0.0
        rec = Recorder(m)
        for mb in mbs:
            rec.take()
            part = mg.ce_sum(m, *mb[:3]) / count
            lg = rec.take()
            if aux_coef(case):
                part = part + aux_coef(case) * tf_oss.load_balancing_loss_func(
                    lg, m.config.num_local_experts, m.config.num_experts_per_tok) / len(mbs)
            part.backward()
            total += part.item()
        rec.close()
        out[on] = (total, {n: p.grad.clone() for n, p in m.named_parameters()})
    patch(True)
    loss_rel = abs(out[False][0] - out[True][0]) / abs(out[True][0])
    g = max(float((out[False][1][n] - out[True][1][n]).abs().max() /
                  out[True][1][n].abs().max()) for n in out[True][1])
    log("  transformers' fp32 norms, rotary and aux sums vs the float64 patches, step 1: loss "
        "rel %.1e, gradients max rel %.1e" % (loss_rel, g))
    assert loss_rel < 1e-5 and g < 1e-4, (loss_rel, g)
    return {"loss_rel": loss_rel, "grad_max_rel": g}


def window_effect(model_dir, case, tokens, mask):
    """The window hides keys: the first microbatch's CE with the window
    widened to the sequence differs."""
    m = load_tf(model_dir)
    _, mbs = mg.step_batches(1, tokens, mask, case["train"])
    with torch.no_grad():
        a = float(mg.ce_sum(m, *mbs[0][:3]))
        for layer in m.model.layers:
            if layer.self_attn.sliding_window:
                layer.self_attn.sliding_window = None
        m.config.layer_types = ["full_attention"] * m.config.num_hidden_layers
        b = float(mg.ce_sum(m, *mbs[0][:3]))
    rel = abs(a - b) / abs(a)
    assert rel > 1e-4, rel
    return rel


def sensitivity(model_dir, case, tokens, mask, records, final, log):
    m = load_tf(model_dir)
    alt, _ = train(m, tokens, mask, case["train"], aux_coef(case), lambda s: None,
                   aux_grad=False)
    gn = max(abs(a["grad_norm"] - b["grad_norm"]) / b["grad_norm"] for a, b in zip(alt, records))
    moved = fp32_tensors(m)
    w = max(float((moved[n] - final[n]).abs().max() / final[n].abs().max()) for n in final)
    log("  without the aux gradient: grad_norm moves up to %.1e relative, final weights up to "
        "%.1e (per tensor, to its largest entry)" % (gn, w))
    assert gn > 1e-3 or w > 1e-3, (gn, w)
    return {"grad_norm_rel": gn, "weights_rel": w}


# ---------------------------------------------------------------------------
# A case
# ---------------------------------------------------------------------------
def versions():
    return {"generator": "tools/make_gpt_oss_golden.py", "torch": torch.__version__.split("+")[0],
            "transformers": transformers.__version__, "safetensors": safetensors.__version__}


def make_case(name, case, outdir, log):
    log("case %s -> %s" % (name, outdir))
    if os.path.isdir(outdir):
        shutil.rmtree(outdir)
    os.makedirs(outdir)
    tr = case["train"]
    model = build_model(case)
    model_dir = os.path.join(outdir, "model")
    write_model_dir(model_dir, config_json(model), fp32_tensors(model))
    if case.get("mxfp4"):
        write_model_dir(os.path.join(outdir, "model-mxfp4"), config_json(model, True),
                        quantised_tensors(model, log))
    tokens, mask = mg.make_data(case)
    np.save(os.path.join(outdir, "data.npy"), tokens)
    if mask is not None:
        np.save(os.path.join(outdir, "mask.npy"), mask)
    with open(os.path.join(outdir, "args.txt"), "w") as f:
        f.write(mg.args_line(tr) + "\n")
    assert_same_params(load_tf(model_dir, torch.float32), model, "load")
    log("  transformers loads model/ to the built parameters")
    checks = {"patches": patch_effect(model_dir, case, tokens, mask, log),
              "window_changes_ce_rel": window_effect(model_dir, case, tokens, mask)}
    coef = aux_coef(case)
    m1 = int(tr["microbatches"]) == 1
    model = load_tf(model_dir)
    records, stats = train(model, tokens, mask, tr, coef, log, check_m1=m1 and coef > 0)
    assert stats["min_topk_gap"] > MIN_TOPK_GAP, stats["min_topk_gap"]
    assert 0.02 < stats["clamped"]["gate"] < 0.9 and 0.02 < stats["clamped"]["up"] < 0.9, stats
    with open(os.path.join(outdir, "expected.jsonl"), "w") as f:
        for r in records:
            f.write(mg.dumps(r))
    final = fp32_tensors(model)
    os.makedirs(os.path.join(outdir, "final"))
    save_file(final, os.path.join(outdir, "final", "model.safetensors"), metadata={"format": "pt"})
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copyfile(os.path.join(model_dir, "config.json"), os.path.join(tmp, "config.json"))
        shutil.copyfile(os.path.join(outdir, "final", "model.safetensors"),
                        os.path.join(tmp, "model.safetensors"))
        assert_same_params(load_tf(tmp, torch.float32), copy.deepcopy(model).to(torch.float32),
                           "final")
    log("  final/ loads in transformers to the trained weights rounded to fp32")
    log("  smallest top-k gap %.3g; values past the clamp: gate %.0f%%, up %.0f%%; the window "
        "changes microbatch 1's CE by %.1e" % (stats["min_topk_gap"],
                                               100 * stats["clamped"]["gate"],
                                               100 * stats["clamped"]["up"],
                                               checks["window_changes_ce_rel"]))
    checks.update({"min_topk_gap": stats["min_topk_gap"], "clamped": stats["clamped"]})
    if m1 and coef:
        checks["transformers_outputs_loss_rel"] = stats["tf_loss_rel"]
        log("  transformers' outputs.loss vs the logged loss: max rel %.1e" % stats["tf_loss_rel"])
    if coef and not case.get("mxfp4"):
        checks["without_aux_gradient"] = sensitivity(model_dir, case, tokens, mask, records,
                                                     final, log)
    with open(os.path.join(outdir, "provenance.json"), "w") as f:
        f.write(mg.dumps({
            "tokens": "numpy.random.default_rng(%d).integers(0, %d, size=%d) as int32"
                      % (case["data_seed"], case["config"]["vocab_size"], case["data_len"]),
            "mask": "tools/make_golden.py make_data()" if mask is not None else None,
            "model": "GptOssForCausalLM, torch.manual_seed(%d), then build_model()'s draws "
                     "from torch.Generator().manual_seed(%d)%s"
                     % (case["model_seed"], case["model_seed"] + 1,
                        "; experts rounded to MXFP4" if case.get("mxfp4") else ""),
            "aux_coef": coef,
            "precision": "float64 (fp32 initial weights); attention eager, experts eager; "
                         "RMSNorm, rotary cos/sin and the aux sums patched to float64",
            "files": "model/: fp32, fused experts as transformers saves them%s; final/: the "
                     "same layout, the float64 result rounded to fp32"
                     % ("; model-mxfp4/: the experts as MXFP4 blocks and scales "
                        "(quantization_config mxfp4)" if case.get("mxfp4") else ""),
            "clipped_steps": stats["clipped_steps"],
            "checks": checks,
        } | versions()))


def generate(base, log, names=None):
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(base, exist_ok=True)
    patch(True)
    for name, case in CASES.items():
        if names and name not in names:
            continue
        torch.set_default_dtype(torch.float64)  # step_batches' counted-target weights
        try:
            if "lora" in case:
                import gpt_oss_golden_lora
                gpt_oss_golden_lora.make_case(name, case, os.path.join(base, name), log,
                                              sys.modules[__name__])
            else:
                make_case(name, case, os.path.join(base, name), log)
        finally:
            torch.set_default_dtype(torch.float32)
    mg.write_files_mk(base, OSS_REL, "tools/make_gpt_oss_golden.py: the gpt-oss fixtures")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, OSS_REL))
    ap.add_argument("--check-only", action="store_true",
                    help="regenerate into a temporary directory and compare with --out")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--cases", help="comma-separated cases to (re)write; default: all")
    a = ap.parse_args()
    names = mg.parse_cases(ap, a, CASES)
    log = (lambda s: None) if a.quiet else (lambda s: print(s, flush=True))
    return mg.write_or_check(a, lambda out, n: generate(out, log, n), names, log)


if __name__ == "__main__":
    sys.exit(main())
