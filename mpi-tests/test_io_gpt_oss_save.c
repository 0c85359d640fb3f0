/* Proves: a gpt-oss model's save (rp_model_dir_save, what --save and
 * --save-merged call; a checkpoint's model.safetensors through the same
 * saved list, io/saved_tensors.h) writes each block's fused experts
 * (gate_up_proj [E, H, 2I] interleaved, down_proj [E, I, H], their biases)
 * a piece at a time: the save's peak host memory grows by less than one
 * block's fused experts (0.5 MiB measured; the old save, which fused every
 * block first, grew by all of them, 18 MiB here); the file holds the fused
 * layout element for element (by hand) and reads back to the same bits;
 * a non-finite value in an expert is refused in a checkpoint naming the
 * fused tensor and element, nothing complete left; experts given as sources
 * (--save-merged's, made as they are read) save the same bytes as experts
 * in memory; a non-finite value in a model directory's fused experts is
 * refused on load naming the file, the fused tensor and the expert. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/checkpoint.h"
#include "io/config.h"
#include "io/model_dir.h"
#include "io/safetensors.h"
#include "io/saved_tensors.h"

#include "rp_check.h"

enum { BLOCKS = 4, EXPERTS = 8, INTER = 192, HIDDEN = 256 };

/* One block's expert tensors in roundpipe's names and layout, and one
 * tensor that is no expert's. */
typedef struct model {
    rp_tensor_ref t[BLOCKS * EXPERTS * 6 + 1];
    char names[BLOCKS * EXPERTS * 6 + 1][96];
    float *data;
    int n;
    size_t floats;
} model;

static const char *const parts[3] = {"gate", "up", "down"};

static void model_make(model *m)
{
    memset(m, 0, sizeof *m);
    const size_t per_expert = 3 * (size_t)INTER * HIDDEN + 2 * INTER + HIDDEN;
    m->floats = BLOCKS * EXPERTS * per_expert + HIDDEN;
    m->data = malloc(m->floats * sizeof *m->data);
    ck_assert_ptr_nonnull(m->data);
    for (size_t i = 0; i < m->floats; i++) /* touched: resident before the save */
        m->data[i] = (float)((i * 2654435761u) % 1000003u) / 1000003.0f - 0.5f;
    float *at = m->data;
    for (int b = 0; b < BLOCKS; b++)
        for (int e = 0; e < EXPERTS; e++)
            for (int p = 0; p < 3; p++)
                for (int bias = 0; bias < 2; bias++) {
                    const int64_t out = p == 2 ? HIDDEN : INTER, in = p == 2 ? INTER : HIDDEN;
                    snprintf(m->names[m->n], sizeof m->names[0],
                             "model.layers.%d.mlp.experts.%d.%s.%s", b, e, parts[p],
                             bias ? "bias" : "weight");
                    m->t[m->n] = (rp_tensor_ref){m->names[m->n], bias ? 1 : 2,
                                                 {out, bias ? 1 : in}, at, NULL};
                    at += out * (bias ? 1 : in);
                    m->n++;
                }
    snprintf(m->names[m->n], sizeof m->names[0], "model.norm.weight");
    m->t[m->n] = (rp_tensor_ref){m->names[m->n], 1, {HIDDEN, 1}, at, NULL};
    m->n++;
}

static const rp_tensor_ref *find(const model *m, int b, int e, int p, int bias)
{
    return &m->t[((b * EXPERTS + e) * 3 + p) * 2 + bias];
}

static void config(rp_model_config *cfg)
{
    char path[1024];
    rp_error err = {0};
    snprintf(path, sizeof path, "%s/mpi-tests/fixtures/golden-gpt-oss/oss-m2/model/config.json",
             rp_test_srcdir());
    ck_assert_msg(rp_config_load(path, cfg, &err) == RP_OK, "%s", err.msg);
    ck_assert_int_eq(cfg->arch, RP_ARCH_GPT_OSS);
}

START_TEST(save_streams_the_fused_experts)
{
    model m;
    model_make(&m);
    rp_model_config cfg;
    config(&cfg);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/saved", rp_test_tmpdir());
    rp_error err = {0};

    const long rss = rp_test_peak_reset(); /* the save's growth from here */
    ck_assert_msg(rp_model_dir_save(dir, m.t, m.n, RP_F32, &cfg, NULL, NULL, NULL,
                                    &err) == RP_OK,
                  "%s", err.msg);
    const long grown = rp_test_status_kb("VmHWM") - rss;
    const long block_kb = (long)(EXPERTS * (3 * INTER * HIDDEN + 2 * INTER + HIDDEN) * 4 / 1024);
    printf("the save's peak grew by %ld kB; one block's fused experts are %ld kB, all %d "
           "blocks' %ld kB\n", grown, block_kb, BLOCKS, BLOCKS * block_kb);
#ifdef __SANITIZE_ADDRESS__
    /* AddressSanitizer's quarantine keeps every freed buffer resident (a
     * save's 64 Ki-value pieces: 4.4 MB here), so the bound says nothing */
    printf("the peak's bound is not checked under AddressSanitizer\n");
#else
    ck_assert_msg(grown < block_kb / 2, "the save's peak grew by %ld kB, one block's fused "
                  "experts are %ld kB", grown, block_kb);
#endif

    /* the fused layout by hand, element for element */
    char path[1100];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    rp_safetensors *st = NULL;
    ck_assert_msg(rp_safetensors_open(path, &st, &err) == RP_OK, "%s", err.msg);
    float *gu = malloc((size_t)EXPERTS * HIDDEN * 2 * INTER * sizeof *gu);
    float *dn = malloc((size_t)EXPERTS * INTER * HIDDEN * sizeof *dn);
    float *gub = malloc((size_t)EXPERTS * 2 * INTER * sizeof *gub);
    float *db = malloc((size_t)EXPERTS * HIDDEN * sizeof *db);
    ck_assert(gu && dn && gub && db);
    for (int b = 0; b < BLOCKS; b++) {
        char name[128];
        const int64_t s_gu[3] = {EXPERTS, HIDDEN, 2 * INTER}, s_dn[3] = {EXPERTS, INTER, HIDDEN},
                      s_gub[2] = {EXPERTS, 2 * INTER}, s_db[2] = {EXPERTS, HIDDEN};
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.gate_up_proj", b);
        ck_assert_msg(rp_safetensors_read_f32(st, name, 3, s_gu, gu, &err) == RP_OK, "%s",
                      err.msg);
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.down_proj", b);
        ck_assert_msg(rp_safetensors_read_f32(st, name, 3, s_dn, dn, &err) == RP_OK, "%s",
                      err.msg);
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.gate_up_proj_bias", b);
        ck_assert_msg(rp_safetensors_read_f32(st, name, 2, s_gub, gub, &err) == RP_OK, "%s",
                      err.msg);
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.down_proj_bias", b);
        ck_assert_msg(rp_safetensors_read_f32(st, name, 2, s_db, db, &err) == RP_OK, "%s",
                      err.msg);
        for (int e = 0; e < EXPERTS; e++) {
            const float *g = find(&m, b, e, 0, 0)->data, *u = find(&m, b, e, 1, 0)->data,
                        *d = find(&m, b, e, 2, 0)->data, *gb = find(&m, b, e, 0, 1)->data,
                        *ub = find(&m, b, e, 1, 1)->data, *dbias = find(&m, b, e, 2, 1)->data;
            for (int h = 0; h < HIDDEN; h++)
                for (int j = 0; j < INTER; j++) {
                    const size_t at = ((size_t)e * HIDDEN + h) * 2 * INTER + 2 * (size_t)j;
                    ck_assert(gu[at] == g[j * HIDDEN + h] && gu[at + 1] == u[j * HIDDEN + h]);
                    ck_assert(dn[((size_t)e * INTER + j) * HIDDEN + h] == d[h * INTER + j]);
                }
            for (int j = 0; j < INTER; j++)
                ck_assert(gub[e * 2 * INTER + 2 * j] == gb[j] &&
                          gub[e * 2 * INTER + 2 * j + 1] == ub[j]);
            for (int h = 0; h < HIDDEN; h++)
                ck_assert(db[e * HIDDEN + h] == dbias[h]);
        }
    }
    rp_safetensors_close(&st);
    free(gu);
    free(dn);
    free(gub);
    free(db);

    /* and read back (the fused tensors taken apart again) to the same bits */
    model back;
    model_make(&back);
    memset(back.data, 0, back.floats * sizeof *back.data);
    ck_assert_msg(rp_model_dir_load(dir, back.t, back.n, NULL, &err) == RP_OK, "%s", err.msg);
    ck_assert(memcmp(back.data, m.data, m.floats * sizeof *m.data) == 0);
    free(back.data);
    free(m.data);
}
END_TEST

/* A source that gives a tensor's data back a run at a time (what
 * --save-merged's experts are: io/gpt_oss_experts.h), noting the longest
 * run asked for. */
static size_t longest_run;
static void fill_from_data(const void *ctx, int64_t first, size_t count, float *dst)
{
    memcpy(dst, (const float *)ctx + first, count * sizeof *dst);
    longest_run = count > longest_run ? count : longest_run;
}

static char *slurp(const char *path, long *size)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)*size);
    ck_assert(buf && fread(buf, 1, (size_t)*size, f) == (size_t)*size);
    fclose(f);
    return buf;
}

/* Experts that are sources (every other one: a block mixes both) make the
 * same file, byte for byte, as experts in memory: each fused tensor's
 * pieces (gate_up_proj's cross experts: 98304 values each, pieces of
 * 65536) are gathered from strips of their runs, and no run asked for is
 * longer than a piece. */
START_TEST(experts_as_sources_save_the_same_bytes)
{
    model m;
    model_make(&m);
    rp_model_config cfg;
    config(&cfg);
    rp_error err = {0};
    char plain[1024], sourced[1024], path[1100];
    snprintf(plain, sizeof plain, "%s/plain", rp_test_tmpdir());
    snprintf(sourced, sizeof sourced, "%s/sourced", rp_test_tmpdir());
    ck_assert_msg(rp_model_dir_save(plain, m.t, m.n, RP_BF16, &cfg, NULL, NULL, NULL,
                                    &err) == RP_OK,
                  "%s", err.msg);
    static rp_tensor_source sources[BLOCKS * EXPERTS * 6 + 1];
    rp_tensor_ref refs[BLOCKS * EXPERTS * 6 + 1];
    for (int i = 0; i < m.n; i++) {
        refs[i] = m.t[i];
        if ((i / 6) % 2) { /* odd experts */
            sources[i] = (rp_tensor_source){fill_from_data, m.t[i].data};
            refs[i].data = NULL;
            refs[i].source = &sources[i];
        }
    }
    longest_run = 0;
    ck_assert_msg(rp_model_dir_save(sourced, refs, m.n, RP_BF16, &cfg, NULL, NULL, NULL,
                                    &err) ==
                  RP_OK, "%s", err.msg);
    ck_assert(longest_run > 0 && longest_run <= RP_SAFETENSORS_FILL_CHUNK);
    long n_plain, n_sourced;
    snprintf(path, sizeof path, "%s/model.safetensors", plain);
    char *a = slurp(path, &n_plain);
    snprintf(path, sizeof path, "%s/model.safetensors", sourced);
    char *b = slurp(path, &n_sourced);
    ck_assert_int_eq(n_plain, n_sourced);
    ck_assert(memcmp(a, b, (size_t)n_plain) == 0);
    free(a);
    free(b);
    free(m.data);
}
END_TEST

START_TEST(checkpoint_refuses_a_non_finite_expert)
{
    model m;
    model_make(&m);
    rp_model_config cfg;
    config(&cfg);
    rp_error err = {0};
    /* block 1, expert 3's up weight [j = 5][h = 7]: gate_up_proj's element
     * ((3 H + 7) 2I + 2 * 5 + 1) */
    float *up = (float *)find(&m, 1, 3, 1, 0)->data;
    up[5 * HIDDEN + 7] = NAN;
    rp_saved_tensors *saved = NULL;
    ck_assert_msg(rp_saved_tensors_make(m.t, m.n, &saved, &err) == RP_OK, "%s", err.msg);
    int nsaved = 0;
    const rp_tensor_ref *list = rp_saved_tensors_list(saved, &nsaved);
    ck_assert_int_eq(nsaved, BLOCKS * 4 + 1);
    rp_checkpoint_file files[2] = {{"model.safetensors", list, nsaved},
                                   {"optimizer.safetensors", m.t, 1}};
    rp_checkpoint_content content = {files, 2, &cfg, NULL, NULL};
    char root[1024];
    snprintf(root, sizeof root, "%s/ck", rp_test_tmpdir());
    rp_checkpoint_writer *w = NULL;
    ck_assert_msg(rp_checkpoint_begin(root, 7, &content, &w, &err) == RP_OK, "%s", err.msg);
    int sa, sn;
    /* block 0 is finite and written; block 1 is refused */
    ck_assert_int_eq(rp_saved_tensors_range(saved, 0, EXPERTS * 6, &sa, &sn, &err), RP_OK);
    ck_assert_msg(rp_checkpoint_put(w, 0, sa, sn, &err) == RP_OK, "%s", err.msg);
    ck_assert_int_eq(rp_saved_tensors_range(saved, EXPERTS * 6, EXPERTS * 6, &sa, &sn, &err),
                     RP_OK);
    ck_assert_int_eq(sa, 4);
    ck_assert_int_eq(rp_checkpoint_put(w, 0, sa, sn, &err), RP_ERR_NUMERIC);
    char want[256];
    snprintf(want, sizeof want, "checkpoint of step 7: model.safetensors: tensor "
             "'model.layers.1.mlp.experts.gate_up_proj': element %d is nan",
             (3 * HIDDEN + 7) * 2 * INTER + 2 * 5 + 1);
    ck_assert_msg(strstr(err.msg, want), "%s\nwanted: %s", err.msg, want);
    rp_checkpoint_abort(&w);
    char done[1100];
    struct stat sb;
    snprintf(done, sizeof done, "%s/step-00000007", root);
    ck_assert(stat(done, &sb) != 0);
    rp_saved_tensors_free(&saved);
    free(m.data);
}
END_TEST

/* A non-finite value in a fused experts tensor of a model directory is
 * refused naming the file and the tensor as the file holds it (the
 * expert's roundpipe name is in no file), with the expert. */
START_TEST(load_names_the_file_of_a_non_finite_expert)
{
    model m;
    model_make(&m);
    rp_model_config cfg;
    config(&cfg);
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/inf", rp_test_tmpdir());
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    rp_error err = {0};
    const float marker = 12345.6875f; /* block 1, expert 3's up weight, found in the file */
    ((float *)find(&m, 1, 3, 1, 0)->data)[5 * HIDDEN + 7] = marker;
    ck_assert_msg(rp_model_dir_save(dir, m.t, m.n, RP_F32, &cfg, NULL, NULL, NULL,
                                    &err) == RP_OK,
                  "%s", err.msg);
    long size;
    char *bytes = slurp(path, &size);
    char *at = memmem(bytes, (size_t)size, &marker, sizeof marker);
    ck_assert_ptr_nonnull(at);
    const float inf = INFINITY;
    memcpy(at, &inf, sizeof inf);
    FILE *f = fopen(path, "wb");
    ck_assert(f && fwrite(bytes, 1, (size_t)size, f) == (size_t)size && fclose(f) == 0);
    free(bytes);
    ck_assert_int_eq(rp_model_dir_load(dir, m.t, m.n, NULL, &err), RP_ERR_NUMERIC);
    ck_assert_msg(strstr(err.msg, path) &&
                      strstr(err.msg, "tensor 'model.layers.1.mlp.experts.gate_up_proj', "
                                      "expert 3") &&
                      strstr(err.msg, "is inf"),
                  "%s", err.msg);
    free(m.data);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("io_gpt_oss_save");
    TCase *tc = tcase_create("all");
    tcase_add_test(tc, save_streams_the_fused_experts);
    tcase_add_test(tc, checkpoint_refuses_a_non_finite_expert);
    tcase_add_test(tc, experts_as_sources_save_the_same_bytes);
    tcase_add_test(tc, load_names_the_file_of_a_non_finite_expert);
    tcase_add_checked_fixture(tc, NULL, rp_test_tmpdir_clean);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(suite, "serial")
