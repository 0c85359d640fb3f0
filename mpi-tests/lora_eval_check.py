#!/usr/bin/env python3
"""The validation loss of a PEFT adapter on its base (issue 13), as an
independent reference for roundpipe's --eval-data with LoRA: the base and
the adapter loaded with transformers and PeftModel.from_pretrained, in
float64, in inference mode (no dropout); the mean cross-entropy of every
counted target of the first SAMPLES samples of DATA.npy, sample i being
tokens [i*SEQ_LEN, i*SEQ_LEN + SEQ_LEN] (inputs, then the targets shifted
by one), a target counted when MASK.npy (if given, "-" for none) has 1 at
its position.

  lora_eval_check.py BASE_DIR ADAPTER_DIR DATA.npy SEQ_LEN SAMPLES MASK.npy|-

Prints the loss (17 digits). Exit 0: done; 77: numpy, torch, transformers
or peft missing (skip)."""
import sys

try:
    import numpy as np
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
except ImportError as e:  # the test skips with this message
    print(f"skip: {e}")
    sys.exit(77)


def main():
    base_dir, adapter_dir, data, seq, samples, mask = sys.argv[1:7]
    seq, samples = int(seq), int(samples)
    tokens = np.load(data).astype(np.int64)
    counted = np.load(mask) == 1 if mask != "-" else np.ones(len(tokens), dtype=bool)
    base = AutoModelForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float64)
    model = PeftModel.from_pretrained(base, adapter_dir).double().eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(samples):
            a = i * seq
            ids = torch.from_numpy(tokens[a : a + seq]).unsqueeze(0)
            tgt = torch.from_numpy(tokens[a + 1 : a + seq + 1])
            keep = torch.from_numpy(counted[a + 1 : a + seq + 1])
            logp = torch.log_softmax(model(ids).logits[0].double(), dim=-1)
            nll = -logp[torch.arange(seq), tgt]
            total += nll[keep].sum().item()
            count += int(keep.sum().item())
    print(f"{total / count:.17g}")
    return 0


sys.exit(main())
