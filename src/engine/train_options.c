#include "engine/train_options.h"

#include "core/unproven.h"
#include "kernels/attention_choice.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

rp_status rp_train_options_documents_on_cuda(const rp_train_options *o, rp_error *err)
{
    if (!o->documents && !o->eval_documents)
        return RP_OK;
    if (!rp_unproven_allowed(RP_UNPROVEN_DOCUMENTS))
        return rp_error_set(err, RP_ERR_UNSUPPORTED, RP_DOCUMENTS_NOT_ON_CUDA);
    if (o->attention == RP_ATTENTION_CUDNN)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, RP_DOCUMENTS_NOT_ON_CUDNN);
    return RP_OK;
}

rp_status rp_train_options_refuse_dtype(const rp_train_options *o, rp_status status,
                                        rp_error *err)
{
    return rp_error_set(err, status,
                        "--dtype fp32 with --device %s: the CUDA executor%s computes in bf16 "
                        "only; use --dtype bf16 (its default) or --device cpu",
                        rp_device_kind_name(o->device),
                        o->device == RP_DEVICE_AUTO ? " (chosen by auto: a GPU is usable)" : "");
}

/* The LoRA options (the targets' names are checked where they are parsed,
 * rp_lora_targets_parse). */
static rp_status lora_check(const rp_train_options *o, rp_error *err)
{
    if (o->lora_rank < 1) {
        if (o->lora_given & RP_LORA_GIVEN_MERGED)
            return rp_error_set(err, RP_ERR_INVALID_ARG, "--save-merged needs LoRA (--lora-rank "
                                "R): without it --save writes the whole model");
        if (o->lora_given)
            return rp_error_set(err, RP_ERR_INVALID_ARG, "--lora-alpha, --lora-targets, "
                                "--lora-dropout, --use-rslora and --lora-init need --lora-rank "
                                "R >= 1 (got %lld)", (long long)o->lora_rank);
        return RP_OK;
    }
    if (!(o->lora_dropout >= 0 && o->lora_dropout < 1))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--lora-dropout must be in [0, 1) (got %g)",
                            o->lora_dropout);
    if ((o->lora_given & RP_LORA_GIVEN_ALPHA) && !isfinite(o->lora_alpha))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--lora-alpha must be a finite number");
    return RP_OK; /* several nodes: refused once their count is known (run.c) */
}

rp_status rp_train_options_check(const rp_train_options *o, rp_error *err)
{
    /* an empty path (an unset shell variable) is a mistake, not "none":
     * --resume '' would otherwise start fresh without a word */
    if (o->resume && !o->resume[0])
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--resume: an empty path (give a "
                            "checkpoint directory, or auto)");
    if (o->checkpoint_dir && !o->checkpoint_dir[0])
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--checkpoint-dir: an empty path");
    if (!o->resume && !o->model_dir == !o->init_config)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "exactly one of --model DIR or --init-config FILE is required");
    if (o->resume && o->model_dir && o->init_config)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "--model and --init-config together (with --resume, either or none)");
    if (o->checkpoint_every > 0 && !o->checkpoint_dir)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--checkpoint-every needs --checkpoint-dir");
    if (o->resume && strcmp(o->resume, "auto") == 0 && !o->checkpoint_dir)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--resume auto needs --checkpoint-dir");
    if (!o->data)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--data FILE.npy is required");
    /* each option's own range (its row's); the checks after it are how options combine */
    size_t nrows;
    const rp_option *rows = rp_train_option_rows(&nrows);
    RP_TRY(rp_options_check(rows, nrows, o, err));
    int64_t m = o->microbatches ? o->microbatches : o->batch_size;
    if (m < 1 || o->batch_size % m != 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "--microbatches %lld must be >= 1 and divide --batch-size %lld",
                            (long long)m, (long long)o->batch_size);
    if (!(o->min_lr >= 0) || !(o->min_lr <= o->lr))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--min-lr must be between 0 and --lr");
    if (o->dtype != RP_F32 && o->dtype != RP_BF16)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--dtype must be fp32 or bf16");
    if (o->device == RP_DEVICE_CUDA && o->dtype_set && o->dtype != RP_BF16)
        return rp_train_options_refuse_dtype(o, RP_ERR_INVALID_ARG, err);
    if ((o->eval_mask || o->eval_documents || o->eval_every || o->eval_samples) && !o->eval_data)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--eval-mask, --eval-documents, "
                            "--eval-every and --eval-samples need --eval-data");
    if (o->eval_every && o->optimizer_lag)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "--eval-every with --optimizer-lag 1: an "
                            "evaluation needs every update of its step applied, which a lagged "
                            "optimizer does only at the end; evaluate after the last step "
                            "(without --eval-every)");
    RP_TRY(rp_unproven_check(err)); /* the maintainer's switch, before it is read */
    if (o->device == RP_DEVICE_CUDA) /* run.c again for --device auto */
        RP_TRY(rp_train_options_documents_on_cuda(o, err));
    if (o->save_dtype_set && o->save_dtype != RP_F32 && o->save_dtype != RP_BF16 &&
        o->save_dtype != RP_F16)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--save-dtype must be fp32, bf16 or fp16");
    if (o->link_groups && o->topology)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--link-groups and --topology both say "
                            "which ranks share a PCIe link: give one of them");
    if (o->pipelines < 1 || m % o->pipelines != 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "--pipelines %d must be >= 1 and divide the %lld microbatches",
                            o->pipelines, (long long)m);
    return lora_check(o, err);
}
