#!/usr/bin/env python3
"""Writes mpi-tests/model_hf_fixture.h: tiny Llama and Qwen3 models run by
Hugging Face transformers in float64 (forward, summed next-token
cross-entropy with masked targets, backward), for test_model_hf.c.

Two variants: llama with attention_bias and llama3 rope scaling, untied;
qwen3 with q/k norms, GQA, head_dim*heads != hidden, tied embeddings. And
both again with documents packed into the sequences (SEGMENTS): there
transformers runs every document as a sequence of its own (positions from
0) and the loss and gradients are the sums over them; the packed sequence's
target that would predict a document's first token is masked.
Parameters are not stored: both sides compute them with a splitmix64
hash (hash_uniform). Outputs and gradients are written with 7 digits."""
import sys

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

NSEQ, S = 2, 7
M64 = (1 << 64) - 1
# document starts in each sequence of the packed variants: sequence 0 has
# [0, 3), a one-token document [3, 4) and [4, 7); sequence 1 [0, 5), [5, 7)
SEGMENTS = [[0, 3, 4], [0, 5]]


def hash_uniform(seed, k, i):
    """splitmix64 of (seed, tensor index, element) -> uniform in [-1, 1) with
    24 bits, exact in fp32; test_model_hf.c computes the same numbers."""
    z = (seed * 0x9E3779B97F4A7C15 + k * 0xBF58476D1CE4E5B9 + i * 0x94D049BB133111EB) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    z ^= z >> 31
    return ((z >> 40) / float(1 << 24)) * 2.0 - 1.0


def variant(name, model, cfg, seed, segments=None):
    torch.manual_seed(seed)
    model = model.double()
    with torch.no_grad():
        for k, (n, p) in enumerate(model.named_parameters()):
            u = torch.tensor([hash_uniform(seed, k, i) for i in range(p.numel())],
                             dtype=torch.float64).reshape(p.shape)
            if p.ndim == 2:
                p.copy_(0.5 * u)
            elif n.endswith("bias"):
                p.copy_(0.3 * u)
            else:
                p.copy_(1.0 + 0.3 * u)
            p.copy_(p.float().double())  # the C side computes the same floats
    V = cfg.vocab_size
    tokens = torch.randint(0, V, (NSEQ, S))
    labels = tokens.clone()
    labels[0, 3] = -100
    labels[1, 5] = -100
    acts = {}
    model.model.layers[0].register_forward_hook(
        lambda m, i, o: acts.__setitem__("y0", (o[0] if isinstance(o, tuple) else o).detach()))
    # targets per position: next token, masked where HF ignores it
    targets = torch.zeros(NSEQ, S, dtype=torch.int64)
    mask = torch.zeros(NSEQ, S, dtype=torch.int64)
    targets[:, :-1] = labels[:, 1:].clamp(min=0)
    mask[:, :-1] = (labels[:, 1:] != -100).long()
    if segments is None:
        out = model(input_ids=tokens)
        logits = out.logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1),
                               ignore_index=-100, reduction="sum")
    else:  # every document a sequence of its own; layer 0's outputs put back in place
        loss, y0 = 0.0, torch.zeros(NSEQ, S, cfg.hidden_size, dtype=torch.float64)
        for b in range(NSEQ):
            cuts = segments[b] + [S]
            for a, z in zip(cuts[:-1], cuts[1:]):
                logits = model(input_ids=tokens[b:b + 1, a:z]).logits
                y0[b, a:z] = acts["y0"][0]
                if z - a > 1:
                    loss = loss + F.cross_entropy(logits[0, :-1], labels[b, a + 1:z],
                                                  ignore_index=-100, reduction="sum")
                mask[b, z - 1] = 0  # predicts the next document's first token (or nothing)
        acts["y0"] = y0
    loss.backward()
    lines = []
    w = lines.append
    w(f"static const int32_t {name}_tokens[] = {{{', '.join(str(int(t)) for t in tokens.flatten())}}};")
    w(f"static const int32_t {name}_targets[] = {{{', '.join(str(int(t)) for t in targets.flatten())}}};")
    w(f"static const uint8_t {name}_mask[] = {{{', '.join(str(int(t)) for t in mask.flatten())}}};")
    w(f"static const double {name}_loss_sum = {loss.item():.17g};")

    def arr(n, t):
        vals = ",".join(f"{v:.7g}" for v in t.detach().flatten().tolist())
        w(f"static const float {name}_{n}[] = {{{vals}}};")

    arr("y0", acts["y0"])
    tensors = []
    for i, (n, p) in enumerate(model.named_parameters()):
        arr(f"g{i}", p.grad)
        tensors.append((n, i, p.numel()))
    w(f"static const fixture_tensor {name}_tensors[] = {{")
    for n, i, numel in tensors:
        w(f'    {{"{n}", {i}, {name}_g{i}, {numel}}},')
    w("};")
    return "\n".join(lines)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "model_hf_fixture.h"
    llama_cfg = LlamaConfig(hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                            num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                            vocab_size=37, rms_norm_eps=1e-5, attention_bias=True,
                            tie_word_embeddings=False, max_position_embeddings=128,
                            rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0,
                                             "factor": 8.0, "low_freq_factor": 1.0,
                                             "high_freq_factor": 4.0,
                                             "original_max_position_embeddings": 64})
    qwen_cfg = Qwen3Config(hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                           vocab_size=37, rms_norm_eps=1e-6, attention_bias=False,
                           tie_word_embeddings=True, max_position_embeddings=128,
                           rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    parts = [
        "/* Generated by mpi-tests/gen_model_hf_fixture.py (transformers, float64). */",
        "#include <stdint.h>",
        "typedef struct fixture_tensor { const char *name; int index; const float *g; long numel; } fixture_tensor;",
        variant("llama", LlamaForCausalLM(llama_cfg), llama_cfg, 1),
        variant("qwen", Qwen3ForCausalLM(qwen_cfg), qwen_cfg, 2),
        variant("llama_packed", LlamaForCausalLM(llama_cfg), llama_cfg, 3, SEGMENTS),
        variant("qwen_packed", Qwen3ForCausalLM(qwen_cfg), qwen_cfg, 4, SEGMENTS),
    ]
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
