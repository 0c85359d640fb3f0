#!/usr/bin/env python3
"""Exit 0 when transformers' GptOssForCausalLM loads the model directory
argv[1] (what roundpipe saved: --save's or a checkpoint's) to exactly the
tensors of its model.safetensors (fused experts, no quantization), 1 when
not, 77 when Python lacks torch, safetensors or transformers.
With argv[2:5] = DATA.npy SEQ_LEN EVAL_LOSS: also the mean cross-entropy of
the loaded model's logits over every sample of DATA (roundpipe's samples:
tokens [i S, i S + S] for i < (len - 1) / S, every target counted) equals
roundpipe's eval_loss of the same weights within 1e-4 relative.
Several checks in one process (the imports take seconds): their argument
lists separated by "--", each said in a line of its own, "ok DIR" or
"FAILED DIR: why"; exit 0 when every one passes, else 1."""
import sys

from check_runs import run_checks

try:
    import numpy as np
    import torch
    from safetensors.torch import load_file
    from transformers import GptOssForCausalLM
except ImportError:
    sys.exit(77)


def check(args):
    """None when DIR (args[0]) passes, else why not."""
    d = args[0]
    model = GptOssForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    saved = load_file(d + "/model.safetensors")
    params = dict(model.named_parameters())
    if sorted(params) != sorted(saved) or not all(torch.equal(params[n], saved[n]) for n in saved):
        return "transformers' parameters differ from model.safetensors' tensors"
    if len(args) > 1:
        tokens = torch.from_numpy(np.load(args[1]).astype(np.int64))
        S, ours = int(args[2]), float(args[3])
        n = (len(tokens) - 1) // S
        inp = torch.stack([tokens[i * S:i * S + S] for i in range(n)])
        tgt = torch.stack([tokens[i * S + 1:i * S + S + 1] for i in range(n)])
        model.eval()
        with torch.no_grad():
            logits = model(input_ids=inp).logits.double()
        theirs = float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                         tgt.reshape(-1)))
        rel = abs(theirs - ours) / abs(theirs)
        print("transformers' cross-entropy of %s on %d samples: %.9g, roundpipe's eval_loss %.9g "
              "(relative difference %.2g)" % (d, n, theirs, ours, rel))
        if not rel <= 1e-4:
            return "the cross-entropy is not roundpipe's eval_loss within 1e-4 relative"
    return None


sys.exit(run_checks(check, lambda args: args[0]))
