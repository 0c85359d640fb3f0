# shellcheck shell=sh disable=SC2154,SC2034  # the caller sets rc_bin..., reads rc_verdict...
# Sourced (POSIX sh) by tools/random-configs.sh and mpi-tests/test_random_configs.sh:
# draws a random model configuration and training options from a seed, runs them
# on 1 rank and on 2-4 ranks, and says whether the bits agree. It lives here, not
# in tools/, so that the suite's test runs from a release tarball too.
#
#   rc_draw SEED INDEX DIR   draw configuration INDEX of SEED: DIR/config.json
#                            (and DIR/documents.npy, DIR/mask.npy,
#                            DIR/eval-mask.npy, a sharded model in DIR/sharded
#                            when drawn); sets
#                            rc_desc (its features, one line), rc_np (2-4),
#                            rc_common (options of every run), rc_one (the 1-rank
#                            run's own), rc_many (the rc_np-rank run's own) and
#                            rc_resume ("STEP NP": checkpoint at STEP, resume there
#                            on NP ranks; empty: none) and rc_resumed (that run's
#                            --pipelines and --ranks-per-node)
#   rc_check DIR             run what rc_draw drew in DIR; sets rc_verdict to
#                            same, refused, asymmetric (one run refused, the other
#                            not), differ, crash or hang, and rc_why to a line
#                            saying what; prints nothing
#   rc_commands DIR          print the commands rc_check runs
# The caller sets rc_bin (roundpipe), rc_data (byte tokens, < 256), rc_mpirun
# (mpirun and its flags), rc_tokens (its token count), rc_topologies (the
# hwloc XML fixtures, mpi-tests/fixtures/topology), rc_fixtures
# (mpi-tests/fixtures, where the model directories drawn lie; default:
# rc_topologies's parent) and optionally rc_timeout (seconds a run may take).
# Every draw comes from one xorshift stream seeded by (SEED, INDEX), so a
# configuration reproduces from those two numbers alone, whatever was drawn
# before it. test_random_configs.sh runs fixed (SEED, INDEX) pairs: a new draw
# goes at the end of rc_draw, where it leaves the earlier draws as they were.

rc_state=1
rc_int() { # LO HI: a draw in [LO, HI] into rc_v (xorshift32)
  rc_state=$(( (rc_state ^ (rc_state << 13)) & 4294967295 ))
  rc_state=$(( rc_state ^ (rc_state >> 17) ))
  rc_state=$(( (rc_state ^ (rc_state << 5)) & 4294967295 ))
  rc_v=$(( $1 + rc_state % ($2 - $1 + 1) ))
}
rc_pick() { # WORD...: one of the words into rc_v
  rc_int 1 $#
  eval "rc_v=\${$rc_v}"
}
rc_chance() { # PERCENT: succeeds that often
  rc_int 1 100
  [ "$rc_v" -le "$1" ]
}

rc_npy_i8() { # FILE VALUES...: a one-dimensional int64 .npy (little-endian)
  rc_f=$1; shift
  { printf '\223NUMPY\001\000\166\000'
    printf "%-117s\n" "{'descr': '<i8', 'fortran_order': False, 'shape': ($#,), }"
    for rc_x in "$@"; do
      rc_i=0
      while [ $rc_i -lt 8 ]; do
        printf "\\$(printf %03o $(( (rc_x >> (8 * rc_i)) & 255 )))"; rc_i=$((rc_i + 1))
      done
    done
  } > "$rc_f"
}
rc_npy_u1() { # FILE COUNT DRAWN PERCENT: a uint8 loss mask of COUNT entries, the first
  # DRAWN of them (COUNT at most) 1 with PERCENT chance each, the rest 1
  rc_f=$1; rc_n=$2; rc_p=$4; rc_d=$3
  [ "$rc_d" -le "$rc_n" ] || rc_d=$rc_n # (head -c of a negative count never ends on /dev/zero)
  { printf '\223NUMPY\001\000\166\000'
    printf "%-117s\n" "{'descr': '|u1', 'fortran_order': False, 'shape': ($rc_n,), }"
    rc_i=0
    while [ $rc_i -lt "$rc_d" ]; do
      if rc_chance "$rc_p"; then printf '\001'; else printf '\000'; fi
      rc_i=$((rc_i + 1))
    done
    head -c $((rc_n - rc_d)) /dev/zero | tr '\000' '\001'
  } > "$rc_f"
}

# the model: config.json in DIR, its features appended to rc_desc
rc_draw_model() {
  rc_pick llama llama llama qwen3 qwen3 qwen3 qwen3_moe qwen3_moe qwen3_moe gpt_oss gpt_oss
  rc_arch=$rc_v
  rc_int 1 5; rc_blocks=$rc_v
  rc_int 1 6; rc_heads=$rc_v
  rc_kv=$rc_heads
  # kv heads: a divisor of the heads
  while :; do rc_int 1 "$rc_heads"; [ $((rc_heads % rc_v)) = 0 ] && break; done
  rc_kv=$rc_v
  rc_int 1 12; rc_hd=$((2 * rc_v))
  rc_chance 5 && rc_hd=$((rc_hd + 1)) # an odd head_dim, which RoPE cannot pair
  rc_int 8 72; rc_hidden=$rc_v
  rc_int 5 120; rc_inter=$rc_v
  rc_int 300 900; rc_vocab=$rc_v
  rc_pick true false; rc_tied=$rc_v
  rc_pick true false false; rc_bias=$rc_v
  rc_pick 0.02 0.05 0.1 0.2; rc_init=$rc_v
  rc_pick 1e-6 1e-5; rc_eps=$rc_v
  rc_desc="$rc_arch blocks=$rc_blocks hidden=$rc_hidden heads=$rc_heads/$rc_kv hd=$rc_hd"
  rc_desc="$rc_desc vocab=$rc_vocab tied=$rc_tied"
  rc_archname=LlamaForCausalLM
  rc_extra=""
  case $rc_arch in
    qwen3) rc_archname=Qwen3ForCausalLM ;;
    qwen3_moe)
      rc_archname=Qwen3MoeForCausalLM
      rc_int 2 8; rc_experts=$rc_v
      rc_int 1 "$(( rc_experts < 4 ? rc_experts : 4 ))"; rc_topk=$rc_v
      rc_int 4 40; rc_moe_inter=$rc_v
      rc_pick true false; rc_norm=$rc_v
      rc_int 1 2; rc_sparse=$rc_v
      rc_only=""
      rc_b=0
      while [ $rc_b -lt "$rc_blocks" ]; do
        rc_chance 20 && rc_only="$rc_only${rc_only:+, }$rc_b"
        rc_b=$((rc_b + 1))
      done
      rc_pick true false; rc_aux=$rc_v
      rc_pick 0.001 0.02 0.5; rc_auxc=$rc_v
      rc_extra="\"num_experts\": $rc_experts, \"num_experts_per_tok\": $rc_topk,
 \"moe_intermediate_size\": $rc_moe_inter, \"norm_topk_prob\": $rc_norm,
 \"decoder_sparse_step\": $rc_sparse, \"mlp_only_layers\": [$rc_only],
 \"output_router_logits\": $rc_aux, \"router_aux_loss_coef\": $rc_auxc,"
      rc_desc="$rc_desc experts=$rc_experts top$rc_topk step=$rc_sparse only=[$rc_only] aux=$rc_aux" ;;
    gpt_oss)
      rc_archname=GptOssForCausalLM
      rc_bias=true # gpt-oss's attention has biases
      rc_int 2 6; rc_experts=$rc_v
      rc_int 1 "$(( rc_experts < 4 ? rc_experts : 4 ))"; rc_topk=$rc_v
      rc_types=""
      rc_b=0
      while [ $rc_b -lt "$rc_blocks" ]; do
        rc_pick sliding_attention full_attention
        rc_types="$rc_types${rc_types:+, }\"$rc_v\""
        rc_b=$((rc_b + 1))
      done
      rc_int 1 12; rc_window=$rc_v
      rc_pick true false; rc_aux=$rc_v
      rc_pick 0.5 1.5 7.0; rc_limit=$rc_v
      rc_pick 1.3 1.702; rc_alpha=$rc_v
      rc_extra="\"num_local_experts\": $rc_experts, \"num_experts_per_tok\": $rc_topk,
 \"layer_types\": [$rc_types], \"sliding_window\": $rc_window,
 \"output_router_logits\": $rc_aux, \"router_aux_loss_coef\": 0.5,
 \"swiglu_limit\": $rc_limit, \"swiglu_alpha\": $rc_alpha,
 \"rope_parameters\": {\"beta_fast\": 32.0, \"beta_slow\": 1.0, \"factor\": 8.0,
   \"original_max_position_embeddings\": 8, \"rope_theta\": 150000.0,
   \"rope_type\": \"yarn\", \"truncate\": false},"
      rc_desc="$rc_desc experts=$rc_experts top$rc_topk window=$rc_window aux=$rc_aux limit=$rc_limit" ;;
  esac
  rc_desc="$rc_desc bias=$rc_bias"
  rc_write_config "$1"
}
rc_write_config() { # DIR: config.json of the rc_* model variables
  cat > "$1/config.json" <<JSON
{"model_type": "$rc_arch", "architectures": ["$rc_archname"],
 "num_hidden_layers": $rc_blocks, "hidden_size": $rc_hidden,
 "intermediate_size": $rc_inter, "num_attention_heads": $rc_heads,
 "num_key_value_heads": $rc_kv, "head_dim": $rc_hd, "vocab_size": $rc_vocab,
 "tie_word_embeddings": $rc_tied, "attention_bias": $rc_bias, $rc_extra
 "rms_norm_eps": $rc_eps, "max_position_embeddings": 256, "rope_theta": 10000.0,
 "initializer_range": $rc_init, "torch_dtype": "float32"}
JSON
}

# a forced plan over LAYERS layers (embedding, blocks, head): a tail that ends
# at the head, the layers below it cut into forward and backward stages, into rc_v
rc_draw_plan() {
  rc_layers=$1
  rc_int 1 $((rc_layers - 1)); rc_tail=$rc_v # first layer of the tail
  rc_fwd=""; rc_l=0
  while [ $rc_l -lt "$rc_tail" ]; do
    rc_int "$rc_l" $((rc_tail - 1)); rc_fwd="$rc_fwd${rc_fwd:+,}$rc_l-$rc_v"; rc_l=$((rc_v + 1))
  done
  rc_bwd="$rc_tail-$((rc_layers - 1))"; rc_h=$((rc_tail - 1))
  while [ $rc_h -ge 0 ]; do
    rc_int 0 "$rc_h"; rc_bwd="$rc_bwd,$rc_v-$rc_h"; rc_h=$((rc_v - 1))
  done
  rc_v="fwd=$rc_fwd;bwd=$rc_bwd"
}

rc_draw() { # SEED INDEX DIR
  rc_state=$(( ($1 % 1000000 * 2654435761 + $2 * 40503 + 1) & 4294967295 ))
  [ $rc_state = 0 ] && rc_state=1
  # leave the first draws, close for close seeds, behind
  rc_i=0; while [ $rc_i -lt 12 ]; do rc_int 0 1; rc_i=$((rc_i + 1)); done
  rc_dir=$3
  rc_draw_model "$rc_dir"
  rc_int 2 4; rc_np=$rc_v
  rc_pick 1 2 2 3 4 4 5 6 6; rc_micro=$rc_v
  rc_int 1 2; rc_batch=$((rc_micro * rc_v))
  rc_int 4 33; rc_seq=$rc_v
  rc_int 2 4; rc_steps=$rc_v
  rc_pick 0 0 0.05 0.5 1 3 100; rc_clip=$rc_v
  rc_int 1 2; rc_threads=$rc_v
  rc_pick fp32 fp32 fp32 bf16; rc_dtype=$rc_v
  rc_pick constant cosine linear; rc_sched=$rc_v
  rc_int 0 2; rc_warm=$rc_v
  rc_pick 0.001 0.003 0.01; rc_lr=$rc_v
  rc_pick 0 0.01 0.1; rc_wd=$rc_v
  rc_common="--init-config $rc_dir/config.json --data $rc_data --seed $(( $1 % 100000 * 100 + $2 % 100 ))"
  rc_common="$rc_common --seq-len $rc_seq --batch-size $rc_batch --microbatches $rc_micro"
  rc_common="$rc_common --steps $rc_steps --grad-clip $rc_clip --threads $rc_threads"
  rc_common="$rc_common --dtype $rc_dtype --lr-schedule $rc_sched --warmup-steps $rc_warm"
  rc_common="$rc_common --lr $rc_lr --weight-decay $rc_wd"
  rc_desc="$rc_desc | S=$rc_seq B=$rc_batch M=$rc_micro steps=$rc_steps clip=$rc_clip"
  rc_desc="$rc_desc threads=$rc_threads $rc_dtype $rc_sched"
  rc_chance 10 && { rc_common="$rc_common --grad-dtype bf16"; rc_desc="$rc_desc grad-bf16"; }
  rc_chance 10 && { rc_common="$rc_common --activation-dtype bf16"; rc_desc="$rc_desc act-bf16"; }
  rc_chance 15 && { rc_common="$rc_common --shuffle"; rc_desc="$rc_desc shuffle"; }
  if rc_chance 10; then rc_pick bf16 fp16; rc_common="$rc_common --save-dtype $rc_v"; rc_desc="$rc_desc save-$rc_v"; fi
  case $rc_arch in
    qwen3_moe|gpt_oss) rc_chance 20 && { rc_pick 0 0.01 0.3; rc_common="$rc_common --router-aux-coef $rc_v"; rc_desc="$rc_desc aux-coef=$rc_v"; } ;;
  esac
  # the tokens the run reads (wrap-around aside): enough documents and mask to cover them
  rc_span=$(( rc_steps * rc_batch * (rc_seq + 1) + 64 ))
  rc_docs=""
  if rc_chance 25; then
    rc_starts=0; rc_at=0
    while [ $rc_at -lt $rc_span ]; do
      rc_int 1 $((2 * rc_seq)); rc_at=$((rc_at + rc_v)); rc_starts="$rc_starts $rc_at"
    done
    # shellcheck disable=SC2086
    rc_npy_i8 "$rc_dir/documents.npy" $rc_starts
    rc_docs="$rc_dir/documents.npy"
    rc_common="$rc_common --documents $rc_docs"; rc_desc="$rc_desc documents"
  fi
  if rc_chance 15; then
    rc_int 30 95
    rc_npy_u1 "$rc_dir/mask.npy" "$rc_tokens" "$rc_span" "$rc_v"
    rc_common="$rc_common --loss-mask $rc_dir/mask.npy"; rc_desc="$rc_desc mask"
  fi
  rc_optimizer_lag=0
  rc_chance 8 && { rc_optimizer_lag=1; rc_common="$rc_common --optimizer-lag 1"; rc_desc="$rc_desc lag"; }
  if rc_chance 25; then
    rc_int 1 6; rc_common="$rc_common --eval-data $rc_data --eval-samples $rc_v"
    # (a lagged optimizer evaluates after the last step only: refused otherwise)
    rc_int 0 2; [ $rc_optimizer_lag = 1 ] || rc_common="$rc_common --eval-every $rc_v"
    [ -n "$rc_docs" ] && rc_chance 50 && rc_common="$rc_common --eval-documents $rc_docs"
    rc_desc="$rc_desc eval"
  fi
  if rc_chance 20; then
    rc_int 1 $((rc_seq * rc_batch / rc_micro + 2)); rc_common="$rc_common --token-tile $rc_v"
    rc_desc="$rc_desc tile=$rc_v"
  fi
  rc_lora=0 rc_merged=0
  if rc_chance 30; then
    rc_lora=1
    rc_int 1 8; rc_common="$rc_common --lora-rank $rc_v"
    rc_pick 4 8 16; rc_common="$rc_common --lora-alpha $rc_v"
    # shellcheck disable=SC2086
    rc_targets_of "$rc_arch"; rc_pick $rc_v
    rc_common="$rc_common --lora-targets $rc_v"; rc_desc="$rc_desc lora($rc_v"
    rc_chance 35 && { rc_pick 0.1 0.3; rc_common="$rc_common --lora-dropout $rc_v"; rc_desc="$rc_desc dropout"; }
    rc_chance 20 && { rc_common="$rc_common --use-rslora"; rc_desc="$rc_desc rslora"; }
    rc_chance 40 && { rc_merged=1; rc_desc="$rc_desc merged"; }
    rc_desc="$rc_desc)"
  fi
  # the many-rank run: nodes (--ranks-per-node) and pipelines per node; the
  # 1-rank run has all of them as its pipelines (one node running them all)
  # (LoRA on several nodes is refused: "not supported yet")
  rc_per_node=$rc_np
  if [ $rc_optimizer_lag = 0 ] && [ $rc_lora = 0 ] && rc_chance 45; then
    rc_int 1 $((rc_np - 1))
    [ $((rc_np % rc_v)) = 0 ] && [ $((rc_micro % (rc_np / rc_v))) = 0 ] && rc_per_node=$rc_v
  fi
  rc_nodes=$((rc_np / rc_per_node))
  rc_pipes=1
  if [ $rc_optimizer_lag = 0 ] && rc_chance 45; then
    rc_int 2 4
    if [ $((rc_micro % (rc_nodes * rc_v))) = 0 ] &&
       { [ $((rc_per_node % rc_v)) = 0 ] || [ $((rc_v % rc_per_node)) = 0 ]; }; then
      rc_pipes=$rc_v
    fi
  fi
  rc_one="--pipelines $((rc_nodes * rc_pipes))"
  rc_many="--pipelines $rc_pipes"
  [ $rc_per_node != "$rc_np" ] && rc_many="$rc_many --ranks-per-node $rc_per_node"
  rc_desc="$rc_desc | np=$rc_np nodes=$rc_nodes pipelines=$rc_pipes"
  # engine options that never change the bits: drawn for the many-rank run only
  if rc_chance 50; then rc_pick none layer stage auto; rc_many="$rc_many --recompute $rc_v"; rc_desc="$rc_desc recompute=$rc_v"; fi
  if rc_chance 40; then rc_pick on off; rc_many="$rc_many --speculative-update $rc_v"; rc_desc="$rc_desc spec=$rc_v"; fi
  if rc_chance 30; then rc_pick 1 2; rc_many="$rc_many --weight-buffers $rc_v"; rc_desc="$rc_desc wbuf=$rc_v"; fi
  if rc_chance 25; then rc_int 1 $((rc_seq * 2)); rc_many="$rc_many --mlp-chunk-tokens $rc_v"; rc_desc="$rc_desc chunk=$rc_v"; fi
  if rc_chance 20; then rc_pick 0.0001 0.002 0.05; rc_many="$rc_many --chunk-mib $rc_v"; rc_desc="$rc_desc chunk-mib=$rc_v"; fi
  rc_groups=""
  if rc_chance 20; then
    rc_r=0
    while [ $rc_r -lt "$rc_per_node" ]; do
      rc_int 0 1; rc_groups="$rc_groups${rc_groups:+,}$rc_v"; rc_r=$((rc_r + 1))
    done
    rc_pick natural interleaved best
    rc_many="$rc_many --link-groups $rc_groups --deal $rc_v"; rc_desc="$rc_desc groups=$rc_groups deal=$rc_v"
  fi
  # (a topology says the link groups too: refused beside --link-groups)
  if [ -z "${rc_groups:-}" ] && rc_chance 15; then
    rc_pick 4gpu-1switch 4gpu-rootports 8gpu-2switch
    rc_many="$rc_many --topology $rc_topologies/$rc_v.xml"; rc_desc="$rc_desc topology=$rc_v"
  fi
  if rc_chance 15; then rc_pick 1 2 4; rc_many="$rc_many --memory-limit-mib $rc_v"; rc_desc="$rc_desc memlimit=$rc_v"; fi
  rc_chance 10 && { rc_many="$rc_many --bind no"; rc_desc="$rc_desc bind=no"; }
  rc_chance 10 && { rc_many="$rc_many --activation-numa reader"; rc_desc="$rc_desc numa=reader"; }
  if rc_chance 25; then
    rc_draw_plan $((rc_blocks + 2)); rc_many="$rc_many --plan $rc_v"; rc_desc="$rc_desc plan=$rc_v"
  fi
  rc_resume=""
  if rc_chance 25; then
    rc_int 1 $((rc_steps - 1)); rc_at=$rc_v
    # a rank count the step's pipelines suit as one node
    rc_total=$((rc_nodes * rc_pipes))
    rc_int 1 4; rc_to=$rc_v
    { [ $((rc_total % rc_to)) = 0 ] || [ $((rc_to % rc_total)) = 0 ]; } || rc_to=1
    [ $rc_optimizer_lag = 1 ] && rc_to=1
    rc_resumed="--pipelines $rc_total"
    # or on several nodes, as many pipelines in all (LoRA: not on several nodes)
    if [ $rc_to -ge 2 ] && [ $rc_optimizer_lag = 0 ] && [ $rc_lora = 0 ] && rc_chance 40; then
      rc_int 1 $((rc_to - 1)); rc_k=$rc_v
      if [ $((rc_to % rc_k)) = 0 ] && [ $((rc_total % (rc_to / rc_k))) = 0 ]; then
        rc_p=$((rc_total / (rc_to / rc_k)))
        if [ $((rc_k % rc_p)) = 0 ] || [ $((rc_p % rc_k)) = 0 ]; then
          rc_resumed="--pipelines $rc_p --ranks-per-node $rc_k"
          rc_desc="$rc_desc resume@$rc_at->np$rc_to/nodes=$((rc_to / rc_k))"
        fi
      fi
    fi
    case $rc_resumed in *ranks-per-node*) ;; *) rc_desc="$rc_desc resume@$rc_at->np$rc_to" ;; esac
    rc_resume="$rc_at $rc_to"
  fi
  # drawn last, so that the draws above stay those of the suite's fixed
  # configurations: now and then a wide model (GEMMs reducing over more than
  # OpenBLAS's blocks of 384), and engine options of the 1-rank run too
  if rc_chance 12; then
    rc_int 200 420; rc_hidden=$rc_v; rc_int 300 700; rc_inter=$rc_v
    rc_write_config "$rc_dir"; rc_desc="$rc_desc wide=$rc_hidden/$rc_inter"
  fi
  if rc_chance 30; then rc_pick none layer stage; rc_one="$rc_one --recompute $rc_v"; rc_desc="$rc_desc one:recompute=$rc_v"; fi
  if rc_chance 20; then rc_pick 1 2; rc_one="$rc_one --weight-buffers $rc_v"; rc_desc="$rc_desc one:wbuf=$rc_v"; fi
  if rc_chance 20; then rc_int 1 $((rc_seq * 2)); rc_one="$rc_one --mlp-chunk-tokens $rc_v"; rc_desc="$rc_desc one:chunk=$rc_v"; fi
  # then, for 34 configurations in 100 (one draw decides, so that the suite's
  # fixed pairs, whose draw here is 35-71, stay as they were): a model directory
  # instead of --init-config, a PEFT adapter to start from, --eval-mask, a
  # longer sequence, more steps
  rc_chance 34 && rc_draw_more
}

rc_targets_of() { # ARCH: the --lora-targets lists that suit it, into rc_v
  case $1 in
    # gpt-oss's router and experts are no Linear modules: its adapters are the attention's
    gpt_oss) rc_v="all-linear q_proj,v_proj k_proj,o_proj q_proj,k_proj,v_proj,o_proj" ;;
    qwen3_moe) rc_v="all-linear q_proj,v_proj gate o_proj,gate gate_proj,up_proj,down_proj gate,down_proj" ;;
    *) rc_v="all-linear q_proj,v_proj k_proj,o_proj gate_proj,up_proj,down_proj q_proj,down_proj" ;;
  esac
}
rc_option_set() { # OPTION VALUE: OPTION's value in rc_common set to VALUE (added
  # where it was not there); VALUE empty: the option (or flag) removed
  rc_common=$(printf '%s\n' "$rc_common" | sed -e "s| $1 [^ -][^ ]*||g" -e "s# $1\( \|$\)#\1#g")
  [ -z "$2" ] || rc_common="$rc_common $1 $2"
}
rc_has() { # OPTION: whether rc_common has it
  case " $rc_common " in *" $1 "*) return 0 ;; esac
  return 1
}

# The model directories rc_draw_more picks from, under rc_fixtures: NAME DIR
# DATA ARCH LAYERS FP8 ADAPTER R (ADAPTER: a PEFT adapter of that model, of
# rank R, or -). Their vocabularies (40, 96) are smaller than rc_data's bytes:
# each trains on its golden case's own 166 tokens. FP8 bases train LoRA only.
rc_model_dirs='fp8-qwen3-bf16 golden-fp8/qwen3-bf16-scales-model golden/qwen3/data.npy qwen3 4 1 golden-fp8/qwen3-bf16-scales/lora_init 4
fp8-qwen3-f32 golden-fp8/qwen3-f32-scales-m1-model golden/qwen3/data.npy qwen3 4 1 golden-fp8/qwen3-f32-scales-m1/lora_init 2
fp8-qwen3-kept golden-fp8/qwen3-kept-model golden/qwen3/data.npy qwen3 4 1 golden-fp8/qwen3-kept/lora_init 4
fp8-moe-bf16 golden-fp8/moe-bf16-scales/model-fp8 golden-fp8/moe-bf16-scales/data.npy qwen3_moe 5 1 golden-fp8/moe-bf16-scales/lora_init 2
fp8-moe-kept golden-fp8/moe-kept/model-fp8 golden-fp8/moe-kept/data.npy qwen3_moe 5 1 golden-fp8/moe-kept/lora_init 2
fp8-odd-block-f32 fp8-odd/block-f32 golden/qwen3/data.npy qwen3 4 1 - 0
fp8-odd-kept-f32 fp8-odd/kept-f32 golden/qwen3/data.npy qwen3 4 1 - 0
fp8-odd-norms fp8-odd/norms golden/qwen3/data.npy qwen3 4 1 - 0
fp8-odd-moe-router fp8-odd/moe-router golden-fp8/moe-kept/data.npy qwen3_moe 5 1 - 0
mxfp4 golden-gpt-oss/oss-mxfp4/model-mxfp4 golden-gpt-oss/oss-mxfp4/data.npy gpt_oss 5 0 golden-gpt-oss/oss-lora/lora_init 2'
rc_model_dir() { # LINE: line LINE of rc_model_dirs into rc_m*
  # shellcheck disable=SC2046
  set -- $(printf '%s\n' "$rc_model_dirs" | sed -n "$1p")
  rc_mname=$1 rc_mdir=$rc_fix/$2 rc_mdata=$rc_fix/$3 rc_march=$4 rc_mlayers=$5 rc_fp8=$6
  rc_adapter=$rc_fix/$7 rc_adapter_r=$8; [ "$7" = - ] && rc_adapter=""
  return 0
}

rc_draw_more() { # rc_draw's last draws, into its variables
  rc_fix=${rc_fixtures:-${rc_topologies%/*}}
  rc_tokens_now=$rc_tokens rc_maxpos=256 rc_adapter=""
  if rc_chance 60; then
    rc_int 1 10; rc_model_dir "$rc_v"
    # LoRA on several nodes is refused: with those, instead of an FP8 base
    # (LoRA only), the MXFP4 one trained in full
    if [ "$rc_fp8" = 1 ] && [ $rc_lora = 0 ] &&
       { [ $rc_nodes -gt 1 ] ||
         { [ -n "$rc_resume" ] && case $rc_resumed in *ranks-per-node*) true ;; *) false ;; esac; }; }; then
      rc_model_dir 10
    fi
    rc_desc="$rc_desc | instead: model=$rc_mname"
    if rc_chance 40; then
      # a sharded copy (roundpipe writes single files only)
      rc_int 2 4; rc_shard "$rc_mdir" "$rc_dir/sharded" "$rc_v" || return 1
      rc_mdir=$rc_dir/sharded; rc_desc="$rc_desc sharded=$rc_v"
    fi
    rc_common=$(printf '%s\n' "$rc_common" |
      sed -e "s|--init-config $rc_dir/config.json --data $rc_data|--model $rc_mdir --data $rc_mdata|" \
          -e "s|--eval-data $rc_data|--eval-data $rc_mdata|")
    rc_tokens_now=$(head -c 128 "$rc_mdata" | LC_ALL=C sed -n "s/.*'shape': (\([0-9]*\),).*/\1/p")
    rc_maxpos=64 rc_arch=$rc_march
    # a dense model has no router loss to weigh
    [ "$rc_march" = qwen3 ] && rc_option_set --router-aux-coef ""
    if [ "$rc_fp8" = 1 ] && [ $rc_lora = 0 ]; then
      rc_lora=1
      rc_int 1 8; rc_option_set --lora-rank "$rc_v"
      rc_pick 4 8 16; rc_option_set --lora-alpha "$rc_v"
      # shellcheck disable=SC2086
      rc_targets_of "$rc_march"; rc_pick $rc_v; rc_option_set --lora-targets "$rc_v"
      rc_desc="$rc_desc lora($rc_v"
      rc_chance 40 && { rc_merged=1; rc_desc="$rc_desc merged"; }
      rc_desc="$rc_desc)"
    elif [ $rc_lora = 1 ]; then
      # the targets drawn for the drawn architecture, or others of this one's
      rc_t=$(printf '%s\n' "$rc_common" | sed -n 's/.*--lora-targets \([^ ]*\).*/\1/p')
      rc_targets_of "$rc_march"
      case " $rc_v " in *" $rc_t "*) ;; *)
        # shellcheck disable=SC2086
        rc_pick $rc_v; rc_option_set --lora-targets "$rc_v"; rc_desc="$rc_desc targets=$rc_v" ;;
      esac
    fi
    # the drawn documents, mask and plan were the drawn model's and rc_data's
    if rc_has --documents; then
      rc_starts=0; rc_at=0
      while :; do
        rc_int 1 $((2 * rc_seq)); rc_at=$((rc_at + rc_v)); [ $rc_at -lt "$rc_tokens_now" ] || break
        rc_starts="$rc_starts $rc_at"
      done
      # shellcheck disable=SC2086
      rc_npy_i8 "$rc_dir/documents.npy" $rc_starts
    fi
    if rc_has --loss-mask; then
      rc_int 30 95; rc_npy_u1 "$rc_dir/mask.npy" "$rc_tokens_now" "$rc_tokens_now" "$rc_v"
    fi
    case $rc_many in *" --plan "*)
      rc_many=${rc_many%% --plan *}
      rc_draw_plan "$rc_mlayers"; rc_many="$rc_many --plan $rc_v"; rc_desc="$rc_desc plan=$rc_v" ;;
    esac
  fi
  # an adapter to start from, a fixture's (the configuration's rank is its r;
  # its alpha, targets and rsLoRA are the adapter's)
  if [ $rc_lora = 1 ] && [ -n "$rc_adapter" ] && rc_chance 50; then
    rc_option_set --lora-rank "$rc_adapter_r"; rc_option_set --lora-alpha ""
    rc_option_set --lora-targets ""; rc_option_set --use-rslora ""
    rc_common="$rc_common --lora-init $rc_adapter"; rc_desc="$rc_desc lora-init"
  fi
  if rc_has --eval-data && rc_chance 50; then
    # (the first 7 samples of up to 97 tokens drawn: --eval-samples is 1-6)
    rc_int 30 95
    rc_npy_u1 "$rc_dir/eval-mask.npy" "$rc_tokens_now" \
      "$(( rc_tokens_now < 7 * 97 ? rc_tokens_now : 7 * 97 ))" "$rc_v"
    rc_common="$rc_common --eval-mask $rc_dir/eval-mask.npy"; rc_desc="$rc_desc eval-mask"
  fi
  if rc_chance 30; then
    rc_int 34 $(( rc_maxpos < 96 ? rc_maxpos : 96 )); rc_seq=$rc_v
    rc_option_set --seq-len "$rc_seq"; rc_desc="$rc_desc S=$rc_seq"
  fi
  if rc_chance 30; then
    rc_int 5 8; rc_steps=$rc_v; rc_option_set --steps "$rc_steps"; rc_desc="$rc_desc steps=$rc_steps"
  fi
}

rc_le8() { # VALUE: its 8 little-endian bytes
  rc_i=0
  while [ $rc_i -lt 8 ]; do
    printf "\\$(printf %03o $(( ($1 >> (8 * rc_i)) & 255 )))"; rc_i=$((rc_i + 1))
  done
}

rc_shard() { # SRC DEST PARTS: SRC's model.safetensors cut into up to PARTS shards in DEST
  # (model-0000I-of-0000K.safetensors, whole tensors each, in the order of their
  # data) with model.safetensors.index.json and SRC's config.json; K into rc_v
  rc_f=$1/model.safetensors
  rc_hn=$(od -An -tu8 -N8 "$rc_f" | tr -d ' ')
  mkdir -p "$2" && cp "$1/config.json" "$2/" || return 1
  head -c $((8 + rc_hn)) "$rc_f" | tail -c "$rc_hn" | awk -v parts="$3" '
    { s = s $0 }
    END {
      sub(/^[ ]*\{/, "", s); sub(/\}[ ]*$/, "", s); gsub(/\},"/, "}\n\"", s)
      n = split(s, e, "\n"); end = 0; t = 0
      for (i = 1; i <= n; i++) {
        if (!match(e[i], /"data_offsets":\[[0-9]+,[0-9]+\]/)) continue
        o = substr(e[i], RSTART + 16, RLENGTH - 17); split(o, ab, ",")
        t++; name[t] = substr(e[i], 2, index(substr(e[i], 2), "\"") - 1)
        body[t] = substr(e[i], 1, RSTART - 1); a[t] = ab[1] + 0; b[t] = ab[2] + 0
        if (b[t] > end) end = b[t]
      }
      # a tensor goes to the part its first byte falls in: each part is one
      # run of the data, empty parts dropped
      for (i = 1; i <= t; i++) { p = int(a[i] * parts / end); used[p] = 1; part[i] = p }
      k = 0
      for (p = 0; p < parts; p++) if (used[p]) { k++; num[p] = k; lo[k] = end; hi[k] = 0 }
      for (i = 1; i <= t; i++) {
        j = num[part[i]]; if (a[i] < lo[j]) lo[j] = a[i]; if (b[i] > hi[j]) hi[j] = b[i]
      }
      idx = ""
      for (j = 1; j <= k; j++) {
        h = ""; f = sprintf("model-%05d-of-%05d.safetensors", j, k)
        for (i = 1; i <= t; i++) {
          if (num[part[i]] != j) continue
          h = h (h == "" ? "" : ",") body[i] "\"data_offsets\":[" (a[i] - lo[j]) "," (b[i] - lo[j]) "]}"
          idx = idx (idx == "" ? "" : ", ") "\"" name[i] "\": \"" f "\""
        }
        printf "%s %d %d %s\n", f, lo[j], hi[j] - lo[j], "{" h "}"
      }
      printf "index %d 0 {\"metadata\": {\"total_size\": %d}, \"weight_map\": {%s}}\n", k, end, idx
    }' > "$2/parts.txt" || return 1
  while read -r rc_name rc_lo rc_len rc_json; do
    if [ "$rc_name" = index ]; then printf '%s\n' "$rc_json" > "$2/model.safetensors.index.json"; continue; fi
    # (the format allows trailing spaces: the data start 8-aligned)
    while [ $(( (8 + ${#rc_json}) % 8 )) != 0 ]; do rc_json="$rc_json "; done
    { rc_le8 ${#rc_json}; printf '%s' "$rc_json"
      tail -c +$((8 + rc_hn + rc_lo + 1)) "$rc_f" | head -c "$rc_len"; } > "$2/$rc_name"
  done < "$2/parts.txt"
  rc_v=$(sed -n 's/^index \([0-9]*\) .*/\1/p' "$2/parts.txt"); rm -f "$2/parts.txt"
}

rc_run() { # NAME NP [options...]: one run into $rc_dir/NAME{.txt,.jsonl,/}; its status in rc_rc
  rc_name=$1; rc_n=$2; shift 2
  # shellcheck disable=SC2086
  rc_x=""; [ "$rc_merged" = 1 ] && rc_x="--save-merged $rc_dir/$rc_name-merged"
  # shellcheck disable=SC2086
  # roundpipe's own deadline first, so that a hang is named by its message
  timeout $(( ${rc_timeout:-60} + 30 )) $rc_mpirun -np "$rc_n" "$rc_bin" train "$@" $rc_x --device cpu \
    --progress none --timeout "${rc_timeout:-60}" --log "$rc_dir/$rc_name.jsonl" \
    --save "$rc_dir/$rc_name" > "$rc_dir/$rc_name.txt" 2>&1
  rc_rc=$?
}
rc_classify() { # NAME: crash, hang, refused or ok for the run's output and status
  if [ "$rc_rc" = 124 ] || [ "$rc_rc" = 137 ] ||
     grep -q 'timed out waiting for event' "$rc_dir/$1.txt"; then rc_v=hang
  elif grep -q -E 'AddressSanitizer|runtime error:|LeakSanitizer|Segmentation|signal [0-9]|Signal:|Aborted|core dumped|Assertion' "$rc_dir/$1.txt"; then rc_v=crash
  elif [ "$rc_rc" != 0 ]; then rc_v=refused
  else rc_v=ok
  fi
}
rc_metrics() { # NAME: the log without its clock fields
  sed -e 's/,"tokens_per_s":[^,}]*//' -e 's/,"time":[^,}]*//' "$rc_dir/$1.jsonl" 2>/dev/null
}
rc_same() { # A B [FROM_STEP]: the logs (from that step) and every saved file identical
  rc_metrics "$1" | awk -F'[:,]' -v from="${3:-0}" '$2 > from' > "$rc_dir/$1.cut"
  rc_metrics "$2" | awk -F'[:,]' -v from="${3:-0}" '$2 > from' > "$rc_dir/$2.cut"
  [ -s "$rc_dir/$1.cut" ] && cmp -s "$rc_dir/$1.cut" "$rc_dir/$2.cut" || return 1
  rc_files=0
  for rc_f in "$rc_dir/$1"/*; do
    [ -f "$rc_f" ] || continue
    rc_files=$((rc_files + 1))
    cmp -s "$rc_f" "$rc_dir/$2/${rc_f##*/}" || return 1
  done
  [ "$rc_merged" = 1 ] || { [ $rc_files -gt 0 ]; return; }
  for rc_f in "$rc_dir/$1-merged"/*; do
    [ -f "$rc_f" ] || continue
    rc_files=$((rc_files + 1))
    cmp -s "$rc_f" "$rc_dir/$2-merged/${rc_f##*/}" || return 1
  done
  [ -f "$rc_dir/$1-merged/model.safetensors" ]
}

rc_check() { # DIR (after rc_draw into it)
  rc_dir=$1
  rc_resume_args=""
  [ -n "$rc_resume" ] && rc_resume_args="--checkpoint-dir $rc_dir/ck --checkpoint-every ${rc_resume% *} --keep-checkpoints 0"
  # shellcheck disable=SC2086
  rc_run one 1 $rc_common $rc_one; rc_classify one; rc_a=$rc_v
  # shellcheck disable=SC2086
  rc_run many "$rc_np" $rc_common $rc_many $rc_resume_args; rc_classify many; rc_b=$rc_v
  case "$rc_a/$rc_b" in
    *crash*|*hang*)
      rc_verdict=crash; case "$rc_a/$rc_b" in *hang*) rc_verdict=hang ;; esac
      rc_why="1 rank: $rc_a, $rc_np ranks: $rc_b"; return ;;
    refused/refused) rc_verdict=refused; rc_why=$(grep -m1 -E 'error|roundpipe train:' "$rc_dir/one.txt"); return ;;
    ok/refused)
      # an option only the many-rank run has (a plan over its memory limit,
      # say) may be refused there alone
      rc_why=$(grep -m1 -E 'error|roundpipe train:' "$rc_dir/many.txt")
      if echo "$rc_why" | grep -q -E -- '--(plan|memory-limit-mib|link-groups|topology|deal|weight-buffers|recompute|chunk-mib|mlp-chunk-tokens)|device memory exhausted'; then
        rc_verdict=refused; rc_why="the $rc_np-rank run's own options: $rc_why"; return
      fi
      rc_verdict=asymmetric
      rc_why="1 rank: $rc_a, $rc_np ranks: $rc_b: $rc_why"
      return ;;
    refused/ok)
      rc_verdict=asymmetric
      rc_why="1 rank: $rc_a, $rc_np ranks: $rc_b: $(grep -h -m1 -E 'error|roundpipe train:' "$rc_dir/one.txt" "$rc_dir/many.txt" | head -n 1)"
      return ;;
  esac
  if ! rc_same one many; then
    rc_verdict=differ; rc_why="$rc_np ranks gave other bits than 1"; return
  fi
  if [ -n "$rc_resume" ]; then
    rc_at=${rc_resume% *}; rc_to=${rc_resume#* }
    rc_ck=$(printf '%s/ck/step-%08d' "$rc_dir" "$rc_at")
    # shellcheck disable=SC2086
    rc_run resumed "$rc_to" $rc_common $rc_resumed --resume "$rc_ck"
    rc_classify resumed
    case $rc_v in
      crash|hang) rc_verdict=$rc_v; rc_why="the resume from step $rc_at on $rc_to ranks: $rc_v"; return ;;
      refused) rc_verdict=asymmetric; rc_why="the resume from step $rc_at on $rc_to ranks refused: $(grep -m1 -E 'error|roundpipe train:' "$rc_dir/resumed.txt")"; return ;;
    esac
    if ! rc_same one resumed "$rc_at"; then
      rc_verdict=differ; rc_why="the resume from step $rc_at on $rc_to ranks gave other bits"; return
    fi
  fi
  rc_verdict=same; rc_why=""
}

rc_commands() { # DIR: the commands rc_check runs, for a reproducer
  rc_x=""; [ -n "$rc_resume" ] && rc_x=" --checkpoint-dir $1/ck --checkpoint-every ${rc_resume% *} --keep-checkpoints 0"
  { echo "-np 1 $rc_bin train $rc_common $rc_one$(rc_tail_args "$1" one)"
    echo "-np $rc_np $rc_bin train $rc_common $rc_many$rc_x$(rc_tail_args "$1" many)"
    if [ -n "$rc_resume" ]; then
      echo "-np ${rc_resume#* } $rc_bin train $rc_common $rc_resumed --resume $(printf '%s/ck/step-%08d' "$1" "${rc_resume% *}")$(rc_tail_args "$1" resumed)"
    fi
  } | sed -e "s|^|$rc_mpirun |" -e "s/--plan \([^ ]*\)/--plan '\1'/"
}
rc_tail_args() { # DIR NAME: the options rc_run adds
  printf ' --device cpu --progress none --timeout %s --log %s/%s.jsonl --save %s/%s' \
    "${rc_timeout:-60}" "$1" "$2" "$1" "$2"
  [ "$rc_merged" = 1 ] && printf ' --save-merged %s/%s-merged' "$1" "$2"
  return 0
}
