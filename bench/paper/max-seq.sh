#!/bin/sh
# The longest sequence `roundpipe plan --seq-len max` finds for the RoundPipe
# paper's four workloads on 8 GPUs of 24 GB and of 80 GB, one sequence a
# microbatch, against the paper's maximum lengths, with the host memory a
# node needs at that length (its store, and a base mapped from the model's
# files) and what bounds it one step (1024 tokens) later.
# Prints a markdown table; extra arguments go to every `roundpipe plan` call
# (for example --host-memory-limit-mib 1048576, --recompute layer).
#
#   bench/paper/max-seq.sh ROUNDPIPE [plan options...]
#
# The workloads: the public configs of Qwen3-1.7B (bench/gpu/), Llama-3.1-8B
# and Qwen3-32B (bench/paper/), full fine-tuning, and Qwen3-235B-A22B
# (bench/moe/) with LoRA as the paper: rank 16 on q/k/v/o
# (bench/paper/qwen3-235b-a22b-lora.txt's header), and the same on the FP8
# release's base (bench/moe/qwen3-235b-a22b-fp8-config.json: its
# quantization_config, e4m3 in [128, 128] blocks, counted as its checkpoint
# ships; the FP8 upload is taken only with RP_ALLOW_UNPROVEN_CUDA=fp8-upload until it
# has run on a GPU, so that row sets it). GPU memory: the paper's
# RTX 4090 (24 GB) and A800 (80 GB) as --memory-limit-mib 22528 and 76800,
# bf16 CUDA executors (the sizes come from the CUDA back end's own functions,
# a build without CUDA has them too). Planning the 32B and 235B shapes takes
# minutes on a small machine.
set -eu
if [ $# -lt 1 ]; then
    echo "usage: $0 ROUNDPIPE [plan options...]" >&2
    exit 2
fi
rp=$1
shift
dir=$(dirname "$0")
field() { printf '%s\n' "$2" | grep -o "\"$1\": [0-9]*" | head -n 1 | sed 's/.*: //'; }
text() { printf '%s\n' "$2" | grep -o "\"$1\": \"[^\"]*\"" | head -n 1 | sed 's/^[^:]*: "//; s/"$//'; }
echo "| workload | GPU | ours (tokens) | paper | ours / paper | bound one step later | host memory per node | of it activations | weight buffers |"
echo "|---|---|---:|---:|---:|---|---:|---:|---:|"
for limit in 22528 76800; do
    for m in qwen3-1.7b llama3.1-8b qwen3-32b qwen3-235b-a22b-lora qwen3-235b-a22b-lora-fp8; do
        unproven=""
        case $m in
        qwen3-1.7b) cfg="$dir/../gpu/qwen3-1.7b-config.json"; lora="" ;;
        llama3.1-8b) cfg="$dir/llama3.1-8b-config.json"; lora="" ;;
        qwen3-32b) cfg="$dir/qwen3-32b-config.json"; lora="" ;;
        qwen3-235b-a22b-lora)
            cfg="$dir/../moe/qwen3-235b-a22b-config.json"
            lora="--lora-rank 16 --lora-targets q_proj,k_proj,v_proj,o_proj" ;;
        qwen3-235b-a22b-lora-fp8)
            cfg="$dir/../moe/qwen3-235b-a22b-fp8-config.json"; unproven="RP_ALLOW_UNPROVEN_CUDA=fp8-upload"
            lora="--lora-rank 16 --lora-targets q_proj,k_proj,v_proj,o_proj" ;;
        esac
        case $limit/$m in # the paper's maximum lengths (K tokens)
        22528/qwen3-1.7b) paper=73 ;; 22528/llama3.1-8b) paper=49 ;;
        22528/qwen3-32b) paper=28 ;; 22528/qwen3-235b-a22b-lora*) paper=31 ;;
        76800/qwen3-1.7b) paper=288 ;; 76800/llama3.1-8b) paper=226 ;;
        76800/qwen3-32b) paper=126 ;; 76800/qwen3-235b-a22b-lora*) paper=118 ;;
        esac
        gpu=$([ "$limit" = 22528 ] && echo "24 GB" || echo "80 GB")
        # shellcheck disable=SC2086 # $lora is words
        out=$(env $unproven "$rp" plan --init-config "$cfg" --device cuda --gpus 8 --microbatches 1 \
            --batch-size 1 --memory-limit-mib "$limit" --seq-len max --json $lora "$@" \
            2>/dev/null) || { echo "| $m | $gpu | no length fits | ${paper}K | | | | | |"; continue; }
        n=$(field longest_seq_len "$out")
        # the store, and a base mapped from its files (the FP8 one; page cache)
        mapped=$(field host_base_mapped_bytes "$out") # LoRA only
        host=$(( $(field host_bytes "$out") + ${mapped:-0} ))
        acts=$(field host_activation_bytes "$out")
        bound="$(text bound "$out"): $(text bound_part "$out")"
        wb=$(field weight_buffers "$out") # --weight-buffers auto: 1 where 2 do not fit
        awk -v m="$m" -v g="$gpu" -v n="$n" -v p="$paper" -v h="$host" -v a="$acts" -v b="$bound" \
            -v w="$wb" \
            'BEGIN { printf "| %s | %s | %d (%.0fK) | %dK | %.2f | %s | %.1f GiB | %.1f GiB | %s |\n",
                     m, g, n, n / 1024, p, n / (p * 1024), b, h / 2^30, a / 2^30, w }'
    done
done
