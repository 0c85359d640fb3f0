#!/usr/bin/env python3
"""Checks a roundpipe LoRA run on a Qwen3-MoE model against PEFT (issue
15): the adapter directory (router and per-expert adapters) loads with
PeftModel.from_pretrained on the base written out with one nn.Linear per
expert projection (tools/make_moe_golden.py's load_per_expert, the model
PEFT adapted for the moe-lora fixture), and its logits on a batch equal
those of roundpipe's merged model (--save-merged, loaded the same way)
within 1e-5, in fp32.

  lora_moe_peft_check.py SRCDIR BASE_DIR ADAPTER_DIR MERGED_DIR DATA.npy SEQ_LEN

Exit 0: equal; 1: not; 77: torch, transformers or peft missing (skip)."""
import os
import sys

try:
    import numpy as np
    import torch
    from peft import PeftModel

    sys.path.insert(0, os.path.join(sys.argv[1], "tools"))
    import make_moe_golden as mm
except ImportError as e:  # the test skips with this message
    print(f"skip: {e}")
    sys.exit(77)


def main():
    base_dir, adapter_dir, merged_dir, data, seq = sys.argv[2:7]
    seq = int(seq)
    torch.set_num_threads(1)
    tokens = np.load(data).astype(np.int64)[: 2 * seq].reshape(2, seq)
    ids = torch.from_numpy(tokens)
    base = mm.load_per_expert(base_dir, torch.float32)
    peft = PeftModel.from_pretrained(base, adapter_dir).eval()
    merged = mm.load_per_expert(merged_dir, torch.float32).eval()
    with torch.no_grad():
        a = peft(input_ids=ids).logits
        b = merged(input_ids=ids).logits
        c = mm.load_per_expert(base_dir, torch.float32).eval()(input_ids=ids).logits
    diff = (a - b).abs().max().item()
    moved = (a - c).abs().max().item()
    scale = a.abs().max().item()
    print(f"PEFT adapter vs merged MoE model: max |logit diff| {diff:.3e} (largest logit "
          f"{scale:.3f}; the adapter moves them by {moved:.3e})")
    return 0 if diff <= 1e-5 * max(1.0, scale) and moved > 1e-3 else 1


sys.exit(main())
