/* A model directory's tokenizer and generation files (see companions.h). */
#include "io/companions.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/read_file.h"

/* in name order: the order they are held, written and listed in */
static const char *const g_names[] = {
    "added_tokens.json", "chat_template.jinja",   "chat_template.json",
    "generation_config.json", "merges.txt",       "special_tokens_map.json",
    "tokenizer.json",    "tokenizer.model",       "tokenizer_config.json",
    "vocab.json",        "vocab.txt"};
#define NNAMES (int)(sizeof g_names / sizeof *g_names)

#define RP_COMPANION_MAX_BYTES ((size_t)1 << 30)

struct rp_companions {
    int n;
    const char *name[NNAMES];
    char *bytes[NNAMES];
    size_t len[NNAMES];
};

static int companion_index(const char *name)
{
    for (int i = 0; i < NNAMES; i++)
        if (strcmp(name, g_names[i]) == 0)
            return i;
    return -1;
}

rp_status rp_companions_read(const char *dir, rp_companions **out, rp_error *err)
{
    *out = NULL;
    rp_companions *c = calloc(1, sizeof *c);
    if (!c)
        return rp_error_set(err, RP_ERR_NOMEM, "%s: the tokenizer and generation files", dir);
    DIR *d = opendir(dir);
    if (!d) {
        free(c);
        return rp_error_set(err, RP_ERR_IO, "%s: cannot list the model directory: %s", dir,
                            strerror(errno));
    }
    int found[NNAMES] = {0};
    struct dirent *de;
    while ((de = readdir(d))) {
        int i = companion_index(de->d_name);
        if (i >= 0)
            found[i] = 1;
    }
    closedir(d);
    rp_status s = RP_OK;
    for (int i = 0; i < NNAMES && s == RP_OK; i++) {
        if (!found[i])
            continue;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, g_names[i]);
        s = rp_read_file(path, RP_COMPANION_MAX_BYTES, &c->bytes[c->n], &c->len[c->n], err);
        if (s == RP_OK)
            c->name[c->n++] = g_names[i];
    }
    if (s != RP_OK) {
        rp_companions_destroy(&c);
        return s;
    }
    *out = c;
    return RP_OK;
}

int rp_companions_count(const rp_companions *c)
{
    return c ? c->n : 0;
}

const char *rp_companions_name(const rp_companions *c, int i)
{
    return c && i >= 0 && i < c->n ? c->name[i] : NULL;
}

rp_status rp_companions_add(const rp_companions *c, rp_file_set *fs, rp_error *err)
{
    for (int i = 0; i < rp_companions_count(c); i++) {
        rp_atomic_file **af = NULL;
        RP_TRY(rp_file_set_add(fs, c->name[i], &af, err));
        RP_TRY(rp_atomic_file_write(af, c->bytes[i], c->len[i], err));
    }
    return RP_OK;
}

void rp_companions_destroy(rp_companions **c)
{
    if (!*c)
        return;
    for (int i = 0; i < (*c)->n; i++)
        free((*c)->bytes[i]);
    free(*c);
    *c = NULL;
}
