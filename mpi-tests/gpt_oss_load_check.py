#!/usr/bin/env python3
"""Exit 0 when transformers' GptOssForCausalLM loads the model directory
argv[1] (what roundpipe saved) to exactly the tensors of its
model.safetensors (fused experts, no quantization), 1 when not, 77 when
Python lacks torch, safetensors or transformers."""
import sys

try:
    import torch
    from safetensors.torch import load_file
    from transformers import GptOssForCausalLM
except ImportError:
    sys.exit(77)

d = sys.argv[1]
model = GptOssForCausalLM.from_pretrained(d, dtype=torch.float32)
saved = load_file(d + "/model.safetensors")
params = dict(model.named_parameters())
ok = sorted(params) == sorted(saved) and all(torch.equal(params[n], saved[n]) for n in saved)
sys.exit(0 if ok else 1)
