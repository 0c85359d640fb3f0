"""The LoRA cases of tools/make_gpt_oss_golden.py (oss-lora, oss-lora-params,
oss-lora-params-m1): LoRA on gpt-oss against PEFT in float64.  Not run on
its own: make_gpt_oss_golden.py calls make_case() with itself as `og`.

What PEFT 0.21.2 does with transformers 5.24's GptOssForCausalLM, and so
what roundpipe's LoRA on gpt-oss is:
  * q_proj, k_proj, v_proj and o_proj are nn.Linear modules (with biases):
    PEFT wraps them in lora.Linear, y = base(x) + s * B (A x), the bias in
    the frozen base.  These are what roundpipe adapts.
  * The router (mlp.router, GptOssTopKRouter) holds weight [E, H] and bias
    [E] as parameters of its own and calls F.linear: no nn.Linear, so
    "all-linear" passes it by and target_modules=["router"] is refused by
    PEFT (the module type is not supported).
  * The experts (mlp.experts, GptOssExperts) are fused 3-D parameters
    (gate_up_proj [E, H, 2I], down_proj [E, I, H]); PEFT reaches them only
    with target_parameters (a ParamWrapper: one lora_A [r*E, H] and lora_B
    [2I, r*E] over all experts, gate and up sharing each expert's A, the
    delta added to the fused weight; no dropout), and the router's weight
    likewise: the oss-lora-params cases below, which --lora-targets names by
    those parameter names (roundpipe refuses the Linear names gate_proj,
    up_proj, down_proj and gate on gpt-oss, naming why).
  * So LoraConfig(target_modules="all-linear") on gpt-oss adapts exactly
    q/k/v/o in every block (make_init asserts it), which adapter_config.json
    lists as module paths (PEFT does for 20 modules or fewer); roundpipe's
    default (all-linear) is the same set.

Training, as make_moe_golden.py's LoRA case: lora_init/ holds non-zero A and
B (fp32 normal * INIT_STD, seeded, in named_parameters order, saved by
PeftModel.save_pretrained); PeftModel.from_pretrained(is_trainable=True) on
the float64 base (transformers patched to float64 as the other cases); only
A and B train (grad_norm, clipping and AdamW over them, decay on both); the
aux loss and its gradient as oss-m2 (the frozen router's logits move with
the adapted attention); final/ is the adapter saved after casting to fp32.
An independent check replaces PEFT by hand-written adapters at step 1.
"""

import json
import os
import shutil
import tempfile

import peft
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file

# PEFT's all-linear config, the --lora-* arguments and the saved adapter's
# keys are Qwen3-MoE's (moe_golden_lora.py); save_adapter below differs
from moe_golden_lora import adapter_params, lora_args, lora_config, saved_key

INIT_STD = 0.1
KEY_PREFIX = "base_model.model."
TARGET_NAMES = ["q_proj", "k_proj", "v_proj", "o_proj"]


def save_adapter(model, dst):
    """PeftModel.save_pretrained, keeping adapter_config.json (its
    target_modules, a set PEFT lists in hash order, sorted: two runs write
    the same bytes) and adapter_model.safetensors."""
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, save_embedding_layers=False)
        os.makedirs(dst, exist_ok=True)
        shutil.copyfile(os.path.join(tmp, "adapter_model.safetensors"),
                        os.path.join(dst, "adapter_model.safetensors"))
        with open(os.path.join(tmp, "adapter_config.json")) as f:
            ac = json.load(f)
        if isinstance(ac.get("target_modules"), list):
            ac["target_modules"] = sorted(ac["target_modules"])
        with open(os.path.join(dst, "adapter_config.json"), "w") as f:
            f.write(json.dumps(ac, indent=2, sort_keys=True) + "\n")


def expected_keys(cfg, r):
    H = cfg.hidden_size
    q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    keys = {}
    for i in range(cfg.num_hidden_layers):
        for proj, fan_in, fan_out in (("q_proj", H, q), ("k_proj", H, kv), ("v_proj", H, kv),
                                      ("o_proj", q, H)):
            path = KEY_PREFIX + "model.layers.%d.self_attn.%s" % (i, proj)
            keys[path + ".lora_A.weight"] = (r, fan_in)
            keys[path + ".lora_B.weight"] = (fan_out, r)
    return keys


def base(og, model_dir, dtype):
    """transformers' model, with a path-independent name (PEFT writes it
    into adapter_config.json as base_model_name_or_path)."""
    model = og.load_tf(model_dir, dtype)
    model.name_or_path = os.path.join(og.OSS_REL, "oss-lora", "model")
    model.config._name_or_path = model.name_or_path
    return model


def init_adapter(og, case, model_dir, config, keys, dst):
    """PEFT's adapter for `config` on the fp32 base, every lora_A/lora_B
    weight drawn (named_parameters order) from the case's init_seed times
    INIT_STD, saved to dst; checks the saved tensors are keys(cfg, r) with
    their shapes. Returns the model's config, the adapter's tensors (a
    copy), how many the file holds and its adapter_config.json."""
    model = get_peft_model(base(og, model_dir, torch.float32), config)
    g = torch.Generator().manual_seed(case["lora"]["init_seed"])
    params = adapter_params(model)
    with torch.no_grad():
        for _, p in params:
            assert p.dtype == torch.float32
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float32) * INIT_STD)
    save_adapter(model, dst)
    cfg = model.base_model.model.config
    want = keys(cfg, case["lora"]["r"])
    got = load_file(os.path.join(dst, "adapter_model.safetensors"))
    assert sorted(got) == sorted(want), sorted(set(got) ^ set(want))
    assert all(tuple(got[k].shape) == want[k] for k in want)
    with open(os.path.join(dst, "adapter_config.json")) as f:
        ac = json.load(f)
    return cfg, {n: p.detach().clone() for n, p in params}, len(got), ac


def make_init(og, case, model_dir, dst, log):
    cfg, init, saved, ac = init_adapter(og, case, model_dir, lora_config(case), expected_keys,
                                        dst)
    # 20 modules or fewer: PEFT lists their paths (roundpipe reads both forms)
    want_paths = ["model.layers.%d.self_attn.%s" % (i, t)
                  for i in range(cfg.num_hidden_layers) for t in TARGET_NAMES]
    assert sorted(ac["target_modules"]) in (sorted(TARGET_NAMES), sorted(want_paths)), \
        ac["target_modules"]
    assert ac.get("target_parameters") in (None, []), ac["target_parameters"]
    log("  lora_init: %d tensors; all-linear on gpt-oss adapts %s in every block (the router "
        "and the fused experts are no nn.Linear)" % (saved, TARGET_NAMES))
    return init


def router_refused(og, model_dir):
    """PEFT's answer to target_modules=["router"] on gpt-oss."""
    try:
        get_peft_model(base(og, model_dir, torch.float32),
                       LoraConfig(r=2, lora_alpha=4, target_modules=["router"]))
    except (ValueError, TypeError) as e:
        return str(e).split("\n")[0][:200]
    raise AssertionError("PEFT took target_modules=['router'] on gpt-oss")


class HandLoRA(torch.nn.Module):
    """y = base(x) + s * B (A x), written out for the independent check."""

    def __init__(self, base_linear, a, b, s):
        super().__init__()
        self.base, self.a, self.b, self.s = base_linear, a, b, s

    def forward(self, x):
        return self.base(x) + self.s * ((x @ self.a.t()) @ self.b.t())


def step1_grads(og, model, case, tokens, mask):
    """Step 1's loss (CE mean + coef * aux / M per microbatch) with its
    gradients accumulated."""
    tr = case["train"]
    _, mbs = og.mg.step_batches(1, tokens, mask, tr)
    count = sum(float(mb[2].sum()) for mb in mbs)
    coef = og.aux_coef(case)
    rec = og.Recorder(model)
    total = 0.0
    for mb in mbs:
        rec.take()
        part = og.mg.ce_sum(model, *mb[:3]) / count
        lg = rec.take()
        cfg = model.config
        if coef:
            part = part + coef * og.tf_oss.load_balancing_loss_func(
                lg, cfg.num_local_experts, cfg.num_experts_per_tok) / len(mbs)
        part.backward()
        total += part.item()
    rec.close()
    return total


def max_rel(ga, gb):
    assert sorted(ga) == sorted(gb), sorted(set(ga) ^ set(gb))
    return max(float((ga[n] - gb[n]).abs().max() / gb[n].abs().max().clamp_min(1e-300))
               for n in gb)


def train_and_save(og, case, model_dir, init_dir, init, tokens, mask, outdir, log,
                   past_clamp=False):
    """PEFT trains the adapter of init_dir in float64 on the base (only the
    adapter's tensors move), writes expected.jsonl and final/ (the adapter
    cast to fp32), and checks PEFT reads final/ back as the trained tensors
    rounded to fp32. past_clamp: the case must drive some of gate's and up's
    values past the SwiGLU clamps. Returns the aux coefficient, train()'s
    stats and the largest change of a tensor from init."""
    tr = case["train"]
    peft_model = PeftModel.from_pretrained(base(og, model_dir, torch.float64), init_dir,
                                           is_trainable=True)
    params = adapter_params(peft_model)
    assert sorted(n for n, _ in params) == sorted(init)
    for n, p in params:
        assert p.dtype == torch.float64 and torch.equal(p.detach(), init[n].double()), n
    frozen = [p for p in peft_model.parameters() if not p.requires_grad]
    coef = og.aux_coef(case)
    records, stats = og.train(peft_model, tokens, mask, tr, coef, log, params=params)
    assert all(p.grad is None for p in frozen)
    assert stats["min_topk_gap"] > og.MIN_TOPK_GAP, stats["min_topk_gap"]
    if past_clamp:
        assert 0.02 < stats["clamped"]["gate"] < 0.9 and 0.02 < stats["clamped"]["up"] < 0.9, \
            stats
    with open(os.path.join(outdir, "expected.jsonl"), "w") as f:
        for r in records:
            f.write(og.mg.dumps(r))
    trained = {n: p.detach().clone() for n, p in params}
    peft_model.to(torch.float32)
    final_dir = os.path.join(outdir, "final")
    save_adapter(peft_model, final_dir)
    loaded = PeftModel.from_pretrained(base(og, model_dir, torch.float32), final_dir)
    got = {saved_key(n): p for n, p in loaded.named_parameters() if ".lora_" in n}
    assert sorted(got) == sorted(trained)
    moved = 0.0
    for n, p in got.items():
        assert p.dtype == torch.float32 and torch.equal(p, trained[n].to(torch.float32)), n
        moved = max(moved, float((trained[n] - init[n].double()).abs().max()))
    return coef, stats, moved


def training_provenance(og, lo, stats, checks):
    """provenance.json's entries on how the adapter was made and trained,
    the same for every LoRA case of gpt-oss."""
    return {
        "lora_init": "get_peft_model on the fp32 base, then every lora_A/lora_B weight "
                     "(named_parameters order) set to torch.randn(shape, "
                     "generator=torch.Generator().manual_seed(%d), dtype=float32) * %g; "
                     "PeftModel.save_pretrained" % (lo["init_seed"], INIT_STD),
        "training": "PeftModel.from_pretrained(lora_init, is_trainable=True) on the base in "
                    "float64 (transformers patched as the other cases); adapter tensors "
                    "only: grad_norm and clipping over them, torch.optim.AdamW(weight_decay "
                    "on all, foreach=False); the aux loss as oss-m2",
        "final": "model cast to float32, PeftModel.save_pretrained",
        "clipped_steps": stats["clipped_steps"],
        "checks": checks,
    } | og.versions() | {"generator": "tools/make_gpt_oss_golden.py (tools/gpt_oss_golden_lora.py)",
                         "peft": peft.__version__}

def make_case(name, case, outdir, log, og):
    if case["lora"].get("reversed"):
        return make_reversed_case(name, case, outdir, log, og)
    if case["lora"].get("parameters"):
        return make_params_case(name, case, outdir, log, og)
    mg = og.mg
    log("case %s -> %s" % (name, outdir))
    if os.path.isdir(outdir):
        shutil.rmtree(outdir)
    os.makedirs(outdir)
    tr, lo = case["train"], case["lora"]
    model = og.build_model(case)
    model_dir = os.path.join(outdir, "model")
    og.write_model_dir(model_dir, og.config_json(model), og.fp32_tensors(model))
    tokens, mask = mg.make_data(case)
    og.np.save(os.path.join(outdir, "data.npy"), tokens)
    if mask is not None:
        og.np.save(os.path.join(outdir, "mask.npy"), mask)
    with open(os.path.join(outdir, "args.txt"), "w") as f:
        f.write(mg.args_line(tr) + " " + lora_args(case) + "\n")
    og.assert_same_params(og.load_tf(model_dir, torch.float32), model, "load")
    checks = {"peft_router_target_modules": router_refused(og, model_dir)}
    log("  PEFT on target_modules=['router']: %s" % checks["peft_router_target_modules"])
    init_dir = os.path.join(outdir, "lora_init")
    init = make_init(og, case, model_dir, init_dir, log)
    checks["independent_step1"] = independent_check(og, case, model_dir, init_dir, tokens, mask,
                                                    log)

    coef, stats, moved = train_and_save(og, case, model_dir, init_dir, init, tokens, mask,
                                        outdir, log)
    log("  final adapter reloaded by PEFT: the trained tensors rounded to fp32; largest change "
        "from lora_init %.3g" % moved)
    checks.update({"min_topk_gap": stats["min_topk_gap"], "clamped": stats["clamped"],
                   "largest_change_from_init": moved})
    with open(os.path.join(outdir, "provenance.json"), "w") as f:
        f.write(mg.dumps({
            "tokens": "numpy.random.default_rng(%d).integers(0, %d, size=%d) as int32"
                      % (case["data_seed"], case["config"]["vocab_size"], case["data_len"]),
            "mask": "tools/make_golden.py make_data()" if mask is not None else None,
            "model": "GptOssForCausalLM, torch.manual_seed(%d), then build_model()'s draws "
                     "from torch.Generator().manual_seed(%d)"
                     % (case["model_seed"], case["model_seed"] + 1),
            "aux_coef": coef,
            "lora": {"r": lo["r"], "lora_alpha": lo["alpha"], "scaling": lo["alpha"] / lo["r"],
                     "target_modules (LoraConfig)": "all-linear (q/k/v/o on gpt-oss)",
                     "lora_dropout": 0.0, "bias": "none"},
        } | training_provenance(og, lo, stats, checks)))


# ---------------------------------------------------------------------------
# oss-lora-params, oss-lora-params-m1: the router and the experts as PEFT's
# target_parameters
# ---------------------------------------------------------------------------
# PEFT 0.21.2's ParamWrapper (tuners/lora/layer.py) on each parameter, in
# this order (each wraps the last: gate_up_proj's is the inner one when
# down_proj's is there too, saved as mlp.experts.base_layer.lora_*):
#   * mlp.experts.gate_up_proj [E, H, 2I]: 3-D and GptOssExperts.is_transposed
#     (x @ W), so in = H, out = 2I: lora_A [r*E, H] (expert e's A_e its rows
#     e*r ..), lora_B [2I, r*E] (B_e[o, k] at column k*E + e), the delta
#     s * einsum("o r e, e r i -> e i o") added to the fused weight for each
#     forward; gate (even columns) and up (odd) share A_e
#   * mlp.experts.down_proj [E, I, H]: the same with in = I, out = H
#   * mlp.router.weight [E, H]: 2-D, as a Linear: lora_A [r, H], lora_B [E, r]
# the biases untouched; no dropout, DoRA or lora_bias (PEFT refuses them).
PARAMS = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj", "mlp.router.weight"]
PARAMS_TARGETS = ",".join(TARGET_NAMES + PARAMS)


def params_config(case, params=PARAMS):
    lo = case["lora"]
    return LoraConfig(r=lo["r"], lora_alpha=lo["alpha"], target_modules=list(TARGET_NAMES),
                      target_parameters=list(params), lora_dropout=0.0, bias="none",
                      task_type="CAUSAL_LM")


def params_keys(cfg, r):
    """expected_keys' q/k/v/o and the target_parameters' fused tensors."""
    keys = expected_keys(cfg, r)
    H, I, E = cfg.hidden_size, cfg.intermediate_size, cfg.num_local_experts
    for i in range(cfg.num_hidden_layers):
        mlp = KEY_PREFIX + "model.layers.%d.mlp." % i
        keys[mlp + "router.lora_A.weight"] = (r, H)
        keys[mlp + "router.lora_B.weight"] = (E, r)
        keys[mlp + "experts.base_layer.lora_A.weight"] = (r * E, H)  # gate_up_proj
        keys[mlp + "experts.base_layer.lora_B.weight"] = (2 * I, r * E)
        keys[mlp + "experts.lora_A.weight"] = (r * E, I)  # down_proj
        keys[mlp + "experts.lora_B.weight"] = (H, r * E)
    return keys


def make_params_init(og, case, model_dir, dst, log, params_list=PARAMS):
    _, init, saved, ac = init_adapter(og, case, model_dir, params_config(case, params_list),
                                      params_keys, dst)
    assert ac["target_parameters"] == params_list, ac["target_parameters"]
    log("  lora_init: %d tensors; q/k/v/o and target_parameters %s" % (saved, params_list))
    return init


class HandDelta(torch.nn.Module):
    """W + s * delta, written out from the file's lora_A and lora_B for the
    independent check (a parametrization: recomputed at each use)."""

    def __init__(self, a, b, s, experts):
        super().__init__()
        self.a, self.b, self.s, self.experts = a, b, s, experts

    def forward(self, w):
        if w.dim() == 2:  # the router: a Linear's [out, in]
            return w + self.s * (self.b @ self.a)
        E, r = self.experts, self.a.shape[0] // self.experts
        d = torch.zeros_like(w)
        for e in range(E):  # w[e] is [in, out], applied as x @ w[e]
            a_e = self.a[e * r:(e + 1) * r]          # [r, in]
            b_e = self.b[:, [k * E + e for k in range(r)]]  # [out, r]
            d[e] = (b_e @ a_e).t()
        return w + self.s * d


def independent_check(og, case, model_dir, init_dir, tokens, mask, log):
    """Step 1 twice from lora_init/: PEFT, and transformers' model (no PEFT)
    with HandLoRA on every Linear the file's keys name (q/k/v/o) and
    HandDelta on the router's and the experts' parameters they name."""
    from torch.nn.utils import parametrize
    lo = case["lora"]
    s = lo["alpha"] / lo["r"]
    peft_model = PeftModel.from_pretrained(base(og, model_dir, torch.float64), init_dir,
                                           is_trainable=True)
    l_peft = step1_grads(og, peft_model, case, tokens, mask)
    g_peft = {n: p.grad for n, p in adapter_params(peft_model)}
    hand = base(og, model_dir, torch.float64)
    for p in hand.parameters():
        p.requires_grad_(False)
    tensors = load_file(os.path.join(init_dir, "adapter_model.safetensors"))
    E = hand.config.num_local_experts
    leaves = {}
    for key in sorted(tensors):
        if ".lora_A." not in key:
            continue
        kb = key.replace(".lora_A.", ".lora_B.")
        a = tensors[key].to(torch.float64).requires_grad_(True)
        b = tensors[kb].to(torch.float64).requires_grad_(True)
        leaves[key], leaves[kb] = a, b
        path = key[len(KEY_PREFIX):].split(".lora_A.")[0]
        if path.endswith(".mlp.router"):
            parametrize.register_parametrization(hand.get_submodule(path), "weight",
                                                 HandDelta(a, b, s, 1), unsafe=True)
        elif path.endswith(".mlp.experts.base_layer") or path.endswith(".mlp.experts"):
            inner = path.endswith(".base_layer")
            mod = hand.get_submodule(path[:-len(".base_layer")] if inner else path)
            parametrize.register_parametrization(mod, "gate_up_proj" if inner else "down_proj",
                                                 HandDelta(a, b, s, E), unsafe=True)
        else:
            parent, name = path.rsplit(".", 1)
            mod = hand.get_submodule(parent)
            lin = getattr(mod, name)
            assert isinstance(lin, torch.nn.Linear) and lin.bias is not None, path
            setattr(mod, name, HandLoRA(lin, a, b, s))
    l_hand = step1_grads(og, hand, case, tokens, mask)
    g_hand = {k: v.grad for k, v in leaves.items()}
    loss_rel = abs(l_hand - l_peft) / abs(l_peft)
    grad_rel = max_rel(g_hand, g_peft)
    delta = any(parametrize.is_parametrized(m) for m in hand.modules())
    hands = "HandLoRA and HandDelta" if delta else "HandLoRA"
    log("  independent check, step 1 (%s on transformers' model, no PEFT): loss rel %.1e, "
        "adapter gradients max rel %.1e" % (hands, loss_rel, grad_rel))
    assert loss_rel < 1e-12 and grad_rel < 1e-10, (loss_rel, grad_rel)
    return {"loss_rel": loss_rel, "grad_max_rel": grad_rel}


def params_dropout_refused(og, model_dir):
    """PEFT's answer to lora_dropout > 0 with target_parameters."""
    try:
        get_peft_model(base(og, model_dir, torch.float32),
                       LoraConfig(r=2, lora_alpha=4, lora_dropout=0.1,
                                  target_modules=list(TARGET_NAMES),
                                  target_parameters=list(PARAMS)))
    except ValueError as e:
        return str(e).split("\n")[0][:200]
    raise AssertionError("PEFT took lora_dropout 0.1 with target_parameters")


def make_params_case(name, case, outdir, log, og):
    mg = og.mg
    log("case %s -> %s" % (name, outdir))
    if os.path.isdir(outdir):
        shutil.rmtree(outdir)
    os.makedirs(outdir)
    tr, lo = case["train"], case["lora"]
    src = og.CASES[case["model_from"]]
    assert all(src[k] == case[k] for k in ("model_seed", "config")), case["model_from"]
    tmp = tempfile.TemporaryDirectory()
    model_dir = os.path.join(tmp.name, "model")
    model = og.build_model(case)
    og.write_model_dir(model_dir, og.config_json(model), og.fp32_tensors(model))
    shared = os.path.join(os.path.dirname(outdir), case["model_from"], "model")
    for f in ("config.json", "model.safetensors"):
        if os.path.exists(os.path.join(shared, f)):
            assert mg.sha256(os.path.join(shared, f)) == mg.sha256(os.path.join(model_dir, f)), f
    tokens, mask = mg.make_data(case)
    og.np.save(os.path.join(outdir, "data.npy"), tokens)
    if mask is not None:
        og.np.save(os.path.join(outdir, "mask.npy"), mask)
    with open(os.path.join(outdir, "args.txt"), "w") as f:
        f.write(mg.args_line(tr) + " " + lora_args(case) + " --lora-targets " + PARAMS_TARGETS
                + "\n")
    checks = {"peft_dropout": params_dropout_refused(og, model_dir)}
    log("  PEFT on lora_dropout 0.1 with target_parameters: %s" % checks["peft_dropout"])
    init_dir = os.path.join(outdir, "lora_init")
    init = make_params_init(og, case, model_dir, init_dir, log)
    checks["independent_step1"] = independent_check(og, case, model_dir, init_dir, tokens,
                                                    mask, log)
    coef, stats, moved = train_and_save(og, case, model_dir, init_dir, init, tokens, mask,
                                        outdir, log, past_clamp=True)
    log("  final adapter reloaded by PEFT: the trained tensors rounded to fp32; largest change "
        "from lora_init %.3g; values past the clamp: gate %.0f%%, up %.0f%%"
        % (moved, 100 * stats["clamped"]["gate"], 100 * stats["clamped"]["up"]))
    tmp.cleanup()
    checks.update({"min_topk_gap": stats["min_topk_gap"], "clamped": stats["clamped"],
                   "largest_change_from_init": moved})
    with open(os.path.join(outdir, "provenance.json"), "w") as f:
        f.write(mg.dumps({
            "tokens": "numpy.random.default_rng(%d).integers(0, %d, size=%d) as int32"
                      % (case["data_seed"], case["config"]["vocab_size"], case["data_len"]),
            "mask": "tools/make_golden.py make_data()" if mask is not None else None,
            "model": "%s/model (the same seeds and config)" % case["model_from"],
            "aux_coef": coef,
            "lora": {"r": lo["r"], "lora_alpha": lo["alpha"], "scaling": lo["alpha"] / lo["r"],
                     "target_modules (LoraConfig)": TARGET_NAMES,
                     "target_parameters (LoraConfig)": PARAMS,
                     "lora_dropout": 0.0, "bias": "none"},
        } | training_provenance(og, lo, stats, checks)))


# ---------------------------------------------------------------------------
# oss-lora-params-reversed: the target_parameters listed down_proj first
# ---------------------------------------------------------------------------
# PEFT 0.21.2 (BaseTuner._inject_parameters) wraps a module's parameters in
# the module's own order (module.named_parameters(recurse=False):
# GptOssExperts registers gate_up_proj before down_proj), the list only
# deciding which: gate_up_proj's ParamWrapper is the inner one whichever
# order adapter_config.json lists, so the saved names are the same.  This
# case makes oss-lora-params' adapter with the list reversed and checks
# that: the same tensor names and values, the list kept reversed in
# adapter_config.json, and PEFT loading each and training it in float64 to
# the same numbers bit for bit.  Only lora_init/ is stored: roundpipe's
# test trains it against oss-lora-params' expected.jsonl and final/.
PARAMS_REVERSED = ["mlp.experts.down_proj", "mlp.experts.gate_up_proj", "mlp.router.weight"]


def make_reversed_case(name, case, outdir, log, og):
    mg = og.mg
    log("case %s -> %s" % (name, outdir))
    if os.path.isdir(outdir):
        shutil.rmtree(outdir)
    os.makedirs(outdir)
    usual_case = og.CASES[case["lora"]["reversed"]]
    assert all(usual_case[k] == case[k] for k in ("model_seed", "data_seed", "data_len",
                                                    "config", "train")), case["lora"]["reversed"]
    assert {k: v for k, v in usual_case["lora"].items()} == \
        {k: v for k, v in case["lora"].items() if k != "reversed"}
    tmp = tempfile.TemporaryDirectory()
    model_dir = os.path.join(tmp.name, "model")
    model = og.build_model(case)
    og.write_model_dir(model_dir, og.config_json(model), og.fp32_tensors(model))
    tokens, mask = mg.make_data(case)
    usual_dir = os.path.join(tmp.name, "usual")
    make_params_init(og, case, model_dir, usual_dir, log)
    init_dir = os.path.join(outdir, "lora_init")
    make_params_init(og, case, model_dir, init_dir, log, PARAMS_REVERSED)
    usual = load_file(os.path.join(usual_dir, "adapter_model.safetensors"))
    rev = load_file(os.path.join(init_dir, "adapter_model.safetensors"))
    assert sorted(usual) == sorted(rev), sorted(set(usual) ^ set(rev))
    assert all(torch.equal(usual[k], rev[k]) for k in usual)
    log("  the reversed list's adapter: the usual order's %d tensor names and values"
        % len(rev))
    coef = og.aux_coef(case)
    runs = {}
    for which, d in (("usual", usual_dir), ("reversed", init_dir)):
        peft_model = PeftModel.from_pretrained(base(og, model_dir, torch.float64), d,
                                               is_trainable=True)
        experts = peft_model.base_model.model.model.layers[0].mlp.experts
        nesting = (experts.parameter_name, experts.base_layer.parameter_name)
        assert nesting == ("down_proj", "gate_up_proj"), (which, nesting)
        params = adapter_params(peft_model)
        records, _ = og.train(peft_model, tokens, mask, case["train"], coef, log, params=params)
        runs[which] = ([mg.dumps(r) for r in records],
                       {n: p.detach().clone() for n, p in params})
    assert runs["usual"][0] == runs["reversed"][0], "the logged numbers differ"
    assert sorted(runs["usual"][1]) == sorted(runs["reversed"][1])
    assert all(torch.equal(runs["usual"][1][n], runs["reversed"][1][n]) for n in runs["usual"][1])
    log("  PEFT loads both and trains them in float64 to the same numbers and adapters, bit for "
        "bit (%d steps)" % len(runs["usual"][0]))
    tmp.cleanup()
    with open(os.path.join(outdir, "provenance.json"), "w") as f:
        f.write(mg.dumps({
            "model": "%s/model (the same seeds and config)" % usual_case["model_from"],
            "lora_init": "%s's lora_init (the same seed and draws) made with "
                         "target_parameters %s" % (case["lora"]["reversed"], PARAMS_REVERSED),
            "checks": {
                "same_names_and_values_as_usual_order": True,
                "peft_nesting_either_order": "experts: down_proj's ParamWrapper around "
                                             "gate_up_proj's (base_layer)",
                "peft_float64_training_identical_either_order": True,
            },
            "test": "roundpipe trains lora_init/ with %s's data and arguments to its "
                    "expected.jsonl and final/" % case["lora"]["reversed"],
        } | og.versions() | {"generator": "tools/make_gpt_oss_golden.py "
                                          "(tools/gpt_oss_golden_lora.py)",
                             "peft": peft.__version__}))
