/* A model's tensors under the names a model directory holds them by (see
 * saved_tensors.h). */
#include "io/saved_tensors.h"

#include <stdlib.h>
#include <string.h>

#include "io/gpt_oss_experts.h"

/* One block's experts: in[src, src + count) saved as list[at, at + 4). */
typedef struct group {
    int src, count, at;
    char experts[512];
    rp_gpt_oss_fused fused;
} group;

struct rp_saved_tensors {
    rp_tensor_ref *list;
    int n;
    int *saved_at; /* [nin + 1]: in[i]'s first saved tensor (the group's for an expert's) */
    group *groups;
    int ngroups;
};

void rp_saved_tensors_free(rp_saved_tensors **s)
{
    if (!*s)
        return;
    for (int g = 0; g < (*s)->ngroups; g++)
        rp_gpt_oss_fused_free(&(*s)->groups[g].fused);
    free((*s)->list);
    free((*s)->saved_at);
    free((*s)->groups);
    free(*s);
    *s = NULL;
}

rp_status rp_saved_tensors_make(const rp_tensor_ref *in, int n, rp_saved_tensors **out,
                                rp_error *err)
{
    *out = NULL;
    rp_saved_tensors *s = calloc(1, sizeof *s);
    size_t slots = (size_t)(n ? n : 1);
    if (s) {
        s->list = calloc(slots, sizeof *s->list);
        s->saved_at = calloc(slots + 1, sizeof *s->saved_at);
        s->groups = calloc(slots, sizeof *s->groups);
    }
    if (!s || !s->list || !s->saved_at || !s->groups) {
        rp_saved_tensors_free(&s);
        return rp_error_set(err, RP_ERR_NOMEM, "the saved list of %d tensors", n);
    }
    rp_status st = RP_OK;
    for (int i = 0; i < n && st == RP_OK; i++) {
        group *g = &s->groups[s->ngroups];
        char x[512];
        int64_t e;
        int part, bias;
        s->saved_at[i] = s->n;
        if (!rp_gpt_oss_expert_name(in[i].name, g->experts, sizeof g->experts, &e, &part,
                                    &bias)) {
            s->list[s->n++] = in[i];
            continue;
        }
        int j = i + 1;
        while (j < n && rp_gpt_oss_expert_name(in[j].name, x, sizeof x, &e, &part, &bias) &&
               strcmp(x, g->experts) == 0)
            j++;
        g->src = i;
        g->count = j - i;
        g->at = s->n;
        st = rp_gpt_oss_fused_make(g->experts, in + i, j - i, &g->fused, s->list + s->n, err);
        if (st != RP_OK)
            break;
        for (int k = i + 1; k < j; k++)
            s->saved_at[k] = s->n;
        s->n += 4;
        s->ngroups++;
        i = j - 1;
    }
    s->saved_at[n] = s->n;
    if (st != RP_OK) {
        rp_saved_tensors_free(&s);
        return st;
    }
    *out = s;
    return RP_OK;
}

const rp_tensor_ref *rp_saved_tensors_list(const rp_saved_tensors *s, int *n)
{
    *n = s->n;
    return s->list;
}

rp_status rp_saved_tensors_range(const rp_saved_tensors *s, int first, int count,
                                 int *saved_first, int *saved_count, rp_error *err)
{
    *saved_first = s->saved_at[first];
    *saved_count = s->saved_at[first + count] - *saved_first;
    for (int g = 0; g < s->ngroups; g++) {
        const group *gr = &s->groups[g];
        if (gr->src + gr->count <= first || gr->src >= first + count)
            continue;
        if (gr->src < first || gr->src + gr->count > first + count)
            return rp_error_set(err, RP_ERR_INTERNAL, "%s: tensors %d-%d asked for, a part of "
                                "its experts", gr->experts, first, first + count - 1);
    }
    return RP_OK;
}
