/* Proves, for the library's rp_train_run on a caller-given communicator:
 * - --init-config draws what it documents: matrices and embeddings with
 *   mean 0 and std initializer_range (0.02), norm weights exactly 1 (seen
 *   through a save after a step with lr 0, which must leave them unchanged);
 * - the loss and the update do not depend on the microbatch count M
 *   (B = 4 as M = 1, 2, 4) beyond rounding (1e-5 relative);
 * - a run on all ranks of the test matches a run on a one-rank
 *   sub-communicator (the library never uses MPI_COMM_WORLD itself);
 * - bf16 executor compute stays within 2e-2 of fp32 and is not identical;
 * - the option table (engine/train_set.c): every row's default text parses and
 *   the defaults are the documented ones (and the one field no option sets,
 *   progress_interval_s); every row is named once and has its --help text;
 *   an unknown name set through the API is refused with the nearest row's
 *   name, never --help (the API has none);
 * - a status made collective (engine/agree.c): each failing rank keeps its
 *   own message and status, whatever the lowest failing rank's; a rank that
 *   did not fail returns the lowest failing rank's status, naming it;
 * - a --model loaded by parts (a node's ranks each one) covers every layer
 *   once and gives the whole load's masters and compute copies, bytes.
 * Ranks: 1 2 */
#include <json-c/json.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/checkpoint_contents.h"
#include "engine/checkpoints.h"
#include "engine/frozen_base.h"
#include "engine/params.h"
#include "engine/run_impl.h"
#include "engine/trainer.h"
#include "io/config.h"
#include "io/model_dir.h"
#include "io/safetensors.h"
#include "kernels/cpu/ops.h"
#include "rp_check.h"

#define MAX_STEPS 8

static char data_path[512], cfg_path[512];
static double g_lr = 1e-3;      /* learning rate of the next train() */
static const char *g_save;      /* --save of the next train() */

static void paths(void)
{
    const char *b = getenv("RP_BUILDDIR"), *s = getenv("RP_SRCDIR");
    snprintf(data_path, sizeof data_path, "%s/examples/data/gnu-licenses.npy", b ? b : ".");
    snprintf(cfg_path, sizeof cfg_path, "%s/examples/tiny-config.json", s ? s : "..");
}

/* Train on comm and return the logged losses (read back on every rank). */
static int train(MPI_Comm comm, int64_t M, rp_dtype dtype, int steps, double *loss)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    char log[600];
    snprintf(log, sizeof log, "%s/train-%d-%lld-%d.jsonl", rp_test_tmpdir(), rank,
             (long long)M, (int)dtype);
    rp_train_options o;
    rp_train_options_default(&o);
    o.init_config = cfg_path;
    o.data = data_path;
    o.seq_len = 32;
    o.batch_size = 4;
    o.microbatches = M;
    o.steps = steps;
    o.lr = g_lr;
    o.save_dir = g_save;
    o.warmup_steps = 0;
    o.device = RP_DEVICE_CPU; /* the bf16 cases are CPU bf16 */
    o.dtype = dtype;
    o.dtype_set = 1;
    o.seed = 7;
    o.threads = 1;
    o.log_path = log;
    o.progress = RP_PROGRESS_NONE;
    rp_error err = {0};
    rp_logger lg = {.stream = NULL, .level = RP_LOG_QUIET, .rank = rank};
    rp_status s = rp_train_run(&o, comm, &lg, &err);
    if (s != RP_OK)
        fprintf(stderr, "[rank %d] rp_train_run: %s\n", rank, err.msg);
    ck_assert_msg(s == RP_OK, "rp_train_run: %s", err.msg);
    /* rank 0 of comm wrote the log; share the losses */
    int n = 0;
    if (rank == 0) {
        FILE *f = fopen(log, "r");
        char line[1024];
        while (f && n < MAX_STEPS && fgets(line, sizeof line, f)) {
            json_object *j = json_tokener_parse(line), *v;
            if (j && json_object_object_get_ex(j, "loss", &v))
                loss[n++] = json_object_get_double(v);
            json_object_put(j);
        }
        if (f)
            fclose(f);
        remove(log);
    }
    MPI_Bcast(&n, 1, MPI_INT, 0, comm);
    MPI_Bcast(loss, n, MPI_DOUBLE, 0, comm);
    return n;
}

START_TEST(init_config_draws_documented_distribution)
{
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char dir[600], file[700];
    snprintf(dir, sizeof dir, "%s/init", rp_test_tmpdir());
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    double loss[MAX_STEPS];
    g_lr = 0.0;
    g_save = dir;
    int n = train(MPI_COMM_WORLD, 2, RP_F32, 1, loss);
    g_lr = 1e-3;
    g_save = NULL;
    ck_assert_int_eq(n, 1);
    if (rank != 0) /* only rank 0 saves */
        return;
    rp_safetensors *st = NULL;
    rp_error err = {0};
    ck_assert_msg(rp_safetensors_open(file, &st, &err) == RP_OK, "%s", err.msg);
    int matrices = 0, norms = 0;
    for (size_t i = 0; i < rp_safetensors_count(st); i++) {
        const char *name = rp_safetensors_name(st, i);
        rp_safetensors_tensor t;
        ck_assert_int_eq(rp_safetensors_find(st, name, &t, &err), RP_OK);
        float *w = malloc((size_t)t.numel * sizeof *w);
        ck_assert_int_eq(rp_safetensors_read_f32(st, name, t.ndim, t.shape, w, &err), RP_OK);
        if (strstr(name, "norm")) {
            for (int64_t j = 0; j < t.numel; j++)
                ck_assert_msg(w[j] == 1.0f, "%s[%lld] = %g", name, (long long)j, w[j]);
            norms++;
        } else {
            double s1 = 0, s2 = 0;
            for (int64_t j = 0; j < t.numel; j++) {
                s1 += w[j];
                s2 += (double)w[j] * w[j];
            }
            double mean = s1 / (double)t.numel, sd = sqrt(s2 / (double)t.numel - mean * mean);
            /* 5 standard errors: mean se = 0.02/sqrt(n), sd se ~ 0.02/sqrt(2n) */
            ck_assert_msg(fabs(mean) < 5 * 0.02 / sqrt((double)t.numel), "%s mean %g", name, mean);
            ck_assert_msg(fabs(sd - 0.02) < 5 * 0.02 / sqrt(2.0 * (double)t.numel), "%s std %g",
                          name, sd);
            matrices++;
        }
        free(w);
    }
    rp_safetensors_close(&st);
    ck_assert_int_eq(matrices, 1 + 4 * 7); /* tied embedding + 7 matrices per block */
    ck_assert_int_eq(norms, 1 + 4 * 4);    /* final + 2 per block + q/k norms */
}
END_TEST

START_TEST(microbatch_count_does_not_matter)
{
    double l1[MAX_STEPS], l2[MAX_STEPS], l4[MAX_STEPS];
    ck_assert_int_eq(train(MPI_COMM_WORLD, 1, RP_F32, 4, l1), 4);
    ck_assert_int_eq(train(MPI_COMM_WORLD, 2, RP_F32, 4, l2), 4);
    ck_assert_int_eq(train(MPI_COMM_WORLD, 4, RP_F32, 4, l4), 4);
    for (int k = 0; k < 4; k++) {
        ck_assert_msg(fabs(l2[k] - l1[k]) <= 1e-5 * fabs(l1[k]), "step %d: M=2 %.9g M=1 %.9g",
                      k + 1, l2[k], l1[k]);
        ck_assert_msg(fabs(l4[k] - l1[k]) <= 1e-5 * fabs(l1[k]), "step %d: M=4 %.9g M=1 %.9g",
                      k + 1, l4[k], l1[k]);
    }
    ck_assert(l1[3] < l1[0]); /* and it learns */
}
END_TEST

START_TEST(sub_communicator_matches_world)
{
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    double world[MAX_STEPS], self[MAX_STEPS];
    ck_assert_int_eq(train(MPI_COMM_WORLD, 4, RP_F32, 3, world), 3);
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? 0 : MPI_UNDEFINED, 0, &sub);
    if (sub != MPI_COMM_NULL) {
        ck_assert_int_eq(train(sub, 4, RP_F32, 3, self), 3);
        MPI_Comm_free(&sub);
        for (int k = 0; k < 3; k++)
            ck_assert_msg(fabs(world[k] - self[k]) <= 1e-6 * fabs(self[k]),
                          "step %d: world %.9g one rank %.9g", k + 1, world[k], self[k]);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}
END_TEST

START_TEST(bf16_compute_close_to_fp32)
{
    double f[MAX_STEPS], b[MAX_STEPS];
    ck_assert_int_eq(train(MPI_COMM_WORLD, 2, RP_F32, 3, f), 3);
    ck_assert_int_eq(train(MPI_COMM_WORLD, 2, RP_BF16, 3, b), 3);
    int same = 1;
    for (int k = 0; k < 3; k++) {
        ck_assert_msg(fabs(b[k] - f[k]) <= 2e-2 * fabs(f[k]), "step %d: bf16 %.6g fp32 %.6g",
                      k + 1, b[k], f[k]);
        same &= b[k] == f[k];
    }
    ck_assert_msg(!same, "bf16 run is bit-identical to fp32: weights were not rounded");
}
END_TEST

START_TEST(option_table_defaults_and_rows)
{
    size_t n;
    const rp_option *rows = rp_train_option_rows(&n);
    rp_train_options o;
    rp_error err = {0};
    memset(&o, 0, sizeof o);
    ck_assert_msg(rp_options_default(rows, n, &o, &err) == RP_OK, "%s", err.msg);
    rp_train_options_default(&o);
    ck_assert_int_eq(o.seq_len, 1024);
    ck_assert_int_eq(o.batch_size, 8);
    ck_assert_int_eq(o.microbatches, 0);
    ck_assert(o.lr == 3e-4 && o.min_lr == 0 && o.weight_decay == 0.01);
    ck_assert(o.beta1 == 0.9 && o.beta2 == 0.999 && o.eps == 1e-8 && o.grad_clip == 1.0);
    ck_assert_int_eq(o.schedule, RP_LR_COSINE);
    ck_assert(o.dtype == RP_F32 && !o.dtype_set && o.grad_dtype == RP_F32 && !o.save_dtype_set);
    ck_assert_uint_eq(o.seed, 1234);
    ck_assert_int_eq(o.device, RP_DEVICE_AUTO);
    ck_assert_int_eq(o.progress, RP_PROGRESS_AUTO);
    ck_assert(o.progress_interval_s == 5.0 && o.timeout_s == 600.0 && o.chunk_mib == 16.0);
    ck_assert(o.bind == 1 && o.pipelines == 1 && o.keep_checkpoints == 2 && o.deal == 0);
    ck_assert(o.recompute == RP_RECOMPUTE_AUTO && o.activation_numa == 0 && o.lora_given == 0);
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(rows[i].help && rows[i].help[0], "--%s has no help", rows[i].name);
        for (size_t j = 0; j < i; j++)
            ck_assert_str_ne(rows[i].name, rows[j].name);
    }
    ck_assert_int_eq(rp_train_options_set(&o, "pipelinse", "2", &err), RP_ERR_INVALID_ARG);
    ck_assert_str_eq(err.msg, "unknown option '--pipelinse'; did you mean --pipelines?");
    ck_assert_int_eq(rp_train_options_set(&o, "help", "1", &err), RP_ERR_INVALID_ARG);
    ck_assert_str_eq(err.msg, "unknown option '--help'");
}
END_TEST

/* Rank r fails with the status fail[r] (RP_OK: it did not fail); what
 * this rank got wrong goes into `why` (empty: nothing), so that no rank
 * leaves the agreements early on a failed check (the others would wait). */
static void agree_case(const rp_status *fail, int nranks, char *why, size_t size_why)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    static rp_engine e;
    static rp_train_options o;
    memset(&e, 0, sizeof e);
    o.timeout_s = 30;
    e.o = &o;
    e.nd.world_rank = rank;
    e.it_first = 1;
    rp_error err = {0};
    const rp_status mine = rank < nranks ? fail[rank] : RP_OK;
    rp_status s = mine == RP_OK ? RP_OK : rp_error_set(&err, mine, "rank %d's own failure", rank);
    s = rp_run_agree(&e, s, MPI_COMM_WORLD, &err);
    int first = -1;
    for (int r = (size < nranks ? size : nranks) - 1; r >= 0; r--)
        if (fail[r] != RP_OK)
            first = r;
    char want[64] = "";
    rp_status want_s = RP_OK;
    if (first >= 0 && mine != RP_OK) {
        snprintf(want, sizeof want, "rank %d's own failure", rank);
        want_s = mine;
    } else if (first >= 0) {
        snprintf(want, sizeof want, "rank %d failed", first);
        want_s = fail[first];
    }
    if (s != want_s || (first >= 0 && (err.code != want_s || !strstr(err.msg, want))))
        snprintf(why, size_why, "rank %d: status %d (%s), message '%s'; expected %d (%s), '%s'",
                 rank, s, rp_status_string(s), err.msg, want_s, rp_status_string(want_s), want);
}

/* A node's ranks load a --model by parts (engine/params.h): the parts
 * cover every layer once, contiguous and in order from layer 0, none
 * holding more than its share of the elements and a layer; and the parts,
 * loaded one after the other into one store, give the masters and bf16
 * compute copies of a whole load, byte for byte (a dense model, a mixture
 * of experts, gpt-oss from MXFP4 files), with the file's dtype. */
START_TEST(a_model_loaded_by_parts_is_the_whole)
{
    const char *s = getenv("RP_SRCDIR");
    static const char *const dirs[] = {"mpi-tests/fixtures/golden/qwen3/model",
                                       "mpi-tests/fixtures/golden-moe/moe-m1/model",
                                       "mpi-tests/fixtures/golden-gpt-oss/oss-mxfp4/model"};
    for (int d = 0; d < 3; d++) {
        char dir[600], cfgfile[700];
        snprintf(dir, sizeof dir, "%s/%s", s ? s : ".", dirs[d]);
        snprintf(cfgfile, sizeof cfgfile, "%s/config.json", dir);
        rp_model_config cfg;
        rp_error err = {0};
        ck_assert_msg(rp_config_load(cfgfile, &cfg, &err) == RP_OK, "%s", err.msg);
        rp_params *whole = NULL, *parted = NULL;
        ck_assert_int_eq(rp_params_create(&cfg, RP_BF16, &whole, &err), RP_OK);
        ck_assert_msg(rp_params_load_dir(whole, dir, &err) == RP_OK, "%s", err.msg);
        double total = 0, largest = 0;
        for (int l = 0; l < whole->nlayers; l++) {
            total += (double)whole->layers[l].numel;
            if ((double)whole->layers[l].numel > largest)
                largest = (double)whole->layers[l].numel;
        }
        for (int parts = 1; parts <= whole->nlayers + 2; parts++) {
            int next = 0;
            for (int part = 0; part < parts; part++) {
                int first, end;
                rp_params_layer_part(whole, part, parts, &first, &end);
                ck_assert_msg(first == next && end >= first && end <= whole->nlayers,
                              "%s: part %d of %d: layers [%d, %d) after %d", dirs[d], part,
                              parts, first, end, next);
                double mine = 0;
                for (int l = first; l < end; l++)
                    mine += (double)whole->layers[l].numel;
                ck_assert_msg(mine <= total / parts + largest, "%s: part %d of %d: %g elements",
                              dirs[d], part, parts, mine);
                next = end;
            }
            ck_assert_int_eq(next, whole->nlayers);
        }
        for (int parts = 1; parts <= 4; parts++) {
            ck_assert_int_eq(rp_params_create(&cfg, RP_BF16, &parted, &err), RP_OK);
            for (int part = parts - 1; part >= 0; part--) /* in any order */
                ck_assert_msg(rp_params_load_dir_part(parted, dir, part, parts, &err) == RP_OK,
                              "%s", err.msg);
            for (int l = 0; l < whole->nlayers; l++) {
                ck_assert(!memcmp(whole->st[l].master, parted->st[l].master,
                                  whole->layers[l].numel * sizeof(float)));
                ck_assert(!memcmp(whole->st[l].compute, parted->st[l].compute,
                                  rp_params_compute_bytes(whole, l)));
            }
            ck_assert_int_eq(parted->loaded_dtype, whole->loaded_dtype);
            rp_params_destroy(&parted);
        }
        rp_params_destroy(&whole);
    }
}
END_TEST

/* Save `list` (n tensors) as dir/name, through the model save's writer. */
static void save_as(const char *dir, const char *name, const rp_tensor_ref *list, int n,
                    const rp_model_config *cfg)
{
    char from[700], to[700];
    rp_error err = {0};
    ck_assert_msg(rp_model_dir_save(dir, list, n, RP_F32, cfg, NULL, NULL, NULL,
                                    &err) == RP_OK, "%s",
                  err.msg);
    snprintf(from, sizeof from, "%s/model.safetensors", dir);
    snprintf(to, sizeof to, "%s/%s", dir, name);
    ck_assert_int_eq(rename(from, to), 0);
}

/* A resume's AdamW state and pending gradient are read by the node's
 * ranks, each the layers of its part (rp_checkpoint_load_optimizer with
 * rp_params_layer_part's range): the parts, in any order, give every
 * layer's m, v and gradient as written, byte for byte; an empty range
 * reads nothing. */
START_TEST(optimizer_state_loaded_by_parts_is_the_whole)
{
    const char *src = getenv("RP_SRCDIR");
    static const char *const dirs[] = {"mpi-tests/fixtures/golden/qwen3/model",
                                       "mpi-tests/fixtures/golden-moe/moe-m1/model"};
    for (int d = 0; d < 2; d++) {
        char cfgfile[700], ckpt[700];
        snprintf(cfgfile, sizeof cfgfile, "%s/%s/config.json", src ? src : ".", dirs[d]);
        snprintf(ckpt, sizeof ckpt, "%s/ckpt%d", rp_test_tmpdir(), d);
        rp_model_config cfg;
        rp_error err = {0};
        ck_assert_msg(rp_config_load(cfgfile, &cfg, &err) == RP_OK, "%s", err.msg);
        rp_params *written = NULL, *parted = NULL;
        ck_assert_int_eq(rp_params_create(&cfg, RP_F32, &written, &err), RP_OK);
        uint32_t x = 12345u + (uint32_t)d;
        for (int l = 0; l < written->nlayers; l++) /* the tensors (not the padding) */
            for (int q = 0; q < written->layers[l].nparams; q++) {
                const rp_param_desc *pd = &written->layers[l].params[q];
                const size_t count =
                    (size_t)pd->shape[0] * (size_t)(pd->ndim > 1 ? pd->shape[1] : 1);
                for (size_t i = pd->offset; i < pd->offset + count; i++) {
                    float *at[3] = {written->st[l].m, written->st[l].v, written->st[l].grad};
                    for (int k = 0; k < 3; k++) {
                        x = x * 1664525u + 1013904223u;
                        at[k][i] = (float)(x >> 8) * 0x1p-24f;
                    }
                }
            }
        int n = 0;
        rp_tensor_ref *list = rp_checkpoint_optimizer_tensors(written, &n);
        save_as(ckpt, "optimizer.safetensors", list, n, &cfg);
        free(list);
        list = rp_checkpoint_gradient_tensors(written, &n);
        save_as(ckpt, RP_PENDING_FILE, list, n, &cfg);
        free(list);
        for (int parts = 1; parts <= written->nlayers + 1; parts++) {
            ck_assert_int_eq(rp_params_create(&cfg, RP_F32, &parted, &err), RP_OK);
            for (int part = parts - 1; part >= 0; part--) { /* in any order */
                int first, end;
                rp_params_layer_part(parted, part, parts, &first, &end);
                ck_assert_msg(rp_checkpoint_load_optimizer(parted, ckpt, 1, first, end, &err) ==
                                  RP_OK, "%s", err.msg);
            }
            for (int l = 0; l < written->nlayers; l++) {
                const size_t b = written->layers[l].numel * sizeof(float);
                ck_assert_msg(!memcmp(written->st[l].m, parted->st[l].m, b) &&
                                  !memcmp(written->st[l].v, parted->st[l].v, b) &&
                                  !memcmp(written->st[l].grad, parted->st[l].grad, b),
                              "%s: %d parts: layer %d differs", dirs[d], parts, l);
            }
            rp_params_destroy(&parted);
        }
        /* an empty range: nothing read, nothing written */
        ck_assert_int_eq(rp_params_create(&cfg, RP_F32, &parted, &err), RP_OK);
        ck_assert_int_eq(rp_checkpoint_load_optimizer(parted, ckpt, 1, 1, 1, &err), RP_OK);
        for (int l = 0; l < parted->nlayers; l++)
            for (size_t i = 0; i < parted->layers[l].numel; i++)
                ck_assert(parted->st[l].m[i] == 0 && parted->st[l].v[i] == 0 &&
                          parted->st[l].grad[i] == 0);
        rp_params_destroy(&parted);
        rp_params_destroy(&written);
    }
}
END_TEST

/* A LoRA run's frozen base, where it is converted into the host store, is
 * filled by the node's ranks, each the layers of its part (each rank its
 * own base over the shared store, as rp_frozen_base_attach's callers have
 * it): the parts, in any order, give the store of one whole fill, byte for
 * byte; for a random base, bf16 and fp32 files, gpt-oss's MXFP4 experts
 * and an FP8 base dequantised on the host. */
START_TEST(a_frozen_base_filled_by_parts_is_the_whole)
{
    const char *src = getenv("RP_SRCDIR");
    static const struct {
        const char *dir; /* NULL: the config of the first, a random base */
        rp_dtype dtype;
    } cases[] = {{"mpi-tests/fixtures/golden/qwen3/model", RP_BF16},
                 {NULL, RP_BF16},
                 {NULL, RP_F32},
                 {"mpi-tests/fixtures/golden-gpt-oss/oss-mxfp4/model-mxfp4", RP_BF16},
                 {"mpi-tests/fixtures/golden-fp8/moe-kept/model-fp8", RP_BF16}};
    const unsigned reads = rp_frozen_base_reads(&rp_kernel_ops_cpu) & ~RP_FROZEN_BASE_READS_FP8;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char dir[600], cfgfile[700];
        snprintf(dir, sizeof dir, "%s/%s", src ? src : ".",
                 cases[c].dir ? cases[c].dir : cases[0].dir);
        snprintf(cfgfile, sizeof cfgfile, "%s/config.json", dir);
        const char *model_dir = cases[c].dir ? dir : NULL;
        rp_model_config cfg;
        rp_error err = {0};
        ck_assert_msg(rp_config_load(cfgfile, &cfg, &err) == RP_OK, "%s", err.msg);
        cfg.lora.rank = 2;
        cfg.lora.alpha = 4;
        cfg.lora.targets = 1u; /* q_proj */
        if (!model_dir)
            cfg.fp8.any = 0;
        rp_frozen_base *b = NULL;
        ck_assert_msg(rp_frozen_base_open(&cfg, model_dir, cases[c].dtype, reads, &b, &err) ==
                          RP_OK, "case %zu: %s", c, err.msg);
        const size_t bytes = rp_frozen_base_store_bytes(b);
        ck_assert_msg(bytes > 0, "case %zu: the base is not converted into the store", c);
        const int nlayers = cfg.num_hidden_layers + 2;
        unsigned char *whole = calloc(1, bytes), *parted = malloc(bytes);
        ck_assert(whole && parted);
        ck_assert_msg(rp_frozen_base_attach(b, whole, 0, 1, 7, &err) == RP_OK, "%s", err.msg);
        rp_frozen_base_close(&b);
        for (int parts = 1; parts <= nlayers + 1; parts++) {
            memset(parted, 0, bytes);
            for (int part = parts - 1; part >= 0; part--) { /* in any order */
                ck_assert_int_eq(rp_frozen_base_open(&cfg, model_dir, cases[c].dtype, reads, &b,
                                                     &err), RP_OK);
                ck_assert_msg(rp_frozen_base_attach(b, parted, part, parts, 7, &err) == RP_OK,
                              "%s", err.msg);
                rp_frozen_base_close(&b);
            }
            ck_assert_msg(!memcmp(whole, parted, bytes), "case %zu: %d parts differ", c, parts);
        }
        /* no part: nothing written */
        memset(parted, 0, bytes);
        ck_assert_int_eq(rp_frozen_base_open(&cfg, model_dir, cases[c].dtype, reads, &b, &err),
                         RP_OK);
        ck_assert_int_eq(rp_frozen_base_attach(b, parted, 0, 0, 7, &err), RP_OK);
        rp_frozen_base_close(&b);
        size_t nonzero = 0;
        for (size_t i = 0; i < bytes; i++)
            nonzero += parted[i] != 0;
        ck_assert_uint_eq(nonzero, 0);
        free(whole);
        free(parted);
    }
}
END_TEST

START_TEST(agree_keeps_each_ranks_own_status)
{
    const rp_status cases[4][2] = {{RP_OK, RP_OK},
                                   {RP_ERR_IO, RP_ERR_FORMAT},
                                   {RP_OK, RP_ERR_FORMAT},
                                   {RP_ERR_NUMERIC, RP_OK}};
    char why[4][RP_ERROR_MSG_MAX + 256] = {{0}};
    for (int c = 0; c < 4; c++)
        agree_case(cases[c], 2, why[c], sizeof why[c]);
    for (int c = 0; c < 4; c++)
        ck_assert_msg(!why[c][0], "case %d: %s", c, why[c]);
}
END_TEST

static Suite *train_suite(void)
{
    paths();
    Suite *s = suite_create("train");
    TCase *tc = tcase_create("train");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, NULL, rp_test_tmpdir_clean);
    tcase_add_test(tc, init_config_draws_documented_distribution);
    tcase_add_test(tc, microbatch_count_does_not_matter);
    tcase_add_test(tc, sub_communicator_matches_world);
    tcase_add_test(tc, bf16_compute_close_to_fp32);
    tcase_add_test(tc, option_table_defaults_and_rows);
    tcase_add_test(tc, agree_keeps_each_ranks_own_status);
    tcase_add_test(tc, a_model_loaded_by_parts_is_the_whole);
    tcase_add_test(tc, optimizer_state_loaded_by_parts_is_the_whole);
    tcase_add_test(tc, a_frozen_base_filled_by_parts_is_the_whole);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(train_suite, "1 2")
