#!/usr/bin/env python3
"""Checks a roundpipe LoRA run against PEFT (issue 13): the adapter
directory loads with PeftModel.from_pretrained on the base, and its logits
on a batch equal those of roundpipe's merged model (--save-merged, loaded
with transformers) within 1e-5, in fp32.

  lora_peft_check.py BASE_DIR ADAPTER_DIR MERGED_DIR DATA.npy SEQ_LEN [-- ...]

Several checks in one process (the imports take seconds): their argument
lists separated by "--", each said in a line of its own, "ok ADAPTER_DIR"
or "FAILED ADAPTER_DIR: why".
Exit 0: equal (every check); 1: not; 77: torch, transformers or peft
missing (skip)."""
import sys

from check_runs import run_checks

try:
    import numpy as np
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
except ImportError as e:  # the test skips with this message
    print(f"skip: {e}")
    sys.exit(77)


def check(args):
    """None when the adapter gives the merged model's logits, else why not."""
    base_dir, adapter_dir, merged_dir, data, seq = args
    seq = int(seq)
    tokens = np.load(data).astype(np.int64)[: 2 * seq].reshape(2, seq)
    ids = torch.from_numpy(tokens)
    base = AutoModelForCausalLM.from_pretrained(base_dir).float()
    peft = PeftModel.from_pretrained(base, adapter_dir).eval()
    merged = AutoModelForCausalLM.from_pretrained(merged_dir).float().eval()
    with torch.no_grad():
        a = peft(ids).logits
        b = merged(ids).logits
    diff = (a - b).abs().max().item()
    scale = a.abs().max().item()
    print(f"PEFT adapter vs merged model: max |logit diff| {diff:.3e} (largest logit {scale:.3f})")
    return None if diff <= 1e-5 * max(1.0, scale) else "logits differ by more than 1e-5"


sys.exit(run_checks(check, lambda args: args[1] if len(args) > 1 else "?"))
