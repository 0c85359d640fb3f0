/* Plans already evaluated, by their stages (plan_memo.h): open addressing
 * over a table of at most half-full slots; keys and values in two arenas. */
#include "plan/plan_memo.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    uint64_t hash;
    size_t key_at, value_at; /* in keys (ints) and values (bytes) */
    int key_len;
    int used;
} slot;

struct rp_plan_memo {
    size_t value_bytes;
    slot *slots;
    size_t nslots, nused; /* nslots a power of two */
    int *keys;
    size_t nkeys, keys_cap;
    unsigned char *values;
    size_t values_len, values_cap;
    int *key; /* the key being looked up: 4 + 4 * RP_PLAN_MAX_STAGES ints */
};

rp_plan_memo *rp_plan_memo_create(size_t value_bytes)
{
    rp_plan_memo *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->value_bytes = value_bytes;
    m->nslots = 1024;
    m->slots = calloc(m->nslots, sizeof *m->slots);
    m->key = malloc(sizeof(int) * (4 + 4 * (size_t)RP_PLAN_MAX_STAGES));
    if (!m->slots || !m->key) {
        rp_plan_memo_destroy(&m);
        return NULL;
    }
    return m;
}

void rp_plan_memo_destroy(rp_plan_memo **memo)
{
    if (!memo || !*memo)
        return;
    free((*memo)->slots);
    free((*memo)->keys);
    free((*memo)->values);
    free((*memo)->key);
    free(*memo);
    *memo = NULL;
}

/* p's key into m->key: its length, and its FNV-1a hash in *hash. */
static int make_key(rp_plan_memo *m, const rp_plan *p, uint64_t *hash)
{
    int n = 0;
    m->key[n++] = p->width;
    m->key[n++] = p->num_layers;
    m->key[n++] = p->nfwd;
    m->key[n++] = p->nbwd;
    for (int i = 0; i < p->nfwd; i++) {
        m->key[n++] = p->fwd[i].first;
        m->key[n++] = p->fwd[i].last;
    }
    for (int i = 0; i < p->nbwd; i++) {
        m->key[n++] = p->bwd[i].first;
        m->key[n++] = p->bwd[i].last;
    }
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)m->key[i];
        h *= 1099511628211ull;
    }
    *hash = h;
    return n;
}

/* The slot holding the key (used) or where it would go (unused). */
static slot *probe(const rp_plan_memo *m, uint64_t hash, const int *key, int len)
{
    for (size_t i = (size_t)hash & (m->nslots - 1);; i = (i + 1) & (m->nslots - 1)) {
        slot *s = &m->slots[i];
        if (!s->used || (s->hash == hash && s->key_len == len &&
                         !memcmp(m->keys + s->key_at, key, sizeof(int) * (size_t)len)))
            return s;
    }
}

int rp_plan_memo_find(rp_plan_memo *memo, const rp_plan *p, void *value)
{
    if (!memo || p->nfwd < 0 || p->nbwd < 0 || p->nfwd > RP_PLAN_MAX_STAGES ||
        p->nbwd > RP_PLAN_MAX_STAGES)
        return 0;
    uint64_t hash;
    int len = make_key(memo, p, &hash);
    const slot *s = probe(memo, hash, memo->key, len);
    if (!s->used)
        return 0;
    memcpy(value, memo->values + s->value_at, memo->value_bytes);
    return 1;
}

/* Twice the slots, every entry placed again (its key stays in the arena). */
static int grow(rp_plan_memo *m)
{
    size_t n = m->nslots * 2;
    slot *fresh = calloc(n, sizeof *fresh);
    if (!fresh)
        return -1;
    for (size_t i = 0; i < m->nslots; i++) {
        if (!m->slots[i].used)
            continue;
        size_t j = (size_t)m->slots[i].hash & (n - 1);
        while (fresh[j].used)
            j = (j + 1) & (n - 1);
        fresh[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = fresh;
    m->nslots = n;
    return 0;
}

/* Room for `more` elements of `size` bytes past `len` in *buf of *cap. */
static int reserve(void **buf, size_t *cap, size_t len, size_t more, size_t size)
{
    if (len + more <= *cap)
        return 0;
    size_t c = *cap ? *cap : 4096;
    while (c < len + more)
        c *= 2;
    void *b = realloc(*buf, c * size);
    if (!b)
        return -1;
    *buf = b;
    *cap = c;
    return 0;
}

void rp_plan_memo_store(rp_plan_memo *memo, const rp_plan *p, const void *value)
{
    if (!memo || p->nfwd < 0 || p->nbwd < 0 || p->nfwd > RP_PLAN_MAX_STAGES ||
        p->nbwd > RP_PLAN_MAX_STAGES)
        return;
    if (2 * (memo->nused + 1) > memo->nslots && grow(memo) != 0)
        return;
    uint64_t hash;
    int len = make_key(memo, p, &hash);
    slot *s = probe(memo, hash, memo->key, len);
    if (s->used)
        return; /* already there */
    if (reserve((void **)&memo->keys, &memo->keys_cap, memo->nkeys, (size_t)len, sizeof(int)) ||
        reserve((void **)&memo->values, &memo->values_cap, memo->values_len, memo->value_bytes,
                1))
        return;
    memcpy(memo->keys + memo->nkeys, memo->key, sizeof(int) * (size_t)len);
    memcpy(memo->values + memo->values_len, value, memo->value_bytes);
    *s = (slot){hash, memo->nkeys, memo->values_len, len, 1};
    memo->nkeys += (size_t)len;
    memo->values_len += memo->value_bytes;
    memo->nused++;
}
