#!/usr/bin/env python3
"""Generate the LoRA parity fixtures in mpi-tests/fixtures/golden-lora/.

Each case is a LoRA fine-tuning run computed with PEFT on transformers in
float64, on the model and data of a case of tools/make_golden.py
(mpi-tests/fixtures/golden/<base>/, named in inputs.txt, not copied), that
`roundpipe train --lora-rank R ... --lora-init <case>/lora_init` must
reproduce (issue 13, "Parity with PEFT on transformers in float64").

The training contract is make_golden.py's (sample order with wrap-around,
microbatch split, loss = counted-target cross-entropy sum / counted targets
of the step, gradients accumulated microbatch by microbatch, AdamW, lr
schedule; its helpers are imported, not copied), with these LoRA points:
  * every targeted projection computes y = W x (+ bias) + s * B (A x), with
    s = alpha / r, or alpha / sqrt(r) with use_rslora; lora_dropout 0;
    W, its bias and every other base weight are frozen (no update, no decay);
  * only the adapter tensors A [r, in] and B [out, r] are trained;
    grad_norm is the global L2 norm of the adapter gradients before
    clipping, clipping is over the adapter gradients, and AdamW decays A
    and B (both 2-D) with the base case's weight decay;
  * the run starts from lora_init/, an adapter with non-zero A and B drawn
    in fp32 (normal * 0.1 from a seeded torch.Generator), saved with
    PeftModel.save_pretrained; training loads exactly that directory with
    PeftModel.from_pretrained on the fp32 base cast to float64;
  * final/ is the trained adapter saved by PeftModel.save_pretrained after
    casting the model to fp32 (the float64 values rounded to nearest).

Float64 throughout: attention is transformers' "sdpa" (the "eager" one takes
the softmax in float32) and the RMSNorm forward is replaced, in this process
only, by one that computes in float64 for float64 inputs (transformers'
always computes in float32).  Only the RoPE cos/sin tables stay as
transformers makes them (float32, then widened): constants, not a function
of the trained weights.  Compared with make_golden.py's "eager" float64
cases this moves the step-1 loss by about 5e-9 relative, and it is what lets
the finite-difference check below agree to 1e-9.

Before writing a case it checks PEFT's step-1 loss and adapter gradients
against a LoRA written out here (a wrapper y = base(x) + s * B(A x) on each
targeted nn.Linear of a plain transformers model) and against central finite
differences of the step-1 loss; afterwards it reloads final/ with
PeftModel.from_pretrained and compares the tensors.

Single-threaded, fixed seeds, PYTHONHASHSEED=0 (PEFT writes target_modules
from a set; the script re-executes itself with it set): two runs write
byte-identical files.  Run from anywhere:  python3 tools/make_lora_golden.py
(--check-only recomputes into a temporary directory and compares sha256 sums).
"""

import os
import sys

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    # PEFT stores target_modules as a set and saves list(set): the order of
    # the names in adapter_config.json depends on the string hash seed.
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

import argparse
import math
import shutil
import tempfile

import numpy as np
import peft
import safetensors
import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM
from transformers.models.llama import modeling_llama
from transformers.models.qwen3 import modeling_qwen3

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402  (contract helpers: batches, loss, lr)

ROOT = mg.ROOT
GOLDEN_REL = mg.GOLDEN_REL
LORA_REL = os.path.join("mpi-tests", "fixtures", "golden-lora")
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
INIT_STD = 0.1
KEY_PREFIX = "base_model.model."

# ---------------------------------------------------------------------------
# The cases.  "targets" is what LoraConfig(target_modules=...) is given:
#  - "all-linear" is PEFT's shorthand; on these tiny models (fewer than 20
#    targeted modules) PEFT writes every full module path into
#    adapter_config.json's target_modules ("model.layers.0.self_attn.q_proj",
#    ...), so --lora-init meets that form;
#  - a list of projection names is written as those names (the common form).
# The train options are the base case's args.txt, except those in "train":
# the adapter gradients' norm is smaller than the full model's, so the qwen3
# cases lower --grad-clip (4.0 there) to a value that some steps' norms
# exceed and others do not.  The LoRA options follow (lora_args());
# --lora-init <case dir>/lora_init is added by the test.
# ---------------------------------------------------------------------------
CASES = {
    # tied embeddings, loss mask (steps 2 and 4 have a microbatch with no
    # counted target), clipping on the adapter gradients (steps 2 and 4)
    "qwen3-all": {
        "base": "qwen3", "r": 4, "alpha": 8, "rslora": False,
        "targets": "all-linear", "init_seed": 3001, "train": {"grad-clip": "2.5"},
    },
    "qwen3-qv-rslora": {
        "base": "qwen3", "r": 2, "alpha": 4, "rslora": True,
        "targets": ["q_proj", "v_proj"], "init_seed": 3002, "train": {"grad-clip": "1.2"},
    },
    # untied, attention biases, llama3 RoPE scaling; no clipping
    "llama-all": {
        "base": "llama", "r": 4, "alpha": 4, "rslora": False,
        "targets": list(ALL_LINEAR), "init_seed": 3003,
    },
}


def target_names(case):
    return ALL_LINEAR if case["targets"] == "all-linear" else case["targets"]


def scaling(case):
    r, a = case["r"], case["alpha"]
    return a / math.sqrt(r) if case["rslora"] else a / r


def lora_args(case):
    args = ["--lora-rank %d" % case["r"], "--lora-alpha %d" % case["alpha"]]
    if sorted(target_names(case)) != sorted(ALL_LINEAR):
        args.append("--lora-targets %s" % ",".join(target_names(case)))
    if case["rslora"]:
        args.append("--use-rslora")
    return " ".join(args)


def read_train_args(path):
    """The base case's args.txt as an ordered dict (the train options)."""
    with open(path) as f:
        words = f.read().split()
    tr = {}
    i = 0
    while i < len(words):
        assert words[i].startswith("--"), words[i]
        tr[words[i][2:]] = words[i + 1]
        i += 2
    return tr


def rms_norm_forward(self, hidden_states):
    """transformers' Qwen3/Llama RMSNorm, computed in float32 or in the
    input's dtype when that is wider: the original always computes in
    float32, which in a float64 model rounds every normalised activation to
    fp32 (about 1e-8 relative on the loss, but enough noise to swamp a
    finite difference).  Identical to the original for fp32/bf16 inputs."""
    dtype = hidden_states.dtype
    h = hidden_states.to(torch.promote_types(dtype, torch.float32))
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
    return self.weight * h.to(dtype)


NORMS = [modeling_qwen3.Qwen3RMSNorm, modeling_llama.LlamaRMSNorm]


def load_base(golden, base, dtype):
    """The base case's model/ as transformers loads it (fp32 on disk), in
    dtype, with a path-independent name (PEFT writes it into the config as
    base_model_name_or_path).  Attention is "sdpa" (on the CPU in float64 it
    computes in float64; "eager" takes the softmax in float32)."""
    model = AutoModelForCausalLM.from_pretrained(
        os.path.join(golden, base, "model"), dtype=torch.float32, attn_implementation="sdpa")
    assert all(type(m).forward is rms_norm_forward for m in model.modules()
               if type(m).__name__.endswith("RMSNorm"))
    model.name_or_path = os.path.join(GOLDEN_REL, base, "model")  # from the source root
    model.config._name_or_path = model.name_or_path
    model.to(dtype)
    model.train()
    return model


def lora_config(case):
    return LoraConfig(
        r=case["r"], lora_alpha=case["alpha"], use_rslora=case["rslora"],
        target_modules=case["targets"], lora_dropout=0.0, bias="none",
        task_type="CAUSAL_LM")


def saved_key(param_name):
    """PEFT parameter name -> the key save_pretrained writes."""
    return param_name.replace(".default.weight", ".weight")


def adapter_params(model):
    out = [(saved_key(n), p) for n, p in model.named_parameters() if p.requires_grad]
    for n, _ in out:
        assert n.startswith(KEY_PREFIX) and (".lora_A." in n or ".lora_B." in n), n
    return out


def save_adapter(model, dst):
    """PeftModel.save_pretrained, keeping adapter_config.json and
    adapter_model.safetensors (not the README.md model card)."""
    with tempfile.TemporaryDirectory() as tmp:
        # save_embedding_layers False: no embedding is targeted, and "auto"
        # would look for the base's config.json at base_model_name_or_path
        model.save_pretrained(tmp, save_embedding_layers=False)
        os.makedirs(dst, exist_ok=True)
        for f in ("adapter_config.json", "adapter_model.safetensors"):
            shutil.copyfile(os.path.join(tmp, f), os.path.join(dst, f))


def make_init(case, golden, dst, log):
    """lora_init/: PEFT's adapter on the fp32 base, A and B overwritten with
    fp32 normal * 0.1 draws in named_parameters order, saved by PEFT."""
    model = get_peft_model(load_base(golden, case["base"], torch.float32), lora_config(case))
    g = torch.Generator().manual_seed(case["init_seed"])
    params = adapter_params(model)
    with torch.no_grad():
        for _, p in params:
            assert p.dtype == torch.float32
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float32) * INIT_STD)
    save_adapter(model, dst)
    init = {n: p.detach().clone() for n, p in params}
    names = sorted({n.split(".lora_")[0].rsplit(".", 1)[1] for n in init})
    assert names == sorted(target_names(case)), names
    layers = model.base_model.model.config.num_hidden_layers
    assert len(init) == 2 * layers * len(names), len(init)
    log("  lora_init: %d tensors (%d projections x %d layers, A and B), r %d, alpha %d, "
        "scaling %.6g" % (len(init), len(names), layers, case["r"], case["alpha"], scaling(case)))
    return init


def train(model, params, tokens, mask, tr, log):
    """make_golden.train's loop on the adapter tensors only."""
    wd = float(tr["weight-decay"])
    plist = [p for _, p in params]
    assert all(p.ndim == 2 for p in plist)
    opt = torch.optim.AdamW(
        [{"params": plist, "weight_decay": wd}], lr=float(tr["lr"]),
        betas=(float(tr["beta1"]), float(tr["beta2"])), eps=float(tr["eps"]), foreach=False)
    clip = float(tr["grad-clip"])
    frozen = [p for p in model.parameters() if not p.requires_grad]
    assert frozen and all(p.grad is None for p in frozen)
    records, grads1 = [], None
    model.train()
    for k in range(1, int(tr["steps"]) + 1):
        idx, mbs = mg.step_batches(k, tokens, mask, tr)
        count = sum(float(mb[2].sum()) for mb in mbs)
        assert count > 0, "a step with no counted target is not modelled here"
        opt.zero_grad(set_to_none=True)
        lr = mg.lr_at(k, tr)
        total = 0.0
        for mb in mbs:
            s = mg.ce_sum(model, *mb)
            (s / count).backward()
            total += s.item()
        if k == 1:
            grads1 = {n: p.grad.detach().clone() for n, p in params}
        if clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(plist, clip)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in plist])
        for grp in opt.param_groups:
            grp["lr"] = lr
        opt.step()
        assert all(p.grad is None for p in frozen)
        rec = {"step": k, "loss": total / count, "lr": lr, "grad_norm": float(norm),
               "tokens": int(count)}
        records.append(rec)
        log("  step %d samples %s tokens %3d loss %.9f lr %.6g grad_norm %.9f%s" % (
            k, idx, count, rec["loss"], lr, rec["grad_norm"],
            " (clipped)" if clip > 0 and rec["grad_norm"] > clip else ""))
    return records, grads1


class HandLoRA(torch.nn.Module):
    """y = base(x) + s * B (A x), written out for the independent check."""

    def __init__(self, base, a, b, s):
        super().__init__()
        self.base, self.a, self.b, self.s = base, a, b, s

    def forward(self, x):
        return self.base(x) + self.s * ((x @ self.a.t()) @ self.b.t())


def independent_check(case, golden, init_dir, tokens, mask, tr, loss1, grads1, norm1, log):
    """Step 1 again without PEFT: the base model with HandLoRA wrappers on
    the modules named by lora_init's keys, A and B read from the file, the
    scaling from the case.  Loss, every adapter gradient and the gradient
    norm against PEFT's; two entries against central finite differences."""
    model = load_base(golden, case["base"], torch.float64)
    for p in model.parameters():
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
        mod = model.get_submodule(parent)
        lin = getattr(mod, name)
        assert isinstance(lin, torch.nn.Linear)
        assert a.shape == (case["r"], lin.in_features) and b.shape == (lin.out_features, case["r"])
        setattr(mod, name, HandLoRA(lin, a, b, scaling(case)))
        leaves[key] = a
        leaves[key.replace(".lora_A.", ".lora_B.")] = b
    assert sorted(leaves) == sorted(grads1), "adapter keys differ"
    _, mbs = mg.step_batches(1, tokens, mask, tr)
    count = sum(float(mb[2].sum()) for mb in mbs)

    def step1_loss():
        return sum(float(mg.ce_sum(model, *mb)) for mb in mbs) / count

    total = 0.0
    for mb in mbs:
        s = mg.ce_sum(model, *mb)
        (s / count).backward()
        total += s.item()
    hand_loss = total / count
    loss_rel = abs(hand_loss - loss1) / abs(loss1)
    grad_rel = 0.0
    for key, leaf in leaves.items():
        ref = grads1[key]
        grad_rel = max(grad_rel, float((leaf.grad - ref).abs().max() / ref.abs().max()))
    hand_norm = float(torch.nn.utils.get_total_norm([leaf.grad for leaf in leaves.values()]))
    norm_rel = abs(hand_norm - norm1) / norm1
    # finite differences: the largest-gradient entry of the first layer's
    # first targeted A and of the last layer's last targeted B
    a_keys = [k for k in leaves if ".lora_A." in k]
    b_keys = [k for k in leaves if ".lora_B." in k]
    fd = []
    h = 1e-5
    with torch.no_grad():
        for key in (a_keys[0], b_keys[-1]):
            leaf, g = leaves[key], grads1[key]
            j = int(g.abs().argmax())
            flat = leaf.view(-1)
            old = float(flat[j])
            flat[j] = old + h
            lp = step1_loss()
            flat[j] = old - h
            lm = step1_loss()
            flat[j] = old
            num = (lp - lm) / (2 * h)
            pos = tuple(int(i) for i in np.unravel_index(j, tuple(g.shape)))
            ref = float(g.view(-1)[j])
            fd.append((key, pos, ref, num, abs(num - ref) / abs(ref)))
    log("  independent check, step 1 (hand-written LoRA, float64): loss %.15g vs PEFT %.15g "
        "(rel %.1e); adapter gradients max rel %.1e (per tensor, to its largest entry); "
        "grad_norm %.15g vs %.15g (rel %.1e)"
        % (hand_loss, loss1, loss_rel, grad_rel, hand_norm, norm1, norm_rel))
    for key, pos, g, num, rel in fd:
        log("  finite difference (h %g) %s%s: PEFT %.12g, numeric %.12g (rel %.1e)"
            % (h, key[len(KEY_PREFIX):], list(pos), g, num, rel))
    assert loss_rel < 1e-12 and grad_rel < 1e-10 and norm_rel < 1e-12, (loss_rel, grad_rel,
                                                                          norm_rel)
    assert all(f[4] < 1e-6 for f in fd), fd
    return {"loss_rel": loss_rel, "grad_max_rel": grad_rel, "grad_norm_rel": norm_rel,
            "finite_differences": [{"key": f[0], "index": list(f[1]), "peft": f[2],
                                    "numeric": f[3], "rel": f[4]} for f in fd]}


def make_case(name, case, golden, outdir, log):
    log("case %s (base %s) -> %s" % (name, case["base"], outdir))
    if os.path.isdir(outdir):
        shutil.rmtree(outdir)
    os.makedirs(outdir)
    indir = os.path.join(golden, case["base"])
    tr = read_train_args(os.path.join(indir, "args.txt"))
    for k, v in case.get("train", {}).items():
        assert k in tr, k
        tr[k] = v
    tokens = np.load(os.path.join(indir, "data.npy"))
    mask_path = os.path.join(indir, "mask.npy")
    mask = np.load(mask_path) if os.path.exists(mask_path) else None
    with open(os.path.join(outdir, "inputs.txt"), "w") as f:
        f.write("../golden/%s\n" % case["base"])
    with open(os.path.join(outdir, "args.txt"), "w") as f:
        f.write(mg.args_line(tr) + " " + lora_args(case) + "\n")

    init_dir = os.path.join(outdir, "lora_init")
    init = make_init(case, golden, init_dir, log)

    # The run: the fp32 base in float64, lora_init/ loaded by PEFT.
    base = load_base(golden, case["base"], torch.float64)
    model = PeftModel.from_pretrained(base, init_dir, is_trainable=True)
    params = adapter_params(model)
    assert sorted(n for n, _ in params) == sorted(init)
    for n, p in params:
        assert p.dtype == torch.float64 and torch.equal(p.detach(), init[n].double()), n
    assert model.base_model.model.config.tie_word_embeddings == (case["base"] == "qwen3")
    mod = model.get_submodule(params[0][0][:-len(".lora_A.weight")])
    assert mod.scaling["default"] == scaling(case), (mod.scaling, scaling(case))
    records, grads1 = train(model, params, tokens, mask, tr, log)
    with open(os.path.join(outdir, "expected.jsonl"), "w") as f:
        for r in records:
            f.write(mg.dumps(r))
    clipped = [r["step"] for r in records
               if float(tr["grad-clip"]) > 0 and r["grad_norm"] > float(tr["grad-clip"])]

    check = independent_check(case, golden, init_dir, tokens, mask, tr, records[0]["loss"],
                              grads1, records[0]["grad_norm"], log)

    trained = {n: p.detach().clone() for n, p in params}
    model.to(torch.float32)
    save_adapter(model, os.path.join(outdir, "final"))
    # reload: PEFT on the fp32 base gives the trained tensors rounded to fp32
    loaded = PeftModel.from_pretrained(load_base(golden, case["base"], torch.float32),
                                       os.path.join(outdir, "final"))
    got = {saved_key(n): p for n, p in loaded.named_parameters() if ".lora_" in n}
    assert sorted(got) == sorted(trained)
    moved = 0.0
    for n, p in got.items():
        assert p.dtype == torch.float32 and torch.equal(p, trained[n].to(torch.float32)), n
        moved = max(moved, float((trained[n] - init[n].double()).abs().max()))
    log("  final adapter reloaded by PEFT: equal to the trained float64 tensors rounded to fp32;"
        " largest change from lora_init %.3g" % moved)

    with open(os.path.join(outdir, "provenance.json"), "w") as f:
        f.write(mg.dumps({
            "base": "../golden/%s (model/, data.npy%s, args.txt; tools/make_golden.py)"
                    % (case["base"], ", mask.npy" if mask is not None else ""),
            "base_sha256": {p: mg.sha256(os.path.join(indir, p)) for p in
                            ["model/model.safetensors", "data.npy"]
                            + (["mask.npy"] if mask is not None else [])},
            "train_overrides": case.get("train", {}),
            "lora": {"r": case["r"], "lora_alpha": case["alpha"], "use_rslora": case["rslora"],
                     "scaling": scaling(case), "target_modules (LoraConfig)": case["targets"],
                     "lora_dropout": 0.0, "bias": "none"},
            "lora_init": "get_peft_model on the fp32 base, then every lora_A/lora_B weight "
                         "(named_parameters order) set to torch.randn(shape, "
                         "generator=torch.Generator().manual_seed(%d), dtype=float32) * %g; "
                         "PeftModel.save_pretrained" % (case["init_seed"], INIT_STD),
            "training": "PeftModel.from_pretrained(lora_init, is_trainable=True) on the base in "
                        "float64; adapter tensors only: grad_norm and clipping over them, "
                        "torch.optim.AdamW(weight_decay on all, foreach=False); "
                        "make_golden.py's batches, loss and lr schedule",
            "final": "model cast to float32, PeftModel.save_pretrained (adapter_config.json, "
                     "adapter_model.safetensors)",
            "clipped_steps": clipped,
            "independent_check_step1": check,
            "generator": "tools/make_lora_golden.py",
            "torch": torch.__version__.split("+")[0],
            "transformers": transformers.__version__,
            "peft": peft.__version__,
            "safetensors": safetensors.__version__,
        }))


def generate(base, golden, log, names=None):
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(base, exist_ok=True)
    saved = [cls.forward for cls in NORMS]
    for cls in NORMS:
        cls.forward = rms_norm_forward
    try:
        for name, case in CASES.items():
            if names and name not in names:
                continue
            torch.set_default_dtype(torch.float64)  # the counted-target weights of step_batches
            try:
                make_case(name, case, golden, os.path.join(base, name), log)
            finally:
                torch.set_default_dtype(torch.float32)
    finally:
        for cls, fwd in zip(NORMS, saved):
            cls.forward = fwd
    mg.write_files_mk(base, LORA_REL, "tools/make_lora_golden.py: the LoRA fixtures")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, LORA_REL))
    ap.add_argument("--golden", default=os.path.join(ROOT, GOLDEN_REL),
                    help="where the base cases (model, data, args) are read from")
    ap.add_argument("--check-only", action="store_true",
                    help="regenerate into a temporary directory and compare with --out")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--cases", help="comma-separated cases to (re)write; default: all")
    a = ap.parse_args()
    names = mg.parse_cases(ap, a, CASES)
    log = (lambda s: None) if a.quiet else (lambda s: print(s, flush=True))
    return mg.write_or_check(a, lambda out, n: generate(out, a.golden, log, n), names, log)


if __name__ == "__main__":
    sys.exit(main())
