#!/usr/bin/env python3
"""Write a random Qwen3-shaped model in bf16 safetensors (config.json and
model.safetensors) and a token file, for bench/lora/memory.sh.

numpy only: bf16 is written as the upper 16 bits of fp32 values rounded to
nearest even. Weights are N(0, 0.02) (norms 1), drawn tensor by tensor so
memory stays at one tensor's fp32 size.

usage: make_model.py OUT_DIR [--hidden H] [--layers L] [--intermediate I]
                             [--vocab V] [--tokens N]
"""
import argparse
import json
import os
import struct
import sys

import numpy as np


def bf16_bits(x):
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=20)
    ap.add_argument("--intermediate", type=int, default=6144)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--tokens", type=int, default=65536)
    a = ap.parse_args()
    H, I, V, hd = a.hidden, a.intermediate, a.vocab, a.head_dim
    QD, KD = a.heads * hd, a.kv_heads * hd
    shapes = [("model.embed_tokens.weight", (V, H))]
    for i in range(a.layers):
        p = f"model.layers.{i}."
        shapes += [(p + "input_layernorm.weight", (H,)),
                   (p + "self_attn.q_proj.weight", (QD, H)),
                   (p + "self_attn.k_proj.weight", (KD, H)),
                   (p + "self_attn.v_proj.weight", (KD, H)),
                   (p + "self_attn.o_proj.weight", (H, QD)),
                   (p + "self_attn.q_norm.weight", (hd,)),
                   (p + "self_attn.k_norm.weight", (hd,)),
                   (p + "post_attention_layernorm.weight", (H,)),
                   (p + "mlp.gate_proj.weight", (I, H)),
                   (p + "mlp.up_proj.weight", (I, H)),
                   (p + "mlp.down_proj.weight", (H, I))]
    shapes.append(("model.norm.weight", (H,)))
    header, at = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [at, at + n]}
        at += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(0)
    params = sum(int(np.prod(s)) for _, s in shapes)
    with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, shape in shapes:
            if len(shape) == 1:
                x = np.ones(shape, np.float32)
            else:
                x = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
            f.write(bf16_bits(x).tobytes())
    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": V,
           "hidden_size": H, "intermediate_size": I, "num_hidden_layers": a.layers,
           "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads, "head_dim": hd,
           "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
           "tie_word_embeddings": True, "attention_bias": False, "initializer_range": 0.02,
           "torch_dtype": "bfloat16"}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    np.save(os.path.join(a.out, "tokens.npy"),
            rng.integers(0, V, size=a.tokens, dtype=np.int64).astype(np.int32))
    print(f"{a.out}: {params / 1e9:.3f}B parameters, {at / 2**30:.2f} GiB of bf16 tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
