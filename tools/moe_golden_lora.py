"""The LoRA case of tools/make_moe_golden.py (moe-lora): LoRA on a
Qwen3-MoE model's router and experts against PEFT in float64.  Not run on its
own: make_moe_golden.py calls make_case() with itself as `mm`.

What PEFT 0.21.2 does with transformers 5.24's Qwen3-MoE, and why the
reference is built as it is:
  * transformers 5.24 holds the experts fused, as 3-D parameters
    (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I]);
    the router is a Qwen3MoeTopKRouter module with a weight [E, H], not an
    nn.Linear.  PEFT's "all-linear" finds neither.  For model_type qwen3_moe
    PEFT rewrites the LoraConfig (peft.utils.transformers_weight_conversion):
    gate_proj/up_proj/down_proj/gate become target_parameters
    {gate_up_proj, down_proj, gate.weight}; gate_up_proj gets rank 2r and
    alpha 2*alpha; each is a ParamWrapper whose lora_A/lora_B hold all
    experts at once (lora_A [r*E, in]), saved under keys such as
    mlp.experts.base_layer.lora_A.weight, not per expert.  Trained that way,
    gate_proj and up_proj share one rank-2r adapter whose B is not kept
    block-diagonal: not the per-expert contract.  And because the names
    gate_proj/up_proj/down_proj are taken out of target_modules, the dense
    MLP blocks of the model get no adapter at all.
  * So the reference model is transformers' with every MoE block replaced by
    make_moe_golden.PerExpertMoeBlock (per-expert nn.Linear modules, checked
    against transformers to 1e-12 by make_moe_golden's
    reimplementation_check), and its config's model_type set to
    make_moe_golden.PER_EXPERT_TYPE so that PEFT leaves its config alone.
    PEFT's "all-linear" then wraps q/k/v/o, the router (mlp.gate), every
    expert's gate_proj/up_proj/down_proj and the dense MLPs' projections in
    ordinary lora.Linear layers, and saves per-expert keys
    (base_model.model.model.layers.N.mlp.experts.E.gate_proj.lora_A.weight
    [r, H], ...).  With more than 20 targeted modules, adapter_config.json
    lists target_modules as names: q_proj k_proj v_proj o_proj gate
    gate_proj up_proj down_proj.
  * The trained adapter is then loaded with PeftModel.from_pretrained on
    transformers' own (fused) model: PEFT converts the per-expert adapter
    to its fused form (A concatenated, B block-diagonal) and reproduces the
    re-implementation's logits, except that it drops the dense blocks'
    adapters (see above), which the cross-check states.

Training, as make_lora_golden.py: lora_init/ holds non-zero A and B (fp32
normal * 0.1, seeded, in named_parameters order, saved by
PeftModel.save_pretrained); PeftModel.from_pretrained(is_trainable=True) on
the float64 base; only A and B train (grad_norm, clipping and AdamW over
them, decay on both); the aux loss (router logits include the router's
LoRA) and its gradient as in make_moe_golden.py; final/ is the adapter
saved after casting to fp32.
"""

import json
import os
import shutil
import tempfile

import peft
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file

INIT_STD = 0.1
KEY_PREFIX = "base_model.model."
TARGET_NAMES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate", "gate_proj", "up_proj", "down_proj"]


def lora_config(case):
    lo = case["lora"]
    return LoraConfig(r=lo["r"], lora_alpha=lo["alpha"], target_modules="all-linear",
                      lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")


def lora_args(case):
    # all-linear is the default of --lora-targets
    return "--lora-rank %d --lora-alpha %d" % (case["lora"]["r"], case["lora"]["alpha"])


def saved_key(param_name):
    return param_name.replace(".default.weight", ".weight")


def adapter_params(model):
    out = [(saved_key(n), p) for n, p in model.named_parameters() if p.requires_grad]
    for n, _ in out:
        assert n.startswith(KEY_PREFIX) and (".lora_A." in n or ".lora_B." in n), n
    return out


def save_adapter(model, dst):
    """PeftModel.save_pretrained, keeping adapter_config.json and
    adapter_model.safetensors."""
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, save_embedding_layers=False)
        os.makedirs(dst, exist_ok=True)
        for f in ("adapter_config.json", "adapter_model.safetensors"):
            shutil.copyfile(os.path.join(tmp, f), os.path.join(dst, f))


def expected_keys(cfg, moe, r):
    """Every adapter key and shape the contract names, per expert."""
    H, I, D = cfg.hidden_size, cfg.moe_intermediate_size, cfg.intermediate_size
    q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    keys = {}

    def add(path, fan_in, fan_out):
        keys[KEY_PREFIX + path + ".lora_A.weight"] = (r, fan_in)
        keys[KEY_PREFIX + path + ".lora_B.weight"] = (fan_out, r)

    for i in range(cfg.num_hidden_layers):
        p = "model.layers.%d." % i
        add(p + "self_attn.q_proj", H, q)
        add(p + "self_attn.k_proj", H, kv)
        add(p + "self_attn.v_proj", H, kv)
        add(p + "self_attn.o_proj", q, H)
        if i in moe:
            add(p + "mlp.gate", H, cfg.num_experts)
            for e in range(cfg.num_experts):
                add(p + "mlp.experts.%d.gate_proj" % e, H, I)
                add(p + "mlp.experts.%d.up_proj" % e, H, I)
                add(p + "mlp.experts.%d.down_proj" % e, I, H)
        else:
            add(p + "mlp.gate_proj", H, D)
            add(p + "mlp.up_proj", H, D)
            add(p + "mlp.down_proj", D, H)
    return keys


def base(mm, model_dir, dtype):
    """The per-expert re-implementation, with a path-independent name (PEFT
    writes it into adapter_config.json as base_model_name_or_path)."""
    model = mm.load_per_expert(model_dir, dtype)
    model.name_or_path = os.path.join(mm.MOE_REL, "moe-lora", "model")
    model.config._name_or_path = model.name_or_path
    return model


def make_init(mm, case, model_dir, dst, log):
    model = get_peft_model(base(mm, model_dir, torch.float32), lora_config(case))
    g = torch.Generator().manual_seed(case["lora"]["init_seed"])
    params = adapter_params(model)
    with torch.no_grad():
        for _, p in params:
            assert p.dtype == torch.float32
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float32) * INIT_STD)
    save_adapter(model, dst)
    cfg = model.base_model.model.config
    want = expected_keys(cfg, mm.moe_layers(cfg), case["lora"]["r"])
    got = load_file(os.path.join(dst, "adapter_model.safetensors"))
    assert sorted(got) == sorted(want), sorted(set(got) ^ set(want))
    assert all(tuple(got[k].shape) == want[k] for k in want)
    with open(os.path.join(dst, "adapter_config.json")) as f:
        ac = json.load(f)
    assert sorted(ac["target_modules"]) == sorted(TARGET_NAMES), ac["target_modules"]
    assert ac.get("target_parameters") in (None, []), ac["target_parameters"]
    log("  lora_init: %d tensors, per expert (e.g. %s %s); target_modules %s"
        % (len(got), "mlp.experts.0.gate_proj.lora_A.weight",
           list(want[KEY_PREFIX + "model.layers.0.mlp.experts.0.gate_proj.lora_A.weight"]),
           ac["target_modules"]))
    return {n: p.detach().clone() for n, p in params}


class HandLoRA(torch.nn.Module):
    """y = base(x) + s * B (A x), written out for the independent check."""

    def __init__(self, base_linear, a, b, s):
        super().__init__()
        self.base, self.a, self.b, self.s = base_linear, a, b, s

    def forward(self, x):
        return self.base(x) + self.s * ((x @ self.a.t()) @ self.b.t())


def independent_check(mm, case, model_dir, init_dir, tokens, mask, log):
    """Step 1 twice from lora_init/: PEFT, and the re-implementation with
    HandLoRA on every module named by the file's keys (no PEFT).  Loss (CE
    mean + coef * aux) and every adapter gradient."""
    lo = case["lora"]
    peft_model = PeftModel.from_pretrained(base(mm, model_dir, torch.float64), init_dir,
                                           is_trainable=True)
    l_peft = mm.step1_grads(peft_model, case, tokens, mask)
    g_peft = {n: p.grad for n, p in adapter_params(peft_model)}

    hand = base(mm, model_dir, torch.float64)
    for p in hand.parameters():
        p.requires_grad_(False)
    tensors = load_file(os.path.join(init_dir, "adapter_model.safetensors"))
    leaves = {}
    for key in sorted(tensors):
        if ".lora_A." not in key:
            continue
        path = key[len(KEY_PREFIX):].split(".lora_A.")[0]
        a = tensors[key].to(torch.float64).requires_grad_(True)
        b = tensors[key.replace(".lora_A.", ".lora_B.")].to(torch.float64).requires_grad_(True)
        parent, name = path.rsplit(".", 1)
        mod = hand.get_submodule(parent)
        lin = getattr(mod, name)
        assert isinstance(lin, torch.nn.Linear), path
        setattr(mod, name, HandLoRA(lin, a, b, lo["alpha"] / lo["r"]))
        leaves[key] = a
        leaves[key.replace(".lora_A.", ".lora_B.")] = b
    l_hand = mm.step1_grads(hand, case, tokens, mask)
    g_hand = {k: v.grad if v.grad is not None else torch.zeros_like(v) for k, v in leaves.items()}
    g_peft = {k: v if v is not None else torch.zeros_like(g_hand[k]) for k, v in g_peft.items()}
    loss_rel = abs(l_hand - l_peft) / abs(l_peft)
    grad_rel = mm.max_rel(g_hand, g_peft)
    log("  independent check, step 1 (HandLoRA on the re-implementation, no PEFT): loss rel "
        "%.1e, adapter gradients max rel %.1e" % (loss_rel, grad_rel))
    assert loss_rel < 1e-12 and grad_rel < 1e-10, (loss_rel, grad_rel)
    return {"loss_rel": loss_rel, "grad_max_rel": grad_rel}


def fused_cross_check(mm, case, model_dir, final_dir, tokens, mask, log):
    """The trained adapter on transformers' own fused model, through PEFT's
    conversion, against the re-implementation: logits of the step after the
    last, in float64."""
    tr = case["train"]
    _, mbs = mm.mg.step_batches(int(tr["steps"]) + 1, tokens, mask, tr)
    inp = torch.cat([mb[0] for mb in mbs])
    ours = PeftModel.from_pretrained(base(mm, model_dir, torch.float64), final_dir)
    fused = PeftModel.from_pretrained(mm.load_tf(model_dir, torch.float64), final_dir)
    pc = fused.peft_config["default"]
    ours.eval()
    fused.eval()
    with torch.no_grad():
        a = ours(input_ids=inp).logits
        b = fused(input_ids=inp).logits
        rel_all = float((a - b).abs().max() / a.abs().max())
        cfg = ours.base_model.model.config
        dense = [i for i in range(cfg.num_hidden_layers) if i not in mm.moe_layers(cfg)]
        for n, p in ours.named_parameters():
            if ".lora_B." in n and any(".layers.%d.mlp." % i in n for i in dense):
                p.zero_()
        a = ours(input_ids=inp).logits
        rel_nodense = float((a - b).abs().max() / a.abs().max())
    fused_keys = sorted(n for n, _ in fused.named_parameters() if ".lora_" in n and ".mlp." in n)
    log("  PEFT on transformers' fused model with final/: target_modules %s, target_parameters "
        "%s, rank_pattern %s; logits vs the re-implementation: rel %.1e; with the dense blocks' "
        "adapters zeroed: rel %.1e" % (sorted(pc.target_modules), sorted(pc.target_parameters),
                                       pc.rank_pattern, rel_all, rel_nodense))
    assert rel_nodense < 1e-12, rel_nodense
    return {"peft_target_modules": sorted(pc.target_modules),
            "peft_target_parameters": sorted(pc.target_parameters),
            "peft_rank_pattern": pc.rank_pattern,
            "peft_fused_lora_keys_layer0": [k for k in fused_keys if ".layers.0." in k],
            "logits_rel": rel_all, "logits_rel_dense_adapters_zeroed": rel_nodense}


def make_case(name, case, outdir, log, mm):
    mg = mm.mg
    log("case %s -> %s" % (name, outdir))
    if os.path.isdir(outdir):
        shutil.rmtree(outdir)
    os.makedirs(outdir)
    tr, lo = case["train"], case["lora"]
    model = mm.build_model(case)
    tensors = mm.per_expert_tensors(model)
    model_dir = os.path.join(outdir, "model")
    mm.write_model_dir(model_dir, mm.config_json(model), tensors)
    cfg = model.config
    tokens, mask = mm.write_data(case, outdir, log)
    with open(os.path.join(outdir, "args.txt"), "w") as f:
        f.write(mg.args_line(tr) + " " + lora_args(case) + "\n")
    log("  MoE blocks %s of %d; %d experts, top %d; aux: %s; LoRA r %d alpha %d" % (
        mm.moe_layers(cfg), cfg.num_hidden_layers, cfg.num_experts, cfg.num_experts_per_tok,
        mm.aux_source(case), lo["r"], lo["alpha"]))
    checks = {"load": mm.load_check(model.to(torch.float64), model_dir, None, log),
              "reimplementation_step1": mm.reimplementation_check(case, model_dir, tokens, mask,
                                                                   log)}
    init_dir = os.path.join(outdir, "lora_init")
    init = make_init(mm, case, model_dir, init_dir, log)
    checks["independent_step1"] = independent_check(mm, case, model_dir, init_dir, tokens, mask,
                                                    log)

    peft_model = PeftModel.from_pretrained(base(mm, model_dir, torch.float64), init_dir,
                                           is_trainable=True)
    params = adapter_params(peft_model)
    assert sorted(n for n, _ in params) == sorted(init)
    for n, p in params:
        assert p.dtype == torch.float64 and torch.equal(p.detach(), init[n].double()), n
    frozen = [p for p in peft_model.parameters() if not p.requires_grad]
    coef = mm.aux_coef(case)
    records, stats = mm.train(peft_model, tokens, mask, tr, cfg, coef, log, params=params)
    assert all(p.grad is None for p in frozen)
    assert stats["min_topk_gap"] > mm.MIN_TOPK_GAP, stats["min_topk_gap"]
    with open(os.path.join(outdir, "expected.jsonl"), "w") as f:
        for r in records:
            f.write(mg.dumps(r))
    trained = {n: p.detach().clone() for n, p in params}
    peft_model.to(torch.float32)
    final_dir = os.path.join(outdir, "final")
    save_adapter(peft_model, final_dir)
    loaded = PeftModel.from_pretrained(base(mm, model_dir, torch.float32), final_dir)
    got = {saved_key(n): p for n, p in loaded.named_parameters() if ".lora_" in n}
    assert sorted(got) == sorted(trained)
    moved = 0.0
    for n, p in got.items():
        assert p.dtype == torch.float32 and torch.equal(p, trained[n].to(torch.float32)), n
        moved = max(moved, float((trained[n] - init[n].double()).abs().max()))
    log("  final adapter reloaded by PEFT: the trained tensors rounded to fp32; largest change "
        "from lora_init %.3g" % moved)
    log("  smallest top-k gap of any routing: %.3g (logits); clipped steps %s; aux fp32 vs "
        "float64 max rel %.1e" % (stats["min_topk_gap"], stats["clipped_steps"],
                                  stats["aux_float64_rel"]))
    checks["fused_peft_cross_check"] = fused_cross_check(mm, case, model_dir, final_dir, tokens,
                                                         mask, log)
    fresh = PeftModel.from_pretrained(base(mm, model_dir, torch.float64), init_dir,
                                      is_trainable=True)
    checks["without_aux_gradient"] = mm.sensitivity(
        fresh, cfg, case, tokens, mask, records,
        {n: t.to(torch.float32) for n, t in trained.items()}, log, params=adapter_params(fresh))
    checks["min_topk_gap"] = stats["min_topk_gap"]
    checks["aux_fp32_vs_float64_rel"] = stats["aux_float64_rel"]
    checks["aux_pooled_over_step_vs_mean_rel"] = stats["pooled_aux_rel"]

    with open(os.path.join(outdir, "provenance.json"), "w") as f:
        f.write(mg.dumps(mm.provenance_common(case, tokens, mask, model) | {
            "lora": {"r": lo["r"], "lora_alpha": lo["alpha"], "scaling": lo["alpha"] / lo["r"],
                     "target_modules (LoraConfig)": "all-linear", "lora_dropout": 0.0,
                     "bias": "none"},
            "reference": "transformers' Qwen3MoeForCausalLM with each MoE block replaced by "
                         "PerExpertMoeBlock (tools/make_moe_golden.py; per-expert nn.Linear), "
                         "config.model_type %s so that PEFT does not rewrite the LoRA config "
                         "for transformers' fused experts; PEFT wraps every nn.Linear"
                         % mm.PER_EXPERT_TYPE,
            "lora_init": "get_peft_model on the fp32 base, then every lora_A/lora_B weight "
                         "(named_parameters order) set to torch.randn(shape, "
                         "generator=torch.Generator().manual_seed(%d), dtype=float32) * %g; "
                         "PeftModel.save_pretrained" % (lo["init_seed"], INIT_STD),
            "training": "PeftModel.from_pretrained(lora_init, is_trainable=True) on the base in "
                        "float64; adapter tensors only: grad_norm and clipping over them, "
                        "torch.optim.AdamW(weight_decay on all, foreach=False); the aux loss "
                        "as the other cases",
            "final": "model cast to float32, PeftModel.save_pretrained",
            "clipped_steps": stats["clipped_steps"],
            "checks": checks,
        } | mm.versions() | {"generator": "tools/make_moe_golden.py (tools/moe_golden_lora.py)",
                             "peft": peft.__version__}))
