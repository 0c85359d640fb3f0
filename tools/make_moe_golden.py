#!/usr/bin/env python3
"""Generate the Qwen3-MoE golden training fixtures in mpi-tests/fixtures/golden-moe/.

Each case is a tiny random Qwen3-MoE model (Hugging Face layout, experts
written per expert as checkpoints ship them), a token file, an optional loss
mask, the `roundpipe train` options, and what transformers'
Qwen3MoeForCausalLM trained by a plain PyTorch loop produces, in float64
(the model is built in fp32, so roundpipe starts from the same weights):
per-step loss, router_aux_loss, lr and grad_norm (expected.jsonl) and the
final weights (final/model.safetensors, per expert).

The training contract is tools/make_golden.py's (sample order with
wrap-around mod n, microbatch split, loss mask, loss = counted-target
cross-entropy sum / counted targets of the step, gradients accumulated
microbatch by microbatch, AdamW with decay on tensors of >= 2 dimensions,
clipping, lr schedules; its helpers are imported, not copied), with these
MoE points:
  * block i is an MoE block iff i is not in mlp_only_layers, num_experts > 0
    and (i + 1) % decoder_sparse_step == 0; otherwise a dense Qwen3 MLP of
    width intermediate_size.
  * routing as transformers: logits = gate(h); p = softmax(logits) in fp32;
    the top num_experts_per_tok of p, divided by their sum when
    norm_topk_prob; output = sum over the chosen experts of
    w * down(silu(gate_proj(x)) * up_proj(x)); no shared expert.
  * the auxiliary load-balancing loss is on when config.json has
    output_router_logits true (coefficient router_aux_loss_coef) or when
    `--router-aux-coef X` (X > 0) is given, which overrides the config's
    coefficient.  A microbatch's aux is transformers' load_balancing_loss_func
    over the router logits of its forward, pooled over all MoE blocks, with
    no attention mask (every token counts, loss mask or not).  The step's
    aux (router_aux_loss, logged unscaled) is the mean over the microbatches
    of the microbatch's aux; the logged loss is the counted-target mean
    cross-entropy plus coef * router_aux_loss, and the gradient (and
    grad_norm) is that total's: microbatch m contributes
    ce_sum_m / count + coef * aux_m / M.
  * the files: model.layers.N.mlp.gate.weight [E, H] and
    model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight; one case also
    has model-fused/, the same weights in the fused layout
    (mlp.experts.gate_up_proj [E, 2I, H], gate rows first, and
    mlp.experts.down_proj [E, H, I]).

Float64, with transformers' code unchanged: attention "sdpa" (float64 on the
CPU), experts "eager" (transformers' per-expert loop; its default
"grouped_mm" refuses float64).  Some of transformers' arithmetic stays fp32
in a float64 model: the RMSNorms, the router softmax (softmax(...,
dtype=torch.float): the routing weights are fp32 values widened) and
load_balancing_loss_func's sums (so the aux is an fp32 number).  The script
measures what the router's and the aux's cost against float64
(provenance.json: under 1e-9 relative on the loss, 5e-7 on the gradients,
about 1e-7 on the aux), far inside the test's 1e-4.

Before writing a case it checks that transformers loads the files it writes
(per expert, and fused for model-fused/) back to the very parameters; that
a re-implementation of the MoE block written here, with per-expert
nn.Linear modules loaded straight from the file's keys, gives transformers'
step-1 loss, aux and every gradient to 1e-12; for the one-microbatch case,
that transformers' own outputs.loss (labels, output_router_logits) and its
gradient agree with the logged loss to 1e-6 (transformers takes that
cross-entropy in fp32); that no token's top-k choice is close to a tie (so an fp32
implementation routes identically); and that the logged numbers and final
weights are sensitive to the aux gradient and to the aux definition.
The LoRA case (moe-lora) is made by tools/moe_golden_lora.py.

Single-threaded, fixed seeds, PYTHONHASHSEED=0 (PEFT writes target_modules
from a set; the script re-executes itself with it set): two runs write
byte-identical files.  Run from anywhere:  python3 tools/make_moe_golden.py
(--check-only recomputes into a temporary directory and compares sha256 sums).
"""

import os
import sys

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    # the LoRA case's adapter_config.json lists target_modules in set order
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

import argparse
import copy
import json
import shutil
import tempfile

import numpy as np
import safetensors
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
from transformers.models.qwen3_moe import modeling_qwen3_moe as tf_moe

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402  (contract helpers: batches, loss, lr, files)

ROOT = mg.ROOT
MOE_REL = os.path.join("mpi-tests", "fixtures", "golden-moe")
INIT_RANGE = 0.1   # as make_golden.py: logits far from uniform
ROUTER_STD = 0.6   # router logits of a few units: top-k choices far from ties
MIN_TOPK_GAP = 2e-3  # required gap (logits) between the k-th and (k+1)-th expert
# model_type of the per-expert re-implementation: PEFT (on transformers 5)
# rewrites a LoRA config for model_type qwen3_moe to target transformers'
# fused expert parameters; the re-implementation has per-expert Linears.
PER_EXPERT_TYPE = "qwen3_moe_per_expert"

# ---------------------------------------------------------------------------
# The cases.  Hidden 16, 4 heads / 2 KV heads of 8, vocab 40, experts of
# width 12, dense blocks of width 24, seq-len 16, batch 4, 5 steps.  n = 10
# samples: step 3 takes samples 8 9 0 1 (wrap inside a step).  With a mask,
# samples 4 and 5 count no target (make_golden.make_data): with two
# microbatches, step 2's first microbatch counts nothing but still has an
# aux loss.
# ---------------------------------------------------------------------------
COMMON_CONFIG = dict(
    vocab_size=40, hidden_size=16, intermediate_size=24, moe_intermediate_size=12,
    num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
    rms_norm_eps=1e-6, initializer_range=INIT_RANGE, attention_dropout=0.0, use_cache=False,
    attention_bias=False, hidden_act="silu", dtype="float32",
    bos_token_id=None, eos_token_id=None, pad_token_id=None,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
)


def train_opts(**over):
    tr = {
        "seq-len": 16, "batch-size": 4, "microbatches": 2, "steps": 5,
        "lr": "3e-3", "min-lr": "3e-4", "warmup-steps": 1, "lr-schedule": "cosine",
        "weight-decay": "0.1", "beta1": "0.9", "beta2": "0.95", "eps": "1e-3",
        "grad-clip": "0", "dtype": "fp32", "seed": 1,
    }
    tr.update(over)
    return tr


CASES = {
    # A: aux from config.json, one microbatch: transformers' outputs.loss is
    # the reference as it stands. MoE blocks 0, 1, 3 (block 2 dense).
    "moe-m1": {
        "model_seed": 4007, "data_seed": 5001, "data_len": 16 * 10 + 1 + 5, "mask": True,
        "config": dict(COMMON_CONFIG, num_hidden_layers=4, num_experts=8, num_experts_per_tok=2,
                       norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[2],
                       output_router_logits=True, router_aux_loss_coef=0.01,
                       tie_word_embeddings=False),
        "train": train_opts(**{"microbatches": 1, "grad-clip": "1.5"}),
    },
    # B: aux off in config.json (whose coefficient 0.001 must not be used),
    # on from --router-aux-coef 0.01; two microbatches; no renormalisation
    # of the top-k weights. MoE blocks 1 and 5 only.
    "moe-mb": {
        "model_seed": 4017, "data_seed": 5002, "data_len": 16 * 10 + 1 + 5, "mask": True,
        "config": dict(COMMON_CONFIG, num_hidden_layers=6, num_experts=8, num_experts_per_tok=2,
                       norm_topk_prob=False, decoder_sparse_step=2, mlp_only_layers=[3],
                       output_router_logits=False, router_aux_loss_coef=0.001,
                       tie_word_embeddings=False),
        "train": train_opts(**{"lr-schedule": "linear", "router-aux-coef": "0.01"}),
    },
    # C: no aux, tied embeddings, 6 experts top-3, clipping, no mask; the
    # same weights also in the fused layout (model-fused/).
    "moe-noaux": {
        "model_seed": 4008, "data_seed": 5003, "data_len": 16 * 10 + 1 + 5, "mask": False,
        "fused": True,
        "config": dict(COMMON_CONFIG, num_hidden_layers=3, num_experts=6, num_experts_per_tok=3,
                       norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
                       output_router_logits=False, router_aux_loss_coef=0.001,
                       tie_word_embeddings=True),
        "train": train_opts(**{"grad-clip": "1.2"}),
    },
    # D: LoRA (tools/moe_golden_lora.py): all-linear covers the router and
    # every expert's projections; aux from config.json; tied; block 1 dense.
    "moe-lora": {
        "model_seed": 4005, "data_seed": 5004, "data_len": 16 * 10 + 1 + 5, "mask": True,
        "lora": {"r": 2, "alpha": 4, "init_seed": 6004},
        "config": dict(COMMON_CONFIG, num_hidden_layers=3, num_experts=4, num_experts_per_tok=2,
                       norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
                       output_router_logits=True, router_aux_loss_coef=0.02,
                       tie_word_embeddings=True),
        "train": train_opts(**{"grad-clip": "0.45"}),
    },
}


# ---------------------------------------------------------------------------
# Model, config and files
# ---------------------------------------------------------------------------
def moe_layers(cfg):
    """Indices of the MoE blocks (the rule of Qwen3MoeDecoderLayer)."""
    return [i for i in range(cfg.num_hidden_layers)
            if i not in cfg.mlp_only_layers and cfg.num_experts > 0
            and (i + 1) % cfg.decoder_sparse_step == 0]


def aux_coef(case):
    """The aux coefficient of a case, 0 when off (--router-aux-coef
    overrides config.json's)."""
    if "router-aux-coef" in case["train"]:
        return float(case["train"]["router-aux-coef"])
    c = case["config"]
    return float(c["router_aux_loss_coef"]) if c["output_router_logits"] else 0.0


def aux_source(case):
    if "router-aux-coef" in case["train"]:
        return "--router-aux-coef %s (config.json: output_router_logits %s, coef %g)" % (
            case["train"]["router-aux-coef"], str(case["config"]["output_router_logits"]).lower(),
            case["config"]["router_aux_loss_coef"])
    if case["config"]["output_router_logits"]:
        return "config.json: output_router_logits true, router_aux_loss_coef %g" % (
            case["config"]["router_aux_loss_coef"])
    return None


def make_config(case):
    cfg = Qwen3MoeConfig(**case["config"])
    cfg._attn_implementation = "sdpa"
    cfg._experts_implementation = "eager"
    return cfg


def build_model(case):
    """Qwen3MoeForCausalLM from a seed, fp32, with norms perturbed away from
    1 (as make_golden.py) and router weights of standard deviation
    ROUTER_STD."""
    cfg = make_config(case)
    torch.manual_seed(case["model_seed"])
    model = Qwen3MoeForCausalLM(cfg).to(torch.float32)
    g = torch.Generator().manual_seed(case["model_seed"] + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn(p.shape, generator=g, dtype=torch.float32))
            elif name.endswith(".mlp.gate.weight"):
                p.copy_(ROUTER_STD * torch.randn(p.shape, generator=g, dtype=torch.float32))
    assert model.config._experts_implementation == "eager"
    assert [i for i, layer in enumerate(model.model.layers)
            if isinstance(layer.mlp, tf_moe.Qwen3MoeSparseMoeBlock)] == moe_layers(cfg)
    model.config.architectures = ["Qwen3MoeForCausalLM"]
    return model


def config_json(model):
    """config.json as transformers' save_pretrained writes it, except that the
    expert count is "num_experts" (what Qwen3-MoE checkpoints ship;
    transformers 5.24 writes its internal name "num_local_experts" and reads
    either)."""
    with tempfile.TemporaryDirectory() as tmp:
        model.config.save_pretrained(tmp)
        with open(os.path.join(tmp, "config.json")) as f:
            d = json.load(f)
    assert "num_experts" not in d
    d["num_experts"] = d.pop("num_local_experts")
    return json.dumps(d, indent=2, sort_keys=True) + "\n"


def per_expert_tensors(model):
    """The model's parameters as fp32 checkpoint tensors, experts split per
    expert: gate_up_proj[e] = [gate_proj; up_proj] (gate rows first),
    down_proj[e]; a tied LM head is not written (as save_pretrained)."""
    out = {}
    for name, p in model.named_parameters():  # a tied weight appears once
        t = p.detach().to(torch.float32)
        if name.endswith(".mlp.experts.gate_up_proj"):
            base = name[:-len("gate_up_proj")]
            inter = t.shape[1] // 2
            for e in range(t.shape[0]):
                out[base + "%d.gate_proj.weight" % e] = t[e, :inter].contiguous()
                out[base + "%d.up_proj.weight" % e] = t[e, inter:].contiguous()
        elif name.endswith(".mlp.experts.down_proj"):
            base = name[:-len("down_proj")]
            for e in range(t.shape[0]):
                out[base + "%d.down_proj.weight" % e] = t[e].contiguous()
        else:
            out[name] = t.contiguous()
    return out


def fused_tensors(model):
    """The same, experts as transformers 5 holds them: gate_up_proj
    [E, 2I, H] and down_proj [E, H, I]."""
    return {n: p.detach().to(torch.float32).contiguous() for n, p in model.named_parameters()}


def write_model_dir(dst, config_text, tensors):
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(dst, "config.json"), "w") as f:
        f.write(config_text)
    save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})


def load_tf(model_dir, dtype=torch.float64):
    """transformers' model from a directory: fp32 files, cast to dtype."""
    model = Qwen3MoeForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="sdpa", experts_implementation="eager")
    model.train()
    return model.to(dtype)


def assert_same_params(a, b, what):
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert sorted(pa) == sorted(pb), what
    for n in pa:
        assert pa[n].dtype == pb[n].dtype and torch.equal(pa[n], pb[n]), (what, n)


# ---------------------------------------------------------------------------
# The per-expert re-implementation (the independent check, and the model
# PEFT wraps in the LoRA case)
# ---------------------------------------------------------------------------
class PerExpertMoeBlock(torch.nn.Module):
    """The Qwen3-MoE block written out with one nn.Linear per projection, its
    state dict keyed as checkpoints are (gate.weight,
    experts.E.{gate,up,down}_proj.weight).  softmax_dtype fp32 is
    transformers' router; float64 measures what that costs."""

    def __init__(self, cfg, softmax_dtype=torch.float32):
        super().__init__()
        hidden, inter = cfg.hidden_size, cfg.moe_intermediate_size
        self.top_k, self.norm_topk_prob = cfg.num_experts_per_tok, cfg.norm_topk_prob
        self.softmax_dtype = softmax_dtype
        self.gate = torch.nn.Linear(hidden, cfg.num_experts, bias=False)
        self.experts = torch.nn.ModuleList()
        for _ in range(cfg.num_experts):
            mlp = torch.nn.Module()
            mlp.gate_proj = torch.nn.Linear(hidden, inter, bias=False)
            mlp.up_proj = torch.nn.Linear(hidden, inter, bias=False)
            mlp.down_proj = torch.nn.Linear(inter, hidden, bias=False)
            self.experts.append(mlp)

    def forward(self, hidden_states):
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1])
        logits = self.gate(x)
        probs = torch.softmax(logits.to(self.softmax_dtype), dim=-1)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights.to(x.dtype)
        out = torch.zeros_like(x)
        for e, mlp in enumerate(self.experts):
            tok, slot = torch.where(chosen == e)
            if tok.numel() == 0:
                continue
            h = x[tok]
            y = mlp.down_proj(torch.nn.functional.silu(mlp.gate_proj(h)) * mlp.up_proj(h))
            out = out.index_add(0, tok, y * weights[tok, slot, None])
        return out.reshape(shape)


def load_per_expert(model_dir, dtype=torch.float64, softmax_dtype=torch.float32):
    """transformers' model with every MoE block replaced by PerExpertMoeBlock,
    whose weights are read straight from the per-expert file's keys (not
    through transformers' conversion)."""
    model = load_tf(model_dir, torch.float32)
    tensors = load_file(os.path.join(model_dir, "model.safetensors"))
    for i in moe_layers(model.config):
        prefix = "model.layers.%d.mlp." % i
        block = PerExpertMoeBlock(model.config, softmax_dtype)
        block.load_state_dict({k[len(prefix):]: v for k, v in tensors.items()
                               if k.startswith(prefix)}, strict=True)
        model.model.layers[i].mlp = block
    # transformers' own aux needs its router modules; the recorder below
    # collects the logits instead
    model.config.output_router_logits = False
    model.config.model_type = PER_EXPERT_TYPE
    model.train()
    return model.to(dtype)


def grads_as_fused(model):
    """Gradients of a per-expert model keyed and shaped as transformers'."""
    g = {}
    experts = {}
    for name, p in model.named_parameters():
        grad = torch.zeros_like(p) if p.grad is None else p.grad  # an expert nobody chose
        key = name.replace("base_model.model.", "", 1)
        parts = key.split(".")
        if ".mlp.experts." in key:
            layer = key.split(".mlp.experts.")[0] + ".mlp.experts."
            e, proj = int(parts[5]), parts[6]
            experts.setdefault(layer, {})[(e, proj)] = grad
        else:
            g[key] = grad
    for layer, d in experts.items():
        n = 1 + max(e for e, _ in d)
        g[layer + "gate_up_proj"] = torch.stack(
            [torch.cat([d[(e, "gate_proj")], d[(e, "up_proj")]]) for e in range(n)])
        g[layer + "down_proj"] = torch.stack([d[(e, "down_proj")] for e in range(n)])
    return g


# ---------------------------------------------------------------------------
# Router logits, the aux loss, training
# ---------------------------------------------------------------------------
class RouterRecorder:
    """Collects the router logits [tokens, E] of every MoE block in forward
    order: a forward hook on each module named ...mlp.gate (transformers'
    Qwen3MoeTopKRouter, whose output is (logits, weights, indices), or the
    re-implementation's gate Linear, PEFT-wrapped or not)."""

    def __init__(self, model):
        self.logits = []
        self.handles = []
        for name, mod in model.named_modules():
            if name.endswith(".mlp.gate"):
                self.handles.append(mod.register_forward_hook(self._hook))
        assert self.handles

    def _hook(self, module, args, output):
        self.logits.append(output[0] if isinstance(output, tuple) else output)

    def take(self):
        out, self.logits = tuple(self.logits), []
        return out

    def close(self):
        for h in self.handles:
            h.remove()


def aux_of(logits, cfg):
    """transformers' auxiliary loss of one forward's router logits."""
    return tf_moe.load_balancing_loss_func(logits, cfg.num_experts, cfg.num_experts_per_tok)


def aux_float64(logits, cfg):
    """The same formula written out in float64 (transformers sums in fp32):
    E * sum_e f_e * P_e, f_e = top-k assignments to e / rows, P_e = mean
    router probability of e, rows pooled over the blocks."""
    E, k = cfg.num_experts, cfg.num_experts_per_tok
    rows = torch.cat([x.detach().to(torch.float64) for x in logits])
    probs = torch.softmax(rows, dim=-1)
    chosen = torch.topk(probs, k, dim=-1).indices
    f = torch.zeros(E, dtype=torch.float64).index_add_(
        0, chosen.reshape(-1), torch.ones(chosen.numel(), dtype=torch.float64)) / rows.shape[0]
    return E * (f * probs.mean(dim=0)).sum()


def topk_gap(logits, k):
    """Smallest gap between the k-th and (k+1)-th router logit of any token."""
    gap = float("inf")
    for x in logits:
        s = torch.sort(x.detach(), dim=-1, descending=True).values
        if s.shape[-1] > k:
            gap = min(gap, float((s[:, k - 1] - s[:, k]).min()))
    return gap


def step_loss(model, rec, mb, count, M, coef, cfg, aux_grad=True):
    """Forward of one microbatch: (its share of the step's total loss, its CE
    sum, its aux, its router logits)."""
    rec.take()
    s = mg.ce_sum(model, *mb)
    logits = rec.take()
    part = s / count
    aux = None
    if coef:
        aux = aux_of(logits, cfg)
        if aux_grad:
            part = part + coef * aux / M
    return part, s, aux, logits


def train(model, tokens, mask, tr, cfg, coef, log, params=None, aux_grad=True, check_m1=False):
    """make_golden.train's loop with the aux term.  params: the trained
    (name, tensor) pairs (default: every parameter, a tied one once).
    Returns the records and run statistics."""
    wd = float(tr["weight-decay"])
    if params is None:
        params = list(model.named_parameters())
    plist = [p for _, p in params]
    groups = [
        {"params": [p for p in plist if p.ndim >= 2], "weight_decay": wd},
        {"params": [p for p in plist if p.ndim < 2], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(
        [gp for gp in groups if gp["params"]], lr=float(tr["lr"]),
        betas=(float(tr["beta1"]), float(tr["beta2"])), eps=float(tr["eps"]), foreach=False)
    clip = float(tr["grad-clip"])
    rec = RouterRecorder(model)
    stats = {"min_topk_gap": float("inf"), "clipped_steps": [], "pooled_aux_rel": [],
             "aux_float64_rel": 0.0, "tf_loss_rel": 0.0}
    records = []
    model.train()
    for k in range(1, int(tr["steps"]) + 1):
        idx, mbs = mg.step_batches(k, tokens, mask, tr)
        M = len(mbs)
        count = sum(float(mb[2].sum()) for mb in mbs)
        assert count > 0, "a step with no counted target is not modelled here"
        opt.zero_grad(set_to_none=True)
        lr = mg.lr_at(k, tr)
        if check_m1:
            stats["tf_loss_rel"] = max(stats["tf_loss_rel"], tf_loss_check(model, mbs, coef))
        total, aux_total, all_logits = 0.0, 0.0, []
        for mb in mbs:
            part, s, aux, logits = step_loss(model, rec, mb, count, M, coef, cfg, aux_grad)
            part.backward()
            total += s.item()
            stats["min_topk_gap"] = min(stats["min_topk_gap"],
                                        topk_gap(logits, cfg.num_experts_per_tok))
            if aux is not None:
                aux_total += aux.item()
                a64 = float(aux_float64(logits, cfg))
                stats["aux_float64_rel"] = max(stats["aux_float64_rel"],
                                               abs(aux.item() - a64) / a64)
            all_logits += [x.detach() for x in logits]
        if clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(plist, clip)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in plist])
        for grp in opt.param_groups:
            grp["lr"] = lr
        opt.step()
        rec_ = {"step": k, "loss": total / count + coef * (aux_total / M)}
        if coef:
            rec_["router_aux_loss"] = aux_total / M
            pooled = aux_of(tuple(all_logits), cfg).item()
            stats["pooled_aux_rel"].append(abs(pooled - rec_["router_aux_loss"])
                                           / rec_["router_aux_loss"])
        rec_.update({"lr": lr, "grad_norm": float(norm), "tokens": int(count)})
        records.append(rec_)
        if clip > 0 and rec_["grad_norm"] > clip:
            stats["clipped_steps"].append(k)
        log("  step %d samples %s tokens %3d loss %.9f%s lr %.6g grad_norm %.9f%s" % (
            k, idx, count, rec_["loss"],
            " aux %.9f" % rec_["router_aux_loss"] if coef else "", lr, rec_["grad_norm"],
            " (clipped)" if clip > 0 and rec_["grad_norm"] > clip else ""))
    rec.close()
    return records, stats


def tf_loss_check(model, mbs, coef):
    """One microbatch: transformers' outputs.loss (labels -100 where the mask
    is 0, given as shift_labels since the last target lies past the inputs;
    output_router_logits on) against CE mean + coef * aux computed here.
    transformers takes the CE in fp32 (ForCausalLMLoss calls logits.float()),
    so they agree to about 1e-7; the relative difference is returned."""
    assert len(mbs) == 1
    inp, tgt, w, _ = mbs[0]
    labels = torch.where(w > 0, tgt, torch.full_like(tgt, -100))
    with torch.no_grad():
        out = model(input_ids=inp, labels=labels, shift_labels=labels, output_router_logits=True)
        ce = mg.ce_sum(model, inp, tgt, w) / float(w.sum())
        mine = float(ce) + coef * float(aux_of(out.router_logits, model.config))
        assert torch.equal(out.aux_loss, aux_of(out.router_logits, model.config))
    rel = abs(float(out.loss) - mine) / mine
    assert rel < 1e-6, (float(out.loss), mine)
    return rel


# ---------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------
def step1_grads(model, case, tokens, mask):
    """Step 1's total loss (CE mean + coef * aux) and gradients."""
    tr, cfg, coef = case["train"], model.config, aux_coef(case)
    _, mbs = mg.step_batches(1, tokens, mask, tr)
    count = sum(float(mb[2].sum()) for mb in mbs)
    rec = RouterRecorder(model)
    model.zero_grad(set_to_none=True)
    total = 0.0
    for mb in mbs:
        part, _, _, _ = step_loss(model, rec, mb, count, len(mbs), coef, cfg)
        part.backward()
        total += part.item()
    rec.close()
    return total


def max_rel(ga, gb):
    """Largest per-tensor max|a - b| / max|b| over the tensors of gb."""
    assert sorted(ga) == sorted(gb), sorted(set(ga) ^ set(gb))
    return max(float((ga[n] - gb[n]).abs().max() / gb[n].abs().max().clamp_min(1e-300))
               for n in gb)


def reimplementation_check(case, model_dir, tokens, mask, log):
    """Step 1 with transformers' model and with the per-expert
    re-implementation loaded from the file: loss and every gradient to
    1e-12.  Also what transformers' fp32 router softmax costs: the
    re-implementation with a float64 softmax."""
    tf = load_tf(model_dir)
    l_tf = step1_grads(tf, case, tokens, mask)
    g_tf = {n: p.grad for n, p in tf.named_parameters()}
    out = {}
    for name, sm in (("fp32 softmax", torch.float32), ("float64 softmax", torch.float64)):
        pe = load_per_expert(model_dir, torch.float64, sm)
        l_pe = step1_grads(pe, case, tokens, mask)
        out[name] = (abs(l_pe - l_tf) / abs(l_tf), max_rel(grads_as_fused(pe), g_tf))
    log("  re-implementation (per-expert Linears from the file's keys) vs transformers, step 1: "
        "loss rel %.1e, gradients max rel %.1e; with a float64 router softmax: loss rel %.1e, "
        "gradients %.1e" % (*out["fp32 softmax"], *out["float64 softmax"]))
    assert out["fp32 softmax"][0] < 1e-12 and out["fp32 softmax"][1] < 1e-12, out
    return {"loss_rel": out["fp32 softmax"][0], "grad_max_rel": out["fp32 softmax"][1],
            "float64_router_softmax": {"loss_rel": out["float64 softmax"][0],
                                       "grad_max_rel": out["float64 softmax"][1]}}


def m1_grad_check(case, model_dir, tokens, mask, log):
    """One microbatch: the gradient of transformers' outputs.loss against the
    gradient trained here (step 1)."""
    tf = load_tf(model_dir)
    step1_grads(tf, case, tokens, mask)
    mine = {n: p.grad.clone() for n, p in tf.named_parameters()}
    tf.zero_grad(set_to_none=True)
    _, mbs = mg.step_batches(1, tokens, mask, case["train"])
    inp, tgt, w, _ = mbs[0]
    labels = torch.where(w > 0, tgt, torch.full_like(tgt, -100))
    tf(input_ids=inp, labels=labels, shift_labels=labels, output_router_logits=True).loss.backward()
    rel = max_rel(mine, {n: p.grad for n, p in tf.named_parameters()})
    log("  transformers' outputs.loss gradient vs the one trained here, step 1: max rel %.1e" % rel)
    assert rel < 1e-5, rel
    return rel


def load_check(model, model_dir, fused_dir, log):
    """transformers loads the per-expert (and fused) files back to the built
    model's parameters, and the config to the case's."""
    got = {}
    for what, d in (("per expert", model_dir), ("fused", fused_dir)):
        if d is None:
            continue
        loaded = load_tf(d)
        assert_same_params(loaded, model, what)
        assert loaded.config.num_experts == model.config.num_experts
        assert moe_layers(loaded.config) == moe_layers(model.config)
        got[what] = "equal"
    log("  transformers loads the files to the built parameters: %s" % ", ".join(got))
    return got


def save_pretrained_check(model, tensors, log):
    """What transformers' save_pretrained writes for the same model."""
    with tempfile.TemporaryDirectory() as tmp:
        copy.deepcopy(model).to(torch.float32).save_pretrained(tmp)
        theirs = os.path.join(tmp, "model.safetensors")
        sd = load_file(theirs)
        with open(os.path.join(tmp, "config.json")) as f:
            cfg = json.load(f)
        mine = os.path.join(tmp, "mine.safetensors")
        save_file(tensors, mine, metadata={"format": "pt"})
        same_bytes = mg.sha256(mine) == mg.sha256(theirs)
    assert sorted(sd) == sorted(tensors) and all(torch.equal(sd[k], tensors[k]) for k in sd)
    log("  save_pretrained writes the same per-expert tensors (%s); its config.json names the "
        "expert count %s" % ("byte-identical file" if same_bytes else "different bytes",
                             [k for k in ("num_experts", "num_local_experts") if k in cfg]))
    return {"per_expert_keys": True, "byte_identical": same_bytes,
            "config_expert_count_key": [k for k in ("num_experts", "num_local_experts")
                                        if k in cfg]}


def sensitivity(model, cfg, case, tokens, mask, records, final, log, params=None):
    """How far the fixture's numbers move if the aux gradient is dropped
    (training model, a fresh copy of the starting point, again): the test
    must see a missing aux gradient.  final: the fixture's final tensors,
    keyed as per_expert_tensors (or by params' names)."""
    alt, _ = train(model, tokens, mask, case["train"], cfg, aux_coef(case), lambda s: None,
                   params=params, aux_grad=False)
    gn = max(abs(a["grad_norm"] - b["grad_norm"]) / b["grad_norm"] for a, b in zip(alt, records))
    if params is None:
        moved = per_expert_tensors(model)
    else:
        moved = {n: p.detach().to(torch.float32) for n, p in params}
    w = max(float((moved[n] - final[n]).abs().max() / final[n].abs().max()) for n in final)
    log("  without the aux gradient: grad_norm moves up to %.1e relative, final weights up to "
        "%.1e (per tensor, to its largest entry)" % (gn, w))
    assert gn > 1e-3 or w > 1e-3, (gn, w)
    return {"grad_norm_rel": gn, "weights_rel": w}


# ---------------------------------------------------------------------------
# A case
# ---------------------------------------------------------------------------
def write_data(case, outdir, log):
    tokens, mask = mg.make_data(case)
    np.save(os.path.join(outdir, "data.npy"), tokens)
    if mask is not None:
        np.save(os.path.join(outdir, "mask.npy"), mask)
        log("  mask: %d of %d zero" % (int((mask == 0).sum()), len(mask)))
    return tokens, mask


def provenance_common(case, tokens, mask, model):
    tr = case["train"]
    return {
        "tokens": "numpy.random.default_rng(%d).integers(0, %d, size=%d) as int32"
                  % (case["data_seed"], case["config"]["vocab_size"], case["data_len"]),
        "mask": None if mask is None else (
            "runs of zeros from the same generator, plus target positions %d..%d "
            "(samples 4 and 5) zeroed; see make_data() in tools/make_golden.py"
            % (4 * tr["seq-len"] + 1, 6 * tr["seq-len"])),
        "model": "Qwen3MoeForCausalLM, torch.manual_seed(%d); norm weights + 0.1 * randn and "
                 "router weights %g * randn from torch.Generator().manual_seed(%d)"
                 % (case["model_seed"], ROUTER_STD, case["model_seed"] + 1),
        "moe_blocks": moe_layers(model.config),
        "aux": aux_source(case),
        "aux_coef": aux_coef(case),
        "precision": "float64 (fp32 initial weights); attention sdpa, experts eager; "
                     "transformers' RMSNorm, router softmax and aux sums in fp32",
    }


def versions():
    return {"generator": "tools/make_moe_golden.py", "torch": torch.__version__.split("+")[0],
            "transformers": transformers.__version__, "safetensors": safetensors.__version__}


def make_case(name, case, outdir, log):
    log("case %s -> %s" % (name, outdir))
    if os.path.isdir(outdir):
        shutil.rmtree(outdir)
    os.makedirs(outdir)
    tr = case["train"]
    model = build_model(case)
    cfg_text = config_json(model)
    tensors = per_expert_tensors(model)
    model.to(torch.float64)  # the fp32 weights, trained in double
    model_dir = os.path.join(outdir, "model")
    write_model_dir(model_dir, cfg_text, tensors)
    fused_dir = None
    if case.get("fused"):
        fused_dir = os.path.join(outdir, "model-fused")
        write_model_dir(fused_dir, cfg_text, fused_tensors(model))
    tokens, mask = write_data(case, outdir, log)
    with open(os.path.join(outdir, "args.txt"), "w") as f:
        f.write(mg.args_line(tr) + "\n")
    log("  MoE blocks %s of %d; %d experts, top %d, norm_topk_prob %s; aux: %s" % (
        moe_layers(model.config), model.config.num_hidden_layers, model.config.num_experts,
        model.config.num_experts_per_tok, model.config.norm_topk_prob, aux_source(case)))
    checks = {"load": load_check(model, model_dir, fused_dir, log),
              "save_pretrained": save_pretrained_check(model, tensors, log),
              "reimplementation_step1": reimplementation_check(case, model_dir, tokens, mask, log)}
    m1 = int(tr["microbatches"]) == 1 and aux_coef(case) > 0
    if m1:
        checks["transformers_outputs_loss_grad_step1_rel"] = m1_grad_check(
            case, model_dir, tokens, mask, log)

    coef = aux_coef(case)
    records, stats = train(model, tokens, mask, tr, model.config, coef, log, check_m1=m1)
    assert stats["min_topk_gap"] > MIN_TOPK_GAP, stats["min_topk_gap"]
    with open(os.path.join(outdir, "expected.jsonl"), "w") as f:
        for r in records:
            f.write(mg.dumps(r))
    final = per_expert_tensors(model)
    os.makedirs(os.path.join(outdir, "final"))
    save_file(final, os.path.join(outdir, "final", "model.safetensors"), metadata={"format": "pt"})

    # transformers loads final/ (per expert) to the trained weights rounded
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copyfile(os.path.join(model_dir, "config.json"), os.path.join(tmp, "config.json"))
        shutil.copyfile(os.path.join(outdir, "final", "model.safetensors"),
                        os.path.join(tmp, "model.safetensors"))
        assert_same_params(load_tf(tmp, torch.float32), copy.deepcopy(model).to(torch.float32),
                           "final")
    log("  final/ loads in transformers to the trained weights rounded to fp32")

    log("  smallest top-k gap of any routing: %.3g (logits); clipped steps %s"
        % (stats["min_topk_gap"], stats["clipped_steps"]))
    if m1:
        log("  transformers' outputs.loss vs the logged loss: max rel %.1e"
            % stats["tf_loss_rel"])
        checks["transformers_outputs_loss_rel"] = stats["tf_loss_rel"]
    if coef:
        log("  aux: transformers' (fp32 sums) vs float64: max rel %.1e; pooled over the step "
            "instead of the microbatch mean: rel %s" % (
                stats["aux_float64_rel"], ["%.1e" % x for x in stats["pooled_aux_rel"]]))
        checks["aux_fp32_vs_float64_rel"] = stats["aux_float64_rel"]
        if int(tr["microbatches"]) > 1:
            checks["aux_pooled_over_step_vs_mean_rel"] = stats["pooled_aux_rel"]
            assert min(stats["pooled_aux_rel"]) > 1e-3, stats["pooled_aux_rel"]
        fresh = load_tf(model_dir)
        checks["without_aux_gradient"] = sensitivity(fresh, fresh.config, case, tokens, mask,
                                                     records, final, log)
    checks["min_topk_gap"] = stats["min_topk_gap"]

    with open(os.path.join(outdir, "provenance.json"), "w") as f:
        f.write(mg.dumps(provenance_common(case, tokens, mask, model) | {
            "files": "model/: per expert (mlp.experts.E.{gate,up,down}_proj.weight)%s; "
                     "final/: per expert, fp32 (the float64 result rounded)"
                     % ("; model-fused/: the same weights fused (mlp.experts.gate_up_proj "
                        "[E, 2I, H] gate rows first, mlp.experts.down_proj [E, H, I])"
                        if fused_dir else ""),
            "clipped_steps": stats["clipped_steps"],
            "checks": checks,
        } | versions()))


def generate(base, log, names=None):
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(base, exist_ok=True)
    for name, case in CASES.items():
        if names and name not in names:
            continue
        torch.set_default_dtype(torch.float64)  # step_batches' counted-target weights
        try:
            if "lora" in case:
                import moe_golden_lora
                moe_golden_lora.make_case(name, case, os.path.join(base, name), log,
                                          sys.modules[__name__])
            else:
                make_case(name, case, os.path.join(base, name), log)
        finally:
            torch.set_default_dtype(torch.float32)
    mg.write_files_mk(base, MOE_REL, "tools/make_moe_golden.py: the MoE fixtures")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, MOE_REL))
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
