#!/usr/bin/env python3
"""Generate the FP8-base LoRA parity fixtures in mpi-tests/fixtures/golden-fp8/.

Issue 36: LoRA on an FP8 base (e4m3 weights, one scale per block, as the
Qwen3-*-FP8 releases ship them) against PEFT in float64 on the exactly
dequantised base.  Each case is:
  * model/: an FP8 checkpoint made from a base case of tools/make_golden.py
    (mpi-tests/fixtures/golden/<base>/model, fp32): config.json with
    quantization_config {"quant_method": "fp8", "fmt": "e4m3",
    "activation_scheme": "dynamic", "weight_block_size": [BR, BC]}; every
    decoder block projection (q/k/v/o, gate/up/down) as `<name>.weight`
    F8_E4M3 [out, in] with `<name>.weight_scale_inv` [ceil(out/BR),
    ceil(in/BC)] in the case's scale dtype (BF16 or F32); the embedding and
    the norms unquantised, in bf16 as FP8 releases ship them (the base's
    fp32 values rounded to nearest even).  The block sizes
    leave partial edge blocks in both directions on every matrix.
    Quantisation: per block s = amax / 448 rounded to the scale dtype, then
    fp8 = e4m3(clamp(w / s, -448, 448)) (torch's float8_e4m3fn cast, round
    to nearest even);
  * the reference model: the base with each projection replaced by its
    dequantisation from the definition, w[r, c] = fp8[r, c] * s[r // BR,
    c // BC], exact in float64, and every other tensor by its bf16 value (transformers' own FP8 path takes the block
    size from the scale grid and gets partial edge blocks wrong, so it is
    not used);
  * training exactly as tools/make_lora_golden.py (its make_case is run
    with its load_base replaced by the dequantised model): lora_init/ with
    non-zero A and B, PEFT in float64, expected.jsonl (loss, lr, grad_norm
    per step), final/ the trained adapter; its independent check (a
    hand-written LoRA and finite differences on step 1) and the reload of
    final/ by PeftModel.from_pretrained happen on the dequantised base.
The dense cases cover BF16 and F32 scales and M = 2 and M = 1 microbatches.
A case with "keep" (qwen3-kept, moe-kept) writes those patterns as
quantization_config.modules_to_not_convert and ships every projection whose
module one matches unquantised (bf16, as FP8 releases do), decided by
transformers' own should_convert_module (an expert's projection is kept
also when a pattern matches the block's experts, model.layers.N.mlp.experts,
the module transformers 5 converts whole); its reference base holds those
projections' bf16 values.

The Qwen3-MoE case (moe-bf16-scales) is tools/make_moe_golden.py's moe-lora
(LoRA on the router and every expert's projections, the aux loss, a tied
and a dense block; PEFT on its per-expert re-implementation) with the model
its build_model makes replaced, before anything else sees it, by its FP8
dequantisation: every attention projection, dense MLP projection and
expert projection quantised in blocks [5, 7] (partial edge blocks both ways
on every matrix) with BF16 scales, whose dequantisation is exact in fp32,
so the case's fp32 model/ (the reference make_moe_golden.py loads, removed
afterwards) is the dequantised base itself; model-fp8/ is the FP8
checkpoint roundpipe trains from (routers, norms and the embedding
unquantised).

Run from anywhere:  python3 tools/make_fp8_lora_golden.py
(--check-only recomputes into a temporary directory and compares sha256 sums).
"""

import os
import sys

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"  # PEFT writes target_modules from a set
    os.execv(sys.executable, [sys.executable] + sys.argv)

import argparse
import json
import math
import shutil

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402
import make_lora_golden as mlg  # noqa: E402

ROOT = mg.ROOT
FP8_REL = os.path.join("mpi-tests", "fixtures", "golden-fp8")
PROJS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
E4M3_MAX = 448.0

# The base qwen3 case: hidden 64, q 64 x 64, k/v 32 x 64, o 64 x 64, gate/up
# 96 x 64, down 64 x 96.  Blocks [24, 40]: 64 rows = 24 + 24 + 16, 32 = 24 +
# 8, 96 = 24 x 4 (exact), columns 64 = 40 + 24, 96 = 40 + 40 + 16; [20, 24]:
# 64 = 20 x 3 + 4, 32 = 20 + 12, 96 = 20 x 4 + 16, columns 64 = 24 x 2 + 16,
# 96 = 24 x 4 (exact).  Partial edge blocks both ways in each case.
CASES = {
    "qwen3-bf16-scales": {
        "base": "qwen3", "block": [24, 40], "scale_dtype": "BF16", "r": 4, "alpha": 8,
        "rslora": False, "targets": "all-linear", "init_seed": 3601,
        "train": {"grad-clip": "2.5"},
    },
    "qwen3-f32-scales-m1": {
        "base": "qwen3", "block": [20, 24], "scale_dtype": "F32", "r": 2, "alpha": 4,
        "rslora": False, "targets": "all-linear", "init_seed": 3602,
        "train": {"grad-clip": "2.5", "microbatches": "1"},
    },
    # block 1's attention and block 0's up_proj unquantised
    "qwen3-kept": {
        "base": "qwen3", "block": [24, 40], "scale_dtype": "BF16", "r": 4, "alpha": 8,
        "rslora": False, "targets": "all-linear", "init_seed": 3603,
        "train": {"grad-clip": "2.5"},
        "keep": ["lm_head", "model.layers.1.self_attn", "model.layers.0.mlp.up_proj"],
    },
}

TORCH_DTYPE = {"BF16": torch.bfloat16, "F32": torch.float32}

MOE_CASES = {
    # model seed 4705, not moe-lora's 4005: with those weights quantised a
    # routing came within 2e-4 of a tie (below make_moe_golden's MIN_TOPK_GAP)
    "moe-bf16-scales": {"from": "moe-lora", "block": [5, 7], "scale_dtype": "BF16",
                        "case": {"model_seed": 4705}},
    # block 0's experts, the dense block 1's down_proj and block 2's
    # attention unquantised (the routers never are quantised)
    "moe-kept": {"from": "moe-lora", "block": [5, 7], "scale_dtype": "BF16",
                 "case": {"model_seed": 4705},
                 "keep": ["lm_head", "model.layers.0.mlp.experts", "model.layers.1.mlp.down_proj",
                          "model.layers.2.self_attn", "mlp.gate"]},
}


def quantise(w, block, scale_dtype):
    """(fp8 [out, in] float8_e4m3fn, scale [ceil(out/BR), ceil(in/BC)] in
    scale_dtype) of the fp32 matrix w."""
    br, bc = block
    rows, cols = w.shape
    gr, gc = math.ceil(rows / br), math.ceil(cols / bc)
    w64 = w.to(torch.float64)
    scale = torch.empty(gr, gc, dtype=torch.float64)
    for i in range(gr):
        for j in range(gc):
            amax = float(w64[i * br:(i + 1) * br, j * bc:(j + 1) * bc].abs().max())
            scale[i, j] = amax / E4M3_MAX if amax > 0 else 1.0
    scale = scale.to(TORCH_DTYPE[scale_dtype])
    full = scale.to(torch.float64).repeat_interleave(br, 0)[:rows].repeat_interleave(bc, 1)[:, :cols]
    fp8 = (w64 / full).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return fp8, scale


def dequantise(fp8, scale, block):
    """w[r, c] = fp8[r, c] * s[r // BR, c // BC], from the definition, in
    float64 (exact: a 4-bit significand times a scale of at most 24 bits)."""
    br, bc = block
    rows, cols = fp8.shape
    out = torch.empty(rows, cols, dtype=torch.float64)
    f = fp8.to(torch.float64)
    s = scale.to(torch.float64)
    for r in range(rows):
        for c in range(cols):
            out[r, c] = f[r, c] * s[r // br, c // bc]
    return out


def is_quantised(name, keep=None):
    """Whether tensor `name` ships FP8: a block projection whose module no
    pattern of keep (modules_to_not_convert) matches, as transformers reads
    them."""
    if not (name.startswith("model.layers.") and any(
            name.endswith(".%s.weight" % p) for p in PROJS)):
        return False
    if keep is None:
        return True
    from transformers.quantizers.quantizers_utils import should_convert_module
    module = name[:-len(".weight")]
    if ".mlp.experts." in module and not should_convert_module(
            module[:module.index(".mlp.experts.") + len(".mlp.experts")], keep):
        return False
    return should_convert_module(module, keep)


def make_fp8_model(case, golden, model_dir, log):
    """model_dir (config.json, model.safetensors) and the dequantised
    projections {name: float64 tensor}."""
    src = os.path.join(golden, case["base"], "model")
    tensors = load_file(os.path.join(src, "model.safetensors"))
    out, deq = {}, {}
    keep = case.get("keep")
    for name in sorted(tensors):
        t = tensors[name]
        if not is_quantised(name, keep):
            out[name] = t.to(torch.bfloat16).contiguous()
            deq[name] = out[name].to(torch.float64)
            continue
        fp8, scale = quantise(t, case["block"], case["scale_dtype"])
        out[name] = fp8.contiguous()
        out[name + "_scale_inv"] = scale.contiguous()
        deq[name] = dequantise(fp8, scale, case["block"])
        # the blockwise product agrees with a vectorised one (no index slip)
        full = scale.to(torch.float64).repeat_interleave(case["block"][0], 0)[:t.shape[0]]
        full = full.repeat_interleave(case["block"][1], 1)[:, :t.shape[1]]
        assert torch.equal(deq[name], fp8.to(torch.float64) * full), name
    os.makedirs(model_dir, exist_ok=True)
    save_file(out, os.path.join(model_dir, "model.safetensors"))
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                  "activation_scheme": "dynamic",
                                  "weight_block_size": list(case["block"])}
    if keep is not None:
        cfg["quantization_config"]["modules_to_not_convert"] = list(keep)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    quantised = [n for n in deq if is_quantised(n, keep)]
    err = max(float((deq[n] - tensors[n].double()).abs().max() / tensors[n].abs().max())
              for n in quantised)
    log("  %d projections FP8 in blocks %s, %s scales; largest quantisation error %.3g of "
        "the matrix's largest entry; %d other tensors bf16" % (
            len(quantised), case["block"], case["scale_dtype"], err,
            len(deq) - len(quantised)))
    if keep is not None:
        kept = sorted(n for n in deq if is_quantised(n) and n not in quantised)
        assert kept, "keep %s keeps no projection" % keep
        log("  unquantised by modules_to_not_convert %s: %s" % (keep, ", ".join(kept)))
    return deq


def is_quantised_moe(name, keep=None):
    """A Qwen3-MoE checkpoint's projections FP8 releases quantise: attention,
    dense MLP and every expert's (but those keep's patterns match); not the
    routers (mlp.gate)."""
    return is_quantised(name, keep)


def make_moe_case(name, spec, base, log):
    import make_moe_golden as mm
    import moe_golden_lora
    case = dict(mm.CASES[spec["from"]], **spec.get("case", {}))
    plain_build = mm.build_model
    stored = {}

    def dequantised_build(c):
        """build_model's model with each quantised projection replaced by its
        FP8 dequantisation (exact in fp32: BF16 scales); the FP8 tensors are
        kept for model-fp8/."""
        model = plain_build(c)
        tensors = mm.per_expert_tensors(model)
        deq = {}
        for n, t in tensors.items():
            if not is_quantised_moe(n, spec.get("keep")): # shipped in bf16
                deq[n] = t.to(torch.bfloat16).to(torch.float32)
            else:
                fp8, scale = quantise(t, spec["block"], spec["scale_dtype"])
                d = dequantise(fp8, scale, spec["block"])
                assert torch.equal(d.to(torch.float32).to(torch.float64), d), n  # exact in fp32
                stored[n] = (fp8, scale)
                deq[n] = d.to(torch.float32)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n.endswith(".mlp.experts.gate_up_proj"):
                    pre, inter = n[:-len("gate_up_proj")], p.shape[1] // 2
                    for e in range(p.shape[0]):
                        p[e, :inter].copy_(deq[pre + "%d.gate_proj.weight" % e])
                        p[e, inter:].copy_(deq[pre + "%d.up_proj.weight" % e])
                elif n.endswith(".mlp.experts.down_proj"):
                    pre = n[:-len("down_proj")]
                    for e in range(p.shape[0]):
                        p[e].copy_(deq[pre + "%d.down_proj.weight" % e])
                elif n in deq:
                    p.copy_(deq[n])
        again = mm.per_expert_tensors(model)
        assert all(torch.equal(again[n], deq[n]) for n in deq)
        return model

    outdir = os.path.join(base, name)
    log("case %s: %s on its FP8 base (blocks %s, %s scales)" % (
        name, spec["from"], spec["block"], spec["scale_dtype"]))
    mm.build_model = dequantised_build
    torch.set_default_dtype(torch.float64)
    try:
        moe_golden_lora.make_case(name, case, outdir, log, mm)
    finally:
        torch.set_default_dtype(torch.float32)
        mm.build_model = plain_build
    # model-fp8/: the checkpoint roundpipe reads; model/ (fp32, the
    # dequantised reference) goes
    ref = os.path.join(outdir, "model")
    tensors = load_file(os.path.join(ref, "model.safetensors"))
    out = {}
    for n, t in tensors.items():
        if n in stored:
            fp8, scale = stored[n]
            assert torch.equal(dequantise(fp8, scale, spec["block"]).to(torch.float32), t), n
            out[n] = fp8.contiguous()
            out[n + "_scale_inv"] = scale.contiguous()
        else:
            out[n] = t.to(torch.bfloat16)
            assert torch.equal(out[n].to(torch.float32), t), n
    assert len(stored) > 0 and all(n in tensors for n in stored)
    fp8_dir = os.path.join(outdir, "model-fp8")
    os.makedirs(fp8_dir)
    save_file(out, os.path.join(fp8_dir, "model.safetensors"))
    with open(os.path.join(ref, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                  "activation_scheme": "dynamic",
                                  "weight_block_size": list(spec["block"])}
    if "keep" in spec:
        cfg["quantization_config"]["modules_to_not_convert"] = list(spec["keep"])
        kept = sorted(n for n in tensors if is_quantised_moe(n) and n not in stored)
        assert kept, "keep %s keeps no projection" % spec["keep"]
        log("  unquantised by modules_to_not_convert: %s" % ", ".join(kept))
    with open(os.path.join(fp8_dir, "config.json"), "w") as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(ref)
    log("  model-fp8/: %d of %d tensors FP8 (attention, dense MLP, experts)" % (
        len(stored), len(tensors)))
    with open(os.path.join(outdir, "provenance.json")) as f:
        prov = json.load(f)
    prov["generator"] = "tools/make_fp8_lora_golden.py (make_moe_golden.py's %s through " \
                        "tools/moe_golden_lora.py on the dequantised base)" % spec["from"]
    fp8_base = {
        "model": "model-fp8/ (config.json, model.safetensors; the unquantised tensors bf16)",
        "weight_block_size": spec["block"], "scale_dtype": spec["scale_dtype"],
        "quantised": "model.layers.*.{self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj, "
                     "mlp.experts.E.{gate,up,down}_proj}.weight (routers unquantised)",
        "quantisation": "s = amax(block) / 448 rounded to bf16; "
                        "fp8 = float8_e4m3fn(clamp(w / s, -448, 448))",
        "reference_base": "build_model's model with each quantised weight replaced by "
                          "fp8[r, c] * s[r // BR, c // BC] (exact in fp32 with bf16 scales); "
                          "written as model/ for the reference and removed afterwards",
    }
    if "keep" in spec:
        fp8_base["modules_to_not_convert"] = list(spec["keep"])
        fp8_base["quantised"] += "; not those modules_to_not_convert keeps (bf16)"
    prov["fp8_base"] = fp8_base
    with open(os.path.join(outdir, "provenance.json"), "w") as f:
        f.write(mg.dumps(prov))


def generate(base, golden, log, names=None):
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(base, exist_ok=True)
    plain_load = mlg.load_base
    saved = [cls.forward for cls in mlg.NORMS]
    for cls in mlg.NORMS:
        cls.forward = mlg.rms_norm_forward
    try:
        for name, case in CASES.items():
            if names and name not in names:
                continue
            outdir = os.path.join(base, name)
            model_dir = os.path.join(base, name + "-model")
            log("case %s: FP8 base -> %s" % (name, model_dir))
            deq = make_fp8_model(case, golden, model_dir, log)

            def dequantised_base(golden_dir, base_name, dtype, deq=deq, name=name):
                model = plain_load(golden_dir, base_name, torch.float64)
                state = model.state_dict()
                with torch.no_grad():
                    for n, w in deq.items():
                        state[n].copy_(w)
                model.name_or_path = os.path.join(FP8_REL, name + "-model")
                model.config._name_or_path = model.name_or_path
                model.to(dtype)
                return model

            mlg.load_base = dequantised_base
            torch.set_default_dtype(torch.float64)
            try:
                mlg.make_case(name, case, golden, outdir, log)
            finally:
                torch.set_default_dtype(torch.float32)
                mlg.load_base = plain_load
            with open(os.path.join(outdir, "provenance.json")) as f:
                prov = json.load(f)
            prov["generator"] = "tools/make_fp8_lora_golden.py (tools/make_lora_golden.py's " \
                                "make_case on the dequantised base)"
            prov["fp8_base"] = {
                "model": "../%s-model (config.json, model.safetensors)" % name,
                "weight_block_size": case["block"], "scale_dtype": case["scale_dtype"],
                "quantised": "model.layers.*.{%s}.weight" % ",".join(PROJS),
                "quantisation": "s = amax(block) / 448 rounded to the scale dtype; "
                                "fp8 = float8_e4m3fn(clamp(w / s, -448, 448))",
                "reference_base": "the fp32 base with each quantised weight replaced by "
                                  "fp8[r, c] * s[r // BR, c // BC] in float64",
            }
            if "keep" in case:
                prov["fp8_base"]["modules_to_not_convert"] = list(case["keep"])
                prov["fp8_base"]["quantised"] += "; not those modules_to_not_convert " \
                                                 "keeps (bf16)"
            with open(os.path.join(outdir, "provenance.json"), "w") as f:
                f.write(mg.dumps(prov))
    finally:
        for cls, fwd in zip(mlg.NORMS, saved):
            cls.forward = fwd
    for name, spec in MOE_CASES.items():
        if not names or name in names:
            make_moe_case(name, spec, base, log)
    mg.write_files_mk(base, FP8_REL, "tools/make_fp8_lora_golden.py: the FP8-base LoRA "
                                     "fixtures")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, FP8_REL))
    ap.add_argument("--golden", default=os.path.join(ROOT, mg.GOLDEN_REL),
                    help="where the base cases (model, data, args) are read from")
    ap.add_argument("--check-only", action="store_true",
                    help="regenerate into a temporary directory and compare with --out")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--cases", help="comma-separated cases to (re)write; default: all")
    a = ap.parse_args()
    names = mg.parse_cases(ap, a, dict(CASES, **MOE_CASES))
    log = (lambda s: None) if a.quiet else (lambda s: print(s, flush=True))
    return mg.write_or_check(a, lambda out, n: generate(out, a.golden, log, n), names, log)


if __name__ == "__main__":
    sys.exit(main())
