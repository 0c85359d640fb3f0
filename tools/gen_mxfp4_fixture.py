#!/usr/bin/env python3
"""Generate mpi-tests/fixtures/gpt-oss/mxfp4/model.safetensors: MXFP4 experts
as the Hub ships gpt-oss's, with transformers' own dequantisation of them.

Two projections of a 2-expert block in the Hub's layout,
  model.layers.0.mlp.experts.gate_up_proj_{blocks,scales}  out 6, in 64
  model.layers.0.mlp.experts.down_proj_{blocks,scales}     out 4, in 96
with every byte value among the blocks and scales spread over 110..144 plus
the edges 0, 1, 126, 127, 128 and 254 (255, E8M0's NaN, is left out: the C
decoder refuses it). Beside them, what transformers.integrations.mxfp4.
convert_moe_packed_tensors returns for each, the fused parameter [E, in,
out]:
  expected.<proj>        F32  (dtype=torch.float32)
  expected.<proj>.bf16   BF16 (its default dtype, bfloat16)
The C test (test_io_mxfp4.c) decodes the blocks and compares bit for bit.

Usage: python3 tools/gen_mxfp4_fixture.py mpi-tests/fixtures/gpt-oss/mxfp4/model.safetensors
"""
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers.integrations.mxfp4 import convert_moe_packed_tensors

PROJS = [("gate_up_proj", 2, 6, 64), ("down_proj", 2, 4, 96)]
EDGES = [0, 1, 126, 127, 128, 254]


def main(path):
    g = torch.Generator().manual_seed(35)
    tensors = {}
    for proj, experts, out, inp in PROJS:
        groups = inp // 32
        blocks = torch.randint(0, 256, (experts, out, groups, 16), generator=g, dtype=torch.int32)
        # every byte value appears at least once
        flat = blocks.view(-1)
        flat[:256] = torch.randperm(256, generator=g, dtype=torch.int32)
        blocks = blocks.to(torch.uint8)
        scales = torch.randint(110, 145, (experts, out, groups), generator=g, dtype=torch.int32)
        sf = scales.view(-1)
        sf[:len(EDGES)] = torch.tensor(EDGES, dtype=torch.int32)
        scales = scales.to(torch.uint8)
        name = "model.layers.0.mlp.experts." + proj
        tensors[name + "_blocks"] = blocks
        tensors[name + "_scales"] = scales
        f32 = convert_moe_packed_tensors(blocks.clone(), scales.clone(), dtype=torch.float32)
        b16 = convert_moe_packed_tensors(blocks.clone(), scales.clone())
        assert f32.shape == (experts, inp, out) and b16.dtype == torch.bfloat16
        tensors["expected." + proj] = f32.contiguous()
        tensors["expected." + proj + ".bf16"] = b16.contiguous()
    save_file(tensors, path, metadata={"format": "pt", "generator": "tools/gen_mxfp4_fixture.py",
                                       "transformers": transformers.__version__,
                                       "torch": torch.__version__})


if __name__ == "__main__":
    main(sys.argv[1])
