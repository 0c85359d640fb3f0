/* The tokenizer's and generation's files a Hugging Face model directory
 * ships beside its weights (tokenizer.json, tokenizer_config.json,
 * tokenizer.model, special_tokens_map.json, added_tokens.json,
 * generation_config.json, vocab.json, vocab.txt, merges.txt,
 * chat_template.jinja/.json): transformers' AutoTokenizer and
 * GenerationConfig read them, roundpipe only copies them, byte for byte.
 * They are read once, when a run starts, and held in memory: every later
 * save and checkpoint then writes the same bytes, even when the directory
 * they came from is gone by then (the checkpoint a resumed run started
 * from, removed by --keep-checkpoints), and a file that cannot be read
 * stops the run before any work rather than after it. */
#ifndef RP_IO_COMPANIONS_H
#define RP_IO_COMPANIONS_H

#include "core/error.h"
#include "io/file_set.h"

typedef struct rp_companions rp_companions;

/* dir's companion files, in name order (none: an empty set). A file that
 * cannot be read, or of over 1 GiB, is an error naming it. */
rp_status rp_companions_read(const char *dir, rp_companions **out, rp_error *err);

/* How many, and the name of the i-th; NULL holds none. */
int rp_companions_count(const rp_companions *c);
const char *rp_companions_name(const rp_companions *c, int i);

/* Each as a member of fs, under its name (NULL: nothing added). */
rp_status rp_companions_add(const rp_companions *c, rp_file_set *fs, rp_error *err);

void rp_companions_destroy(rp_companions **c); /* no-op on NULL */

#endif
