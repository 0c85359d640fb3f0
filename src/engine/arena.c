#include "engine/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/padding.h"

int rp_arena_init(rp_arena *a, const rp_plan *plan, const rp_arena_spec *spec)
{
    memset(a, 0, sizeof *a);
    a->spec = *spec;
    a->nfwd = plan->nfwd;
    a->nbwd = plan->nbwd;
    int M = spec->microbatches, L = spec->nlayers;
    /* 64-byte aligned buffers; a bf16 one takes half the floats */
    size_t A = rp_padded_elements((spec->act_floats * rp_dtype_size(spec->act_dtype) +
                                   sizeof(float) - 1) / sizeof(float));
    size_t G = rp_padded_elements(spec->act_floats);
    a->buffer_floats = A;
    a->grad_floats = G;
    a->fwd_out = malloc(sizeof(size_t) * (size_t)(plan->nfwd ? plan->nfwd : 1) * (size_t)M);
    a->ckpt = malloc(sizeof(size_t) * (size_t)L * (size_t)M);
    a->bwd_out = malloc(sizeof(size_t) * (size_t)plan->nbwd * (size_t)M);
    a->is_ckpt = calloc((size_t)L, 1);
    a->kept = malloc(sizeof(size_t) * (size_t)L * (size_t)M);
    a->ckpt_of_fwd_out = malloc(sizeof(int) * (size_t)L);
    a->bwd_out_last = malloc(sizeof(int) * (size_t)(plan->nbwd ? plan->nbwd : 1));
    if (!a->fwd_out || !a->ckpt || !a->bwd_out || !a->is_ckpt || !a->kept || !a->ckpt_of_fwd_out ||
        !a->bwd_out_last ||
        (plan->kept > 0 && !spec->kept_floats && !spec->kept_on_executor)) {
        rp_arena_free(a);
        return -1;
    }
    for (int l = 0; l < L; l++)
        a->ckpt_of_fwd_out[l] = -1;
    int tail_first = rp_plan_tail_first(plan);
    /* a kept layer's input: here, or in its executor's pool, which reads
     * nothing of the arena for it */
    const int here = !spec->kept_on_executor;
    if (spec->layer_grain) {
        for (int l = 1; l < tail_first; l++)
            a->is_ckpt[l] = here || !rp_plan_is_kept(plan, l);
    } else {
        for (int i = 1; i < plan->nbwd; i++)
            if (plan->bwd[i].first > 0)
                a->is_ckpt[plan->bwd[i].first] = here || !rp_plan_is_kept(plan, plan->bwd[i].first);
    }
    for (int l = 1; here && l < tail_first; l++)
        if (rp_plan_is_kept(plan, l))
            a->is_ckpt[l] = 1;
    /* the checkpoint of the first layer of forward stage s + 1 is forward
     * stage s's output, the same bytes: one buffer holds both */
    for (int s = 0; s + 1 < plan->nfwd; s++)
        if (a->is_ckpt[plan->fwd[s + 1].first])
            a->ckpt_of_fwd_out[plan->fwd[s + 1].first] = s;
    size_t off = 0;
    for (int s = 0; s < plan->nfwd; s++)
        for (int m = 0; m < M; m++, off += A)
            a->fwd_out[s * M + m] = off;
    for (int l = 0; l < L; l++)
        for (int m = 0; m < M; m++) {
            const int s = a->ckpt_of_fwd_out[l];
            a->ckpt[l * M + m] = !a->is_ckpt[l] ? SIZE_MAX : s >= 0 ? a->fwd_out[s * M + m] : off;
            off += a->is_ckpt[l] && s < 0 ? A : 0;
        }
    /* an input gradient is read by the next backward stage before it
     * writes its own: stages of one parity take turns in one buffer */
    size_t bwd_at[2] = {SIZE_MAX, SIZE_MAX};
    for (int i = 0; i < plan->nbwd; i++) {
        const int has = plan->bwd[i].first > 0;
        if (has && bwd_at[i % 2] == SIZE_MAX) {
            bwd_at[i % 2] = off;
            off += (size_t)M * G;
        }
        for (int m = 0; m < M; m++)
            a->bwd_out[i * M + m] = has ? bwd_at[i % 2] + (size_t)m * G : SIZE_MAX;
        a->bwd_out_last[i] = -1;
        for (int j = i; has && j < plan->nbwd; j += 2)
            if (plan->bwd[j].first > 0)
                a->bwd_out_last[i] = j;
    }
    for (int l = 0; l < L; l++)
        for (int m = 0; m < M; m++) {
            int has = here && rp_plan_is_kept(plan, l);
            a->kept[l * M + m] = has ? off : SIZE_MAX;
            off += has ? rp_padded_elements(spec->kept_floats[l]) : 0;
        }
    a->spec.kept_floats = NULL; /* the caller's */
    a->loss = off;
    off += 2 * (size_t)RP_ARENA_RING * (size_t)M; /* doubles */
    a->sumsq = off;
    off += 2 * (size_t)RP_ARENA_RING * (size_t)L * RP_ARENA_SUMSQ_BLOCKS;
    a->router = off;
    off += ((size_t)RP_ARENA_RING * (size_t)M * spec->router_floats + 1) & ~(size_t)1;
    a->aux = off;
    off += 2 * (size_t)RP_ARENA_RING * (size_t)M; /* doubles */
    a->floats = off;
    return 0;
}

void rp_arena_free(rp_arena *a)
{
    free(a->fwd_out);
    free(a->ckpt);
    free(a->bwd_out);
    free(a->is_ckpt);
    free(a->kept);
    free(a->ckpt_of_fwd_out);
    free(a->bwd_out_last);
    memset(a, 0, sizeof *a);
}

int rp_arena_buffers(const rp_arena *a, const rp_plan *plan, rp_arena_buffer *out)
{
    int M = a->spec.microbatches, n = 0;
    for (int s = 0; s < a->nfwd; s++)
        for (int m = 0; m < M; m++, n++)
            if (out)
                out[n] = (rp_arena_buffer){a->fwd_out[s * M + m], a->buffer_floats, s + 1, m};
    for (int l = 0; l < a->spec.nlayers; l++) {
        if (!a->is_ckpt[l] || a->ckpt_of_fwd_out[l] >= 0) /* listed as a forward output */
            continue;
        int reader = -1; /* the job of the backward stage below the tail that holds l */
        for (int i = 1; i < plan->nbwd && reader < 0; i++)
            if (plan->bwd[i].first <= l && l <= plan->bwd[i].last)
                reader = plan->nfwd + i;
        for (int m = 0; m < M; m++, n++)
            if (out)
                out[n] = (rp_arena_buffer){a->ckpt[l * M + m], a->buffer_floats, reader, m};
    }
    for (int i = 0; i < a->nbwd && i < 2; i++) { /* the two buffers of the stages' turns */
        if (plan->bwd[i].first == 0)
            continue;
        /* read by every other stage below: one reader only when it is alone */
        int reader = a->bwd_out_last[i] == i ? plan->nfwd + i + 1 : -1;
        for (int m = 0; m < M; m++, n++)
            if (out)
                out[n] = (rp_arena_buffer){a->bwd_out[i * M + m], a->grad_floats, reader, m};
    }
    return n;
}
