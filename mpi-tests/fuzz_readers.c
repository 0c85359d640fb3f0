/* fuzz_readers: every reader of a user file, fed deterministic mutations of
 * seed files; each call must return a status, and a failure a message that
 * names the file. A crash, a hang (alarm) or a sanitizer report ends the
 * program, so a campaign on an ASan/UBSan build finds what the readers do
 * on bad input; the suite runs a few hundred inputs per reader
 * (test_fuzz_readers.sh).
 *
 *   fuzz_readers READER ITERATIONS SEED SEEDPATH [EXTRA]
 *
 * READER and its SEEDPATH:
 *   config       a config.json            (rp_config_parse)
 *   layers       a layer-times file       (rp_cost_parse)
 *   safetensors  a .safetensors file      (rp_safetensors_open_memory, every tensor to fp32)
 *   npy          a .npy file              (rp_npy_open_memory, token and mask checks)
 *   dataset      a token .npy             (rp_dataset_open through a file, seq_len 8)
 *   documents    a --documents .npy; EXTRA the token .npy (rp_dataset_set_documents)
 *   model        a model directory        (config.json, model.safetensors, or the
 *                                          index and shards mutated; rp_params_load_dir)
 *   base         a model directory        (the same through a LoRA base: FP8, MXFP4;
 *                                          rp_frozen_base_open, attach)
 *   peft         an adapter directory; EXTRA the model's config.json (rp_peft_read, load)
 *   checkpoint   a checkpoint directory   (rp_checkpoint_open)
 *   plan         a file holding a --plan text; EXTRA the model's number of layers
 *                                         (default 10; rp_plan_parse, and what it
 *                                          accepts printed and read back the same)
 *
 * Input i is reproducible alone: its mutations come from a generator keyed
 * by (SEED, i); RP_FUZZ_ONLY=i runs just that one, RP_FUZZ_SAVE=path
 * writes its bytes there (the file mutated, for a fixture) and
 * RP_FUZZ_VERBOSE=1 prints each refusal's message; RP_FUZZ_SLOW_MS=t names
 * each input that took longer than t ms (a reader's time should not grow
 * with a number in the file: a hang in the making). The index of the
 * input under way is kept in RP_FUZZ_PROGRESS (when set), so the input
 * behind a crash is known. */
#include <dirent.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "engine/frozen_base.h"
#include "engine/params.h"
#include "io/checkpoint.h"
#include "io/config.h"
#include "io/dataset.h"
#include "io/npy.h"
#include "io/peft.h"
#include "io/safetensors.h"
#include "kernels/cpu/ops.h"
#include "model/layout.h"
#include "plan/cost.h"
#include "plan/layers_file.h"
#include "plan/plan.h"

/* ---- deterministic generator (splitmix64) ---- */
static uint64_t rng_state;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* ---- a growable byte buffer ---- */
typedef struct buf {
    char *p;
    size_t len, cap;
} buf;
static void buf_reserve(buf *b, size_t n)
{
    if (n + 1 <= b->cap)
        return;
    b->cap = (n + 1) * 2;
    b->p = realloc(b->p, b->cap);
    if (!b->p) {
        fprintf(stderr, "fuzz_readers: out of memory\n");
        exit(2);
    }
}
static void buf_set(buf *b, const char *p, size_t n)
{
    buf_reserve(b, n);
    memcpy(b->p, p, n);
    b->len = n;
    b->p[n] = '\0';
}
/* replace [at, at + del) by ins (n bytes) */
static void buf_splice(buf *b, size_t at, size_t del, const char *ins, size_t n)
{
    if (at > b->len)
        at = b->len;
    if (del > b->len - at)
        del = b->len - at;
    buf_reserve(b, b->len - del + n);
    memmove(b->p + at + n, b->p + at + del, b->len - at - del);
    if (n)
        memcpy(b->p + at, ins, n);
    b->len = b->len - del + n;
    b->p[b->len] = '\0';
}

static int read_whole(const char *path, buf *b)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    b->len = 0;
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        buf_reserve(b, b->len + n);
        memcpy(b->p + b->len, chunk, n);
        b->len += n;
    }
    fclose(f);
    buf_reserve(b, b->len);
    b->p[b->len] = '\0';
    return 0;
}
static void write_whole(const char *path, const char *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) {
        fprintf(stderr, "fuzz_readers: cannot write %s\n", path);
        exit(2);
    }
}

/* ---- mutations ---- */
static const char *const json_numbers[] = {
    "0", "-1", "1", "2", "3", "-0", "1e400", "-1e400", "NaN", "Infinity", "1e-400",
    "9223372036854775807", "9223372036854775808", "-9223372036854775808",
    "18446744073709551616", "4294967296", "2147483648", "65536", "0.5", "1.5", "7", "1e9",
    "123456789012345678901234567890", "-2147483649", "true", "null", "\"7\"", "[]", "{}"};
static const char *const json_strings[] = {"\"\"", "\"F32\"", "\"BF16\"", "\"F8_E4M3\"",
                                           "\"U8\"", "\"I64\"", "\"fp8\"", "\"mxfp4\"",
                                           "\"yarn\"", "\"llama3\"", "\"all-linear\"",
                                           "\"sliding_attention\"", "\"\\u0000\"",
                                           "\"model.safetensors\"", "\"../x\"", "12", "null"};

/* positions of the start of every number and of every string in JSON text
 * (approximately: good enough to aim mutations) */
static size_t find_token(const buf *b, int want_string, size_t *len)
{
    size_t starts[4096], lens[4096], n = 0;
    for (size_t i = 0; i < b->len && n < 4096; i++) {
        char c = b->p[i];
        if (c == '"') {
            size_t j = i + 1;
            while (j < b->len && b->p[j] != '"')
                j += b->p[j] == '\\' ? 2 : 1;
            if (want_string) {
                starts[n] = i;
                lens[n++] = (j < b->len ? j + 1 : b->len) - i;
            }
            i = j;
        } else if (!want_string && (c == '-' || (c >= '0' && c <= '9'))) {
            size_t j = i;
            while (j < b->len && strchr("-+.eE0123456789", b->p[j]))
                j++;
            starts[n] = i;
            lens[n++] = j - i;
            i = j - 1;
        }
    }
    if (!n)
        return (size_t)-1;
    size_t k = below(n);
    *len = lens[k];
    return starts[k];
}

/* the end of the JSON value starting at i (brackets and strings balanced) */
static size_t value_end(const buf *b, size_t i)
{
    int depth = 0;
    for (size_t j = i; j < b->len; j++) {
        char c = b->p[j];
        if (c == '"') {
            j++;
            while (j < b->len && b->p[j] != '"')
                j += b->p[j] == '\\' ? 2 : 1;
            if (depth == 0)
                return j + 1;
        } else if (c == '[' || c == '{') {
            depth++;
        } else if (c == ']' || c == '}') {
            if (depth == 0)
                return j;
            if (--depth == 0)
                return j + 1;
        } else if (depth == 0 && (c == ',')) {
            return j;
        }
    }
    return b->len;
}

static void mutate_json(buf *b)
{
    size_t len = 0, at;
    switch (below(9)) {
    case 0: /* a number swapped for an odd value */
        if ((at = find_token(b, 0, &len)) != (size_t)-1) {
            const char *v = json_numbers[below(sizeof json_numbers / sizeof *json_numbers)];
            buf_splice(b, at, len, v, strlen(v));
        }
        break;
    case 1: /* a string swapped for a number or another string */
        if ((at = find_token(b, 1, &len)) != (size_t)-1) {
            const char *v = below(2)
                ? json_numbers[below(sizeof json_numbers / sizeof *json_numbers)]
                : json_strings[below(sizeof json_strings / sizeof *json_strings)];
            buf_splice(b, at, len, v, strlen(v));
        }
        break;
    case 2: /* a key and its value removed */
        if ((at = find_token(b, 1, &len)) != (size_t)-1) {
            size_t k = at + len;
            while (k < b->len && (b->p[k] == ' ' || b->p[k] == '\n'))
                k++;
            if (k < b->len && b->p[k] == ':') {
                size_t v = k + 1;
                while (v < b->len && (b->p[v] == ' ' || b->p[v] == '\n'))
                    v++;
                size_t e = value_end(b, v);
                if (e < b->len && b->p[e] == ',')
                    e++;
                buf_splice(b, at, e - at, "", 0);
            }
        }
        break;
    case 3: { /* an array emptied */
        size_t opens[1024], n = 0;
        for (size_t i = 0; i < b->len && n < 1024; i++)
            if (b->p[i] == '[')
                opens[n++] = i;
        if (n) {
            size_t o = opens[below(n)];
            size_t e = value_end(b, o);
            if (e > o + 1)
                buf_splice(b, o + 1, e - o - 2, "", 0);
        }
        break;
    }
    case 4: { /* an array lengthened: its first element repeated */
        size_t opens[1024], n = 0;
        for (size_t i = 0; i < b->len && n < 1024; i++)
            if (b->p[i] == '[')
                opens[n++] = i;
        if (n) {
            size_t o = opens[below(n)] + 1;
            size_t e = value_end(b, o);
            if (e > o && e - o < 4096) {
                char *copy = malloc(e - o + 1);
                memcpy(copy, b->p + o, e - o);
                copy[e - o] = ',';
                int times = 1 + (int)below(3);
                for (int t = 0; t < times; t++)
                    buf_splice(b, o, 0, copy, e - o + 1);
                free(copy);
            }
        }
        break;
    }
    case 5: { /* a value nested deep */
        if ((at = find_token(b, below(2), &len)) != (size_t)-1) {
            size_t depth = below(2) ? 64 : 5000;
            int obj = (int)below(2);
            buf open = {0}, close = {0};
            for (size_t d = 0; d < depth; d++) {
                buf_splice(&open, open.len, 0, obj ? "{\"a\":" : "[", obj ? 5 : 1);
                buf_splice(&close, close.len, 0, obj ? "}" : "]", 1);
            }
            buf_splice(b, at + len, 0, close.p, close.len);
            buf_splice(b, at, 0, open.p, open.len);
            free(open.p);
            free(close.p);
        }
        break;
    }
    case 6: /* a value duplicated as another key's */
        if ((at = find_token(b, 1, &len)) != (size_t)-1 && len < 200) {
            char *copy = malloc(len + 16);
            memcpy(copy, b->p + at, len);
            memcpy(copy + len, ": 1, ", 5);
            size_t brace = 0;
            for (size_t i = 0; i < b->len; i++)
                if (b->p[i] == '{') {
                    brace = i + 1;
                    if (below(3) == 0)
                        break;
                }
            if (brace)
                buf_splice(b, brace, 0, copy, len + 5);
            free(copy);
        }
        break;
    case 7: /* a number negated or scaled */
        if ((at = find_token(b, 0, &len)) != (size_t)-1) {
            if (below(2))
                buf_splice(b, at, 0, "-", 1);
            else
                buf_splice(b, at + len, 0, "000000", 6);
        }
        break;
    default: /* a string emptied or made long */
        if ((at = find_token(b, 1, &len)) != (size_t)-1 && len >= 2) {
            if (below(2)) {
                buf_splice(b, at + 1, len - 2, "", 0);
            } else {
                size_t n = 300 + below(5000);
                char *s = malloc(n);
                memset(s, 'a' + (int)below(26), n);
                buf_splice(b, at + 1, 0, s, n);
                free(s);
            }
        }
        break;
    }
}

static void mutate_bytes(buf *b)
{
    static const unsigned char special[] = {0, 0xff, 0x7f, 0x80, 0x01, 0xfe};
    switch (below(6)) {
    case 0: /* bit flip */
        if (b->len)
            b->p[below(b->len)] ^= (char)(1u << below(8));
        break;
    case 1: /* byte set */
        if (b->len)
            b->p[below(b->len)] = (char)special[below(sizeof special)];
        break;
    case 2: /* truncation */
        b->len = below(b->len + 1);
        b->p[b->len] = '\0';
        break;
    case 3: { /* chunk duplicated */
        if (!b->len)
            break;
        size_t at = below(b->len), n = 1 + below(b->len - at < 64 ? b->len - at : 64);
        char *copy = malloc(n);
        memcpy(copy, b->p + at, n);
        buf_splice(b, below(b->len + 1), 0, copy, n);
        free(copy);
        break;
    }
    case 4: { /* chunk deleted */
        if (!b->len)
            break;
        size_t at = below(b->len);
        buf_splice(b, at, 1 + below(64), "", 0);
        break;
    }
    default: { /* 8 bytes set to a little-endian extreme (an offset, a length) */
        if (b->len < 8)
            break;
        static const uint64_t v[] = {0, UINT64_MAX, INT64_MAX, (uint64_t)INT64_MAX + 1,
                                     0xffffffffull, 0x100000000ull, 1ull << 62};
        uint64_t x = v[below(sizeof v / sizeof *v)];
        memcpy(b->p + below(b->len - 7), &x, 8);
        break;
    }
    }
}

/* A safetensors file: its header mutated as JSON (the 8-byte length kept
 * true most of the time) or its bytes anywhere. */
static void mutate_safetensors(buf *b)
{
    uint64_t hl = 0;
    if (b->len >= 8)
        memcpy(&hl, b->p, 8);
    if (b->len < 8 || hl > b->len - 8 || below(4) == 0) {
        mutate_bytes(b);
        return;
    }
    buf h = {0};
    buf_set(&h, b->p + 8, (size_t)hl);
    mutate_json(&h);
    if (below(8)) {
        uint64_t nl = h.len;
        memcpy(b->p, &nl, 8);
    }
    buf_splice(b, 8, (size_t)hl, h.p, h.len);
    free(h.p);
}

static const char *reader_name;

/* A --plan text: its numbers, separators and fields. */
static void mutate_plan(buf *b)
{
    static const char *const numbers[] = {"0", "1", "2", "8", "9", "10", "1023", "1024", "1025",
                                          "4096", "4097", "2147483648", "99999999999999999999",
                                          "-1", "+3", " 3", "", "0x10"};
    static const char *const pieces[] = {",", "-", ";", "=", "fwd=", "bwd=", "width=", "keep=",
                                         ";width=1", ";keep=0", ";keep=9", ",0-0", "--"};
    size_t at, n;
    switch (below(4)) {
    case 0: /* a number replaced */
        for (at = below(b->len + 1); at < b->len && !(b->p[at] >= '0' && b->p[at] <= '9'); at++)
            ;
        for (n = 0; at + n < b->len && b->p[at + n] >= '0' && b->p[at + n] <= '9'; n++)
            ;
        if (n) {
            const char *x = numbers[below(sizeof numbers / sizeof *numbers)];
            buf_splice(b, at, n, x, strlen(x));
        }
        break;
    case 1: { /* a piece inserted */
        const char *x = pieces[below(sizeof pieces / sizeof *pieces)];
        buf_splice(b, below(b->len + 1), 0, x, strlen(x));
        break;
    }
    case 2: { /* the first field twice, or its list many times (past the stage limit) */
        char *semi = strchr(b->p, ';');
        size_t end = semi ? (size_t)(semi - b->p) : b->len;
        char *eq = memchr(b->p, '=', end);
        if (!eq || b->len > 4096) /* rounds of this stay below 3 MB */
            break;
        size_t body = (size_t)(eq + 1 - b->p);
        char *copy = malloc(end + 2);
        if (below(2)) { /* "fwd=...;fwd=...;..." */
            memcpy(copy, b->p, end);
            copy[end] = ';';
            buf_splice(b, 0, 0, copy, end + 1);
        } else { /* "fwd=L,L,L,...": 1 or 700 more copies of the list */
            copy[0] = ',';
            memcpy(copy + 1, b->p + body, end - body);
            int times = below(2) ? 1 : 700;
            for (int t = 0; t < times; t++)
                buf_splice(b, end, 0, copy, end - body + 1);
        }
        free(copy);
        break;
    }
    default:
        mutate_bytes(b);
        break;
    }
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && strcmp(s + n - m, tail) == 0;
}

static void mutate_file(const char *name, buf *b)
{
    int rounds = 1 + (int)below(3);
    for (int r = 0; r < rounds; r++) {
        if (ends_with(name, ".safetensors"))
            mutate_safetensors(b);
        else if (!strcmp(reader_name, "plan"))
            mutate_plan(b);
        else if ((ends_with(name, ".json") || strstr(name, "layers")) && below(4))
            mutate_json(b);
        else
            mutate_bytes(b);
    }
}

/* ---- checking one outcome ---- */
static long failures, accepted, refused;
static long current;
static int names_dir_file(const char *msg); /* a directory reader's */

/* A refusal must say what was wrong, naming the file (by the tail of its
 * path: some readers name the directory's file with the directory). */
static void check_outcome(rp_status s, const rp_error *err, const char *file)
{
    if (s == RP_OK) {
        accepted++;
        return;
    }
    refused++;
    if (getenv("RP_FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz_readers %s input %ld: refused: %s\n", reader_name, current,
                err->msg);
    const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
    if (!err->msg[0]) {
        failures++;
        fprintf(stderr, "fuzz_readers %s input %ld: status %d with no message\n", reader_name,
                current, (int)s);
    } else if (!strstr(err->msg, base) && !names_dir_file(err->msg)) {
        failures++;
        fprintf(stderr, "fuzz_readers %s input %ld: message does not name %s: %s\n",
                reader_name, current, base, err->msg);
    }
}

/* ---- the readers ---- */
static void run_config(const buf *b, const char *name)
{
    rp_model_config cfg;
    rp_error err = {0};
    check_outcome(rp_config_parse(b->p, b->len, name, &cfg, &err), &err, name);
}

static void run_layers(const buf *b, const char *name)
{
    rp_cost_model *m = NULL;
    rp_error err = {0};
    check_outcome(rp_cost_parse(b->p, b->len, name, &m, &err), &err, name);
    rp_cost_model_destroy(&m);
}

/* What --plan accepts for plan_layers layers is a valid plan, printed in
 * the syntax it reads back to the same plan (keep=0 prints as nothing:
 * --recompute's choice). */
static int plan_layers = 10;
static int same_plan(const rp_plan *a, const rp_plan *b)
{
    if (a->num_layers != b->num_layers || a->width != b->width || a->nfwd != b->nfwd ||
        a->nbwd != b->nbwd || (a->kept > 0 ? a->kept : 0) != (b->kept > 0 ? b->kept : 0))
        return 0;
    for (int i = 0; i < a->nfwd; i++)
        if (a->fwd[i].first != b->fwd[i].first || a->fwd[i].last != b->fwd[i].last)
            return 0;
    for (int i = 0; i < a->nbwd; i++)
        if (a->bwd[i].first != b->bwd[i].first || a->bwd[i].last != b->bwd[i].last)
            return 0;
    return 1;
}
static void run_plan(const buf *b)
{
    static rp_plan p, again;
    rp_error err = {0};
    rp_status s = rp_plan_parse(b->p, plan_layers, &p, &err);
    check_outcome(s, &err, "plan");
    if (s != RP_OK)
        return;
    static char text[64 * RP_PLAN_MAX_STAGES];
    size_t need = rp_plan_format(&p, text, sizeof text);
    if (need >= sizeof text || rp_plan_validate(&p, plan_layers, &err) != RP_OK ||
        rp_plan_parse(text, plan_layers, &again, &err) != RP_OK || !same_plan(&p, &again)) {
        failures++;
        fprintf(stderr, "fuzz_readers plan input %ld: accepted '%.200s', printed '%.200s', "
                "read back: %s\n", current, b->p, text, err.msg[0] ? err.msg : "a different plan");
    }
}

static void run_safetensors(const buf *b, const char *name)
{
    rp_safetensors *st = NULL;
    rp_error err = {0};
    rp_status s = rp_safetensors_open_memory(b->p, b->len, name, &st, &err);
    check_outcome(s, &err, name);
    if (s != RP_OK)
        return;
    (void)rp_safetensors_metadata(st, "format");
    for (size_t i = 0; i < rp_safetensors_count(st); i++) {
        rp_safetensors_tensor t;
        rp_error e2 = {0};
        if (rp_safetensors_find(st, rp_safetensors_name(st, i), &t, &e2) != RP_OK) {
            failures++;
            fprintf(stderr, "fuzz_readers safetensors input %ld: listed tensor %s not found\n",
                    current, rp_safetensors_name(st, i));
            continue;
        }
        if (t.numel > (1 << 22))
            continue;
        float *dst = malloc((size_t)(t.numel ? t.numel : 1) * sizeof *dst);
        s = rp_safetensors_read_f32(st, t.name, t.ndim, t.shape, dst, &e2);
        if (s != RP_OK)
            check_outcome(s, &e2, name);
        free(dst);
    }
    rp_safetensors_close(&st);
}

static void run_npy(const buf *b, const char *name)
{
    rp_npy *np = NULL;
    rp_error err = {0};
    rp_status s = rp_npy_open_memory(b->p, b->len, name, &np, &err);
    check_outcome(s, &err, name);
    if (s != RP_OK)
        return;
    int64_t sum = 0;
    for (int64_t i = 0; i < rp_npy_length(np); i++)
        sum += rp_npy_get(np, i) & 1;
    rp_error e2 = {0};
    if ((s = rp_npy_check_tokens(np, 1000, &e2)) != RP_OK)
        check_outcome(s, &e2, name);
    rp_error e3 = {0};
    if ((s = rp_npy_check_mask(np, np, &e3)) != RP_OK)
        check_outcome(s, &e3, name);
    rp_npy_close(&np);
    (void)sum;
}

static char work[256]; /* the temporary directory of mutated files */

static void run_dataset(const buf *b, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", work, name);
    write_whole(path, b->p, b->len);
    rp_dataset *ds = NULL;
    rp_error err = {0};
    rp_status s = rp_dataset_open(path, NULL, 8, 1000, &ds, &err);
    check_outcome(s, &err, path);
    if (s == RP_OK) {
        int32_t in[8], tg[8];
        uint8_t mask[8];
        for (int64_t i = 0; i < rp_dataset_samples(ds) && i < 64; i++)
            (void)rp_dataset_fill(ds, i, in, tg, mask);
    }
    rp_dataset_close(&ds);
}

static const char *extra_path; /* documents: the tokens; peft: the model's config.json */

static void run_documents(const buf *b, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", work, name);
    write_whole(path, b->p, b->len);
    rp_dataset *ds = NULL;
    rp_error err = {0};
    if (rp_dataset_open(extra_path, NULL, 16, 1 << 30, &ds, &err) != RP_OK) {
        fprintf(stderr, "fuzz_readers documents: the tokens %s: %s\n", extra_path, err.msg);
        exit(2);
    }
    rp_status s = rp_dataset_set_documents(ds, path, &err);
    check_outcome(s, &err, path);
    if (s == RP_OK) {
        int32_t in[16], tg[16], seg[16];
        uint8_t mask[16];
        for (int64_t i = 0; i < rp_dataset_samples(ds) && i < 64; i++) {
            (void)rp_dataset_fill(ds, i, in, tg, mask);
            rp_dataset_segments(ds, i, seg);
        }
    }
    rp_dataset_close(&ds);
}

/* A directory reader: every file of the seed directory copied into work,
 * one of them mutated per input. */
static char files[64][256];
static buf originals[64];
static int nfiles;
static int chosen;

static void dir_prepare(const char *seed_dir)
{
    DIR *d = opendir(seed_dir);
    if (!d) {
        fprintf(stderr, "fuzz_readers: cannot open %s\n", seed_dir);
        exit(2);
    }
    struct dirent *e;
    while ((e = readdir(d)) && nfiles < 64) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", seed_dir, e->d_name);
        struct stat sb;
        if (e->d_name[0] == '.' || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        snprintf(files[nfiles], sizeof files[nfiles], "%s", e->d_name);
        if (read_whole(path, &originals[nfiles]) != 0)
            exit(2);
        char to[1024];
        snprintf(to, sizeof to, "%s/%s", work, e->d_name);
        write_whole(to, originals[nfiles].p, originals[nfiles].len);
        nfiles++;
    }
    closedir(d);
    /* a stable order, whatever readdir's */
    for (int i = 0; i < nfiles; i++)
        for (int j = i + 1; j < nfiles; j++)
            if (strcmp(files[i], files[j]) > 0) {
                char t[256];
                memcpy(t, files[i], 256);
                memcpy(files[i], files[j], 256);
                memcpy(files[j], t, 256);
                buf tb = originals[i];
                originals[i] = originals[j];
                originals[j] = tb;
            }
}

/* A directory reader's refusal may rightly name another file of the
 * directory than the one mutated (a config.json grown past the tensors
 * its safetensors file holds: the tensor's file is named). */
static int names_dir_file(const char *msg)
{
    for (int i = 0; i < nfiles; i++)
        if (strstr(msg, files[i]))
            return 1;
    return 0;
}

static void dir_restore(void)
{
    char to[1024];
    snprintf(to, sizeof to, "%s/%s", work, files[chosen]);
    write_whole(to, originals[chosen].p, originals[chosen].len);
}

static void run_model(int base)
{
    char cfg_path[512];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", work);
    rp_model_config cfg;
    rp_error err = {0};
    rp_status s = rp_config_load(cfg_path, &cfg, &err);
    char mutated[512];
    snprintf(mutated, sizeof mutated, "%s/%s", work, files[chosen]);
    /* what the model supports, which the commands check next, naming the file */
    if (s == RP_OK && (s = rp_model_config_check(&cfg, &err)) != RP_OK)
        rp_error_prefix(&err, "%s", cfg_path);
    if (s != RP_OK) {
        check_outcome(s, &err, cfg_path);
        return;
    }
    if (!base) {
        /* a config grown past a tiny model is the planner's to refuse, not the loader's */
        size_t bytes = rp_params_bytes(&cfg, RP_F32);
        if (bytes == 0 || bytes > ((size_t)256 << 20))
            return;
        rp_params *p = NULL;
        if (rp_params_create(&cfg, RP_F32, &p, &err) != RP_OK)
            return;
        s = rp_params_load_dir(p, work, &err);
        check_outcome(s, &err, strstr(err.msg, "config.json") ? cfg_path : mutated);
        rp_params_destroy(&p);
        return;
    }
    if (cfg.lora.rank < 1) {
        cfg.lora.rank = 2;
        cfg.lora.alpha = 4;
        cfg.lora.targets = 1u; /* q_proj */
    }
    rp_frozen_base *fb = NULL;
    s = rp_frozen_base_open(&cfg, work, RP_F32, rp_frozen_base_reads(&rp_kernel_ops_cpu), &fb,
                            &err);
    if (s == RP_OK) {
        /* a mapped base (no store bytes) is read in place: open checked it all */
        size_t bytes = rp_frozen_base_store_bytes(fb);
        if (bytes > 0 && bytes <= ((size_t)256 << 20)) {
            void *store = aligned_alloc(64, (bytes + 63) / 64 * 64);
            s = rp_frozen_base_attach(fb, store, 0, 1, 1, &err);
            free(store);
        }
    }
    check_outcome(s, &err, strstr(err.msg, "config.json") ? cfg_path : mutated);
    rp_frozen_base_close(&fb);
}

static float *peft_scratch;
static float *peft_place(void *arg, int block, int expert, rp_lora_proj p, int b)
{
    (void)arg, (void)block, (void)expert, (void)p, (void)b;
    return peft_scratch;
}

static void run_peft(void)
{
    rp_model_config cfg;
    rp_error err = {0};
    if (rp_config_load(extra_path, &cfg, &err) != RP_OK) {
        fprintf(stderr, "fuzz_readers peft: %s\n", err.msg);
        exit(2);
    }
    char mutated[512];
    snprintf(mutated, sizeof mutated, "%s/%s", work, files[chosen]);
    rp_lora_config c;
    rp_status s = rp_peft_read(work, &cfg, &c, &err);
    if (s == RP_OK) {
        cfg.lora = c;
        s = rp_peft_load(work, &cfg, &c, peft_place, NULL, &err);
    }
    check_outcome(s, &err, mutated);
}

static void run_checkpoint(void)
{
    json_object *state = NULL;
    rp_error err = {0};
    char mutated[512];
    snprintf(mutated, sizeof mutated, "%s/%s", work, files[chosen]);
    rp_status s = rp_checkpoint_open(work, &state, &err);
    check_outcome(s, &err, strstr(err.msg, files[chosen]) ? mutated : work);
    json_object_put(state);
}

static void on_alarm(int sig)
{
    (void)sig;
    char line[128];
    int n = snprintf(line, sizeof line, "fuzz_readers %s input %ld: no answer within the alarm\n",
                     reader_name, current);
    if (write(2, line, (size_t)n) < 0)
        _exit(3);
    _exit(3);
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: fuzz_readers READER ITERATIONS SEED SEEDPATH [EXTRA]\n");
        return 2;
    }
    reader_name = argv[1];
    long iterations = atol(argv[2]);
    uint64_t seed = strtoull(argv[3], NULL, 10);
    const char *seed_path = argv[4];
    extra_path = argc > 5 ? argv[5] : NULL;
    if (!strcmp(reader_name, "plan") && extra_path)
        plan_layers = atoi(extra_path);
    const char *only = getenv("RP_FUZZ_ONLY");
    const char *save = getenv("RP_FUZZ_SAVE");
    const char *progress = getenv("RP_FUZZ_PROGRESS");
    int progress_fd = progress ? open(progress, O_WRONLY | O_CREAT | O_TRUNC, 0644) : -1;

    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(work, sizeof work, "%s/fuzz_readers.XXXXXX", tmp);
    if (!mkdtemp(work)) {
        perror("fuzz_readers: mkdtemp");
        return 2;
    }
    int dir_reader = !strcmp(reader_name, "model") || !strcmp(reader_name, "base") ||
                     !strcmp(reader_name, "peft") || !strcmp(reader_name, "checkpoint");
    if ((!strcmp(reader_name, "peft") || !strcmp(reader_name, "documents")) && !extra_path) {
        fprintf(stderr, "fuzz_readers %s: EXTRA is needed\n", reader_name);
        return 2;
    }
    buf original = {0}, input = {0};
    const char *name = strrchr(seed_path, '/') ? strrchr(seed_path, '/') + 1 : seed_path;
    if (dir_reader)
        dir_prepare(seed_path);
    else if (read_whole(seed_path, &original) != 0) {
        fprintf(stderr, "fuzz_readers: cannot read %s\n", seed_path);
        return 2;
    }
    if (!strcmp(reader_name, "peft"))
        peft_scratch = calloc((size_t)1 << 24, sizeof(float)); /* one adapter tensor's */
    signal(SIGALRM, on_alarm);

    long first = 0, last = iterations;
    if (only) {
        first = atol(only);
        last = first + 1;
    }
    const char *slow_env = getenv("RP_FUZZ_SLOW_MS");
    const double slow_ms = slow_env ? atof(slow_env) : 0;
    struct timespec t0, t1;
    for (current = first; current < last; current++) {
        if (slow_ms > 0 && current > first) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
            if (ms > slow_ms)
                fprintf(stderr, "fuzz_readers %s input %ld: slow: %.0f ms\n", reader_name,
                        current - 1, ms);
        }
        clock_gettime(CLOCK_MONOTONIC, &t0);
        rng_state = seed * 0x2545f4914f6cdd1dull + (uint64_t)current * 0x9e3779b97f4a7c15ull;
        (void)rnd();
        if (progress_fd >= 0) {
            char line[32];
            int n = snprintf(line, sizeof line, "%ld\n", current);
            if (pwrite(progress_fd, line, (size_t)n, 0) < 0)
                return 2;
        }
        if (dir_reader) {
            chosen = (int)below((size_t)nfiles);
            buf_set(&input, originals[chosen].p, originals[chosen].len);
            mutate_file(files[chosen], &input);
            char to[1024];
            snprintf(to, sizeof to, "%s/%s", work, files[chosen]);
            write_whole(to, input.p, input.len);
            if (save)
                write_whole(save, input.p, input.len);
            alarm(20);
            if (!strcmp(reader_name, "model"))
                run_model(0);
            else if (!strcmp(reader_name, "base"))
                run_model(1);
            else if (!strcmp(reader_name, "peft"))
                run_peft();
            else
                run_checkpoint();
            alarm(0);
            dir_restore();
            continue;
        }
        buf_set(&input, original.p, original.len);
        mutate_file(name, &input);
        if (save)
            write_whole(save, input.p, input.len);
        alarm(20);
        if (!strcmp(reader_name, "config"))
            run_config(&input, name);
        else if (!strcmp(reader_name, "layers"))
            run_layers(&input, name);
        else if (!strcmp(reader_name, "safetensors"))
            run_safetensors(&input, name);
        else if (!strcmp(reader_name, "npy"))
            run_npy(&input, name);
        else if (!strcmp(reader_name, "dataset"))
            run_dataset(&input, name);
        else if (!strcmp(reader_name, "documents"))
            run_documents(&input, name);
        else if (!strcmp(reader_name, "plan"))
            run_plan(&input);
        else {
            fprintf(stderr, "fuzz_readers: no reader %s\n", reader_name);
            return 2;
        }
        alarm(0);
    }
    /* the work directory and its files */
    if (dir_reader)
        for (int i = 0; i < nfiles; i++) {
            char to[1024];
            snprintf(to, sizeof to, "%s/%s", work, files[i]);
            unlink(to);
            free(originals[i].p);
        }
    else {
        char to[1024];
        snprintf(to, sizeof to, "%s/%s", work, name);
        unlink(to);
    }
    rmdir(work);
    free(original.p);
    free(input.p);
    free(peft_scratch);
    if (progress_fd >= 0)
        close(progress_fd);
    printf("fuzz_readers %s: %ld inputs, %ld accepted, %ld refused, %ld failures\n",
           reader_name, last - first, accepted, refused, failures);
    return failures ? 1 : 0;
}
