/* Proves: `roundpipe plan` and `roundpipe simulate` (called as functions)
 * print a plan whose JSON re-parses into a valid plan that agrees with the
 * partitioner, the GPipe/1F1B comparison and the exact/lagged ratio; take a
 * model from a config.json; honour a forced plan; and fail with exit code 2
 * and a message naming the option for a bad command line, exit code 1 and a
 * message naming file, line and field for a bad layer file, and a message
 * naming the layer when it cannot fit the memory limit; the embedding-by-rows
 * model (the default, as the engine) reports its rows fraction; with --nodes
 * it prints each optimizer's rows with the scaling efficiency and the bytes
 * a node sends, and refuses a node count that does not divide M; plan
 * --nodes N prints one node's plan (that of M/N microbatches); plan
 * --lora-rank counts a LoRA run's bytes (frozen weights up, adapter
 * gradients down, the base mapped or in the store) as computed by hand;
 * a mixture of experts' blocks are costed as the engine runs them (the
 * router and k of the experts, gpt-oss's windows, the router's and the
 * experts' adapters, each expert's on its k tokens), as computed by hand;
 * a dense block's attention at (S + 1) / 2 keys a query and, over several
 * MLP chunks, the gate and up GEMMs (and adapters) its backward makes
 * again, as computed by hand;
 * from the H100's measured layer times, the lagged step is the file's
 * compute and exact with clipping is within 5% of it at batch 8 and 32
 * where the optimizer's bandwidth allows (bench/README.md, 2026-11-29), and
 * with the speculative update from a lower bandwidth than without it at
 * batch 8 and 32. */
#include <fcntl.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cmd_plan.h"
#include "cli/plan_progress.h"
#include "plan/layers_file.h"
#include "plan/partition.h"
#include "rp_check.h"

static char out_text[1 << 20], err_text[1 << 16];

static void slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
}

/* Run fn with stdout and stderr captured into out_text / err_text. */
static int run(int (*fn)(int, char **), const char *line)
{
    char copy[4096], *argv[64];
    int argc = 0;
    snprintf(copy, sizeof copy, "%s", line);
    for (char *t = strtok(copy, " "); t && argc < 63; t = strtok(NULL, " "))
        argv[argc++] = t;
    argv[argc] = NULL;
    char op[512], ep[512];
    snprintf(op, sizeof op, "%s/out.txt", rp_test_tmpdir());
    snprintf(ep, sizeof ep, "%s/err.txt", rp_test_tmpdir());
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    int fo = open(op, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int fe = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fo, 1);
    dup2(fe, 2);
    int rc = fn(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    close(fo);
    close(fe);
    slurp(op, out_text, sizeof out_text);
    slurp(ep, err_text, sizeof err_text);
    return rc;
}

/* Runs a command with --json (fn: rp_cli_plan or rp_cli_simulate) and
 * parses what it printed: the command must succeed and print JSON. The
 * caller puts the object. */
static json_object *json_of(int (*fn)(int, char **), const char *line)
{
    ck_assert_msg(run(fn, line) == 0, "%s: %s", line, err_text);
    json_object *j = json_tokener_parse(out_text);
    ck_assert_msg(j != NULL, "%s: not JSON: %s", line, out_text);
    return j;
}

static const char *paper(const char *name)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/bench/paper/%s", rp_test_srcdir(), name);
    return path;
}

START_TEST(plan_json_agrees_with_the_partitioner)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "plan --layers %s --json --memory-limit-mib 22528",
             paper("qwen3-1.7b.txt"));
    json_object *j = json_of(rp_cli_plan, cmd);
    json_object *v;
    ck_assert(json_object_object_get_ex(j, "gpus", &v) && json_object_get_int(v) == 8);
    ck_assert(json_object_object_get_ex(j, "microbatches", &v) && json_object_get_int(v) == 16);
    ck_assert(json_object_object_get_ex(j, "plan", &v));
    rp_plan *p = malloc(sizeof *p), *q = malloc(sizeof *q);
    rp_error err;
    ck_assert_msg(rp_plan_parse(json_object_get_string(v), 30, p, &err) == RP_OK, "%s", err.msg);
    ck_assert(json_object_object_get_ex(j, "jobs", &v));
    ck_assert_int_eq((int)json_object_array_length(v), p->nfwd + p->nbwd);
    json_object *it;
    ck_assert(json_object_object_get_ex(j, "iteration_ms", &it));
    /* the same as calling the partitioner directly */
    rp_cost_model *m;
    ck_assert_int_eq(rp_cost_load(paper("qwen3-1.7b.txt"), &m, &err), RP_OK);
    rp_machine mc;
    rp_machine_defaults(&mc);
    mc.gpus = 8;
    mc.microbatches = 16;
    mc.transfer_ms = m->default_transfer_ms;
    mc.defer_wgrad = 1;
    mc.opt_spread = 1; /* the command's defaults: every rank updates a share, and the */
    mc.sparse_embed = 1; /* embedding moves and is updated by rows, as in the engine */
    mc.memory_limit = (int64_t)22528 << 20;
    mc.tokens_per_iteration = m->tokens_per_microbatch * 16;
    rp_sim_result r;
    ck_assert_int_eq(rp_partition(m, &mc, 0, q, &r, &err), RP_OK);
    ck_assert(fabs(json_object_get_double(it) - r.iteration_ms) < 1e-4 * r.iteration_ms);
    ck_assert_int_eq(q->nfwd, p->nfwd);
    ck_assert_int_eq(q->nbwd, p->nbwd);
    ck_assert(json_object_object_get_ex(j, "peak_bytes", &v));
    ck_assert(json_object_get_int64(v) <= mc.memory_limit);
    json_object_put(j);
    rp_cost_model_destroy(&m);
    /* the table names every job */
    snprintf(cmd, sizeof cmd, "plan --layers %s --gpus 2 --microbatches 4", paper("qwen3-1.7b.txt"));
    ck_assert_msg(run(rp_cli_plan, cmd) == 0, "%s", err_text);
    ck_assert(strstr(out_text, "peak MiB") && strstr(out_text, "modelled iteration"));
    free(p);
    free(q);
}
END_TEST

/* The H100's measured layer times (bench/gpu/h100-qwen3-1.7b-layers.txt) at
 * batch B with clipping and the optimizer at gbs GB/s, --speculative-update
 * `speculative` (on, off), --recompute `recompute` (stage: no block kept;
 * auto: as many as the GPU's memory holds, in its own memory):
 * exact / lagged, and the lagged iteration. */
static double h100_ratio_kept(int batch, double gbs, const char *speculative,
                              const char *recompute, double *lagged_ms)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "simulate --layers %s/bench/gpu/h100-qwen3-1.7b-layers.txt --json --bandwidth-gbs 55 "
             "--workspace-mib 734 --device-memory-mib 81559 --grad-clip 1 --microbatches %d "
             "--optimizer-gbs %g --speculative-update %s --recompute %s",
             rp_test_srcdir(), batch, gbs, speculative, recompute);
    json_object *j = json_of(rp_cli_simulate, cmd), *v, *s;
    ck_assert(json_object_object_get_ex(j, "exact_over_lagged_throughput", &v));
    double ratio = json_object_get_double(v);
    ck_assert(json_object_object_get_ex(j, "schedules", &s));
    ck_assert(json_object_object_get_ex(json_object_array_get_idx(s, 1), "iteration_ms", &v));
    *lagged_ms = json_object_get_double(v);
    json_object_put(j);
    return ratio;
}

/* The same without kept blocks: every block below the tail recomputed. */
static double h100_ratio(int batch, double gbs, const char *speculative, double *lagged_ms)
{
    return h100_ratio_kept(batch, gbs, speculative, "stage", lagged_ms);
}

START_TEST(h100_exact_keeps_up_where_the_optimizer_allows)
{
    /* the lagged step is the compute alone, read as the file says: M x
     * (28 x (1.66 + 3.63) + 19.9) ms, every layer in one tail job */
    double lagged;
    h100_ratio(8, 100, "off", &lagged);
    ck_assert_msg(fabs(lagged - 8 * (28 * (1.66 + 3.63) + 6.63 + 13.27)) < 0.01, "%g", lagged);
    /* with clipping every update waits for the last gradient, and the next
     * tail (the tied head reads the whole table) for every update: exact is
     * within 5% of lagged only where the host's AdamW takes at most ~5% of
     * a step (bench/README.md, 2026-11-29): from 560 GB/s at batch 8, 175 at
     * batch 32 */
    double ratio = h100_ratio(8, 600, "off", &lagged);
    ck_assert_msg(ratio >= 0.95, "batch 8, 600 GB/s: exact / lagged %.4f", ratio);
    ratio = h100_ratio(32, 200, "off", &lagged);
    ck_assert_msg(ratio >= 0.95, "batch 32, 200 GB/s: exact / lagged %.4f", ratio);
    /* the speculative update (a step that does not clip): the blocks'
     * AdamW overlaps the backward while some of it is left, its backup
     * written in AdamW's own pass (12 bytes a parameter); a block its rank
     * reaches once the backward is over follows the norm. So where the
     * host's AdamW is slow it gains (100 GB/s: 0.731 -> 0.866 at batch 8,
     * 0.914 -> 0.948 at 32), and 0.95 is reached from 491 GB/s at batch 8
     * (559 without) and from 111 at batch 32 (176 without; bench/README.md,
     * 2026-11-29) */
    double off = h100_ratio(8, 100, "off", &lagged), on = h100_ratio(8, 100, "on", &lagged);
    ck_assert_msg(on > off + 0.13, "batch 8, 100 GB/s: speculative %.4f, off %.4f", on, off);
    on = h100_ratio(32, 100, "on", &lagged);
    ck_assert_msg(on > 0.945 && on < 0.95, "batch 32, 100 GB/s, speculative: %.4f", on);
    off = h100_ratio(32, 115, "off", &lagged), on = h100_ratio(32, 115, "on", &lagged);
    ck_assert_msg(on >= 0.95 && off < 0.95, "batch 32, 115 GB/s: speculative %.4f, off %.4f",
                  on, off);
    off = h100_ratio(8, 500, "off", &lagged), on = h100_ratio(8, 500, "on", &lagged);
    ck_assert_msg(on >= 0.95 && off < 0.95, "batch 8, 500 GB/s: speculative %.4f, off %.4f",
                  on, off);
    /* kept blocks in the GPU's own memory (--recompute auto, the default):
     * the forward stages that fill the wait for AdamW no longer cost their
     * recompute, so with the speculative update exact reaches 0.95 of
     * lagged at the 100 GB/s the 2026-11-24 trace implies, at batch 8 and
     * 32 (0.964 and 0.969; from 79 and 65 GB/s, bench/README.md,
     * 2026-11-29), where recomputing everything gives 0.866 and 0.948 */
    double kept8 = h100_ratio_kept(8, 100, "on", "auto", &lagged);
    ck_assert_msg(kept8 >= 0.95, "batch 8, 100 GB/s, kept: %.4f", kept8);
    ck_assert_msg(fabs(lagged - 8 * (28 * (1.66 + 3.63) + 6.63 + 13.27)) < 0.01, "%g", lagged);
    double kept32 = h100_ratio_kept(32, 100, "on", "auto", &lagged);
    ck_assert_msg(kept32 >= 0.95, "batch 32, 100 GB/s, kept: %.4f", kept32);
    /* where the host's AdamW is slower it is still short of it */
    double slow = h100_ratio_kept(8, 70, "on", "auto", &lagged);
    ck_assert_msg(slow < 0.95 && slow > h100_ratio(8, 70, "on", &lagged),
                  "batch 8, 70 GB/s, kept: %.4f", slow);
}
END_TEST

START_TEST(simulate_compares_schedules)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "simulate --layers %s --json --iterations 8", paper("qwen3-1.7b.txt"));
    json_object *j = json_of(rp_cli_simulate, cmd), *v, *s;
    /* progress on stderr, one line per schedule */
    ck_assert_msg(strstr(err_text, "roundpipe simulate: 1/4 roundpipe, exact optimizer: done") &&
                  strstr(err_text, "roundpipe simulate: 4/4 1F1B"), "%s", err_text);
    ck_assert(json_object_object_get_ex(j, "schedules", &s));
    ck_assert_int_eq((int)json_object_array_length(s), 4);
    double it[4];
    for (int i = 0; i < 4; i++) {
        json_object *o = json_object_array_get_idx(s, i), *b;
        ck_assert(json_object_object_get_ex(o, "iteration_ms", &v));
        it[i] = json_object_get_double(v);
        ck_assert(json_object_object_get_ex(o, "bubble", &b));
        ck_assert_int_eq((int)json_object_array_length(b), 8);
    }
    ck_assert(json_object_object_get_ex(j, "exact_over_lagged_throughput", &v));
    double ratio = json_object_get_double(v);
    ck_assert(ratio > 0 && ratio <= 1.0 + 1e-12);
    ck_assert(fabs(ratio - it[1] / it[0]) < 1e-4);
    json_object_put(j);
    /* the table */
    snprintf(cmd, sizeof cmd, "simulate --layers %s --iterations 6 --gpus 4 --microbatches 8",
             paper("qwen3-1.7b.txt"));
    ck_assert_msg(run(rp_cli_simulate, cmd) == 0, "%s", err_text);
    ck_assert(strstr(out_text, "GPipe") && strstr(out_text, "1F1B") &&
              strstr(out_text, "exact / lagged throughput"));
    /* several nodes: a row per optimizer with the scaling efficiency, the
     * bytes each node sends; a node count that does not divide M refused */
    snprintf(cmd, sizeof cmd,
             "simulate --layers %s --iterations 6 --gpus 4 --microbatches 8 --nodes 2 "
             "--network-gbs 100", paper("qwen3-1.7b.txt"));
    ck_assert_msg(run(rp_cli_simulate, cmd) == 0, "%s", err_text);
    ck_assert_msg(strstr(out_text, "nodes: 2 x 4 GPUs at 100 Gb/s (roundpipe, exact optimizer): ") &&
                      strstr(out_text, "scaling efficiency") &&
                      strstr(out_text, "network per step: each node sends at most"),
                  "%s", out_text);
    snprintf(cmd, sizeof cmd, "simulate --layers %s --gpus 4 --microbatches 8 --nodes 3",
             paper("qwen3-1.7b.txt"));
    ck_assert_int_eq(run(rp_cli_simulate, cmd), 2);
    ck_assert_msg(strstr(err_text, "--nodes 3 does not divide --microbatches 8"), "%s", err_text);
    /* plan --nodes N: one node's plan, that of M/N microbatches */
    static char one[1 << 20];
    snprintf(cmd, sizeof cmd, "plan --layers %s --gpus 4 --microbatches 4", paper("qwen3-1.7b.txt"));
    ck_assert_msg(run(rp_cli_plan, cmd) == 0, "%s", err_text);
    snprintf(one, sizeof one, "%s", out_text);
    snprintf(cmd, sizeof cmd, "plan --layers %s --gpus 4 --microbatches 8 --nodes 2",
             paper("qwen3-1.7b.txt"));
    ck_assert_msg(run(rp_cli_plan, cmd) == 0, "%s", err_text);
    ck_assert_str_eq(out_text, one);
    /* the embedding by rows: its rows fraction derived from the file
     * (16 microbatches x 33554432 hand-over bytes / 622329856 table bytes) */
    snprintf(cmd, sizeof cmd, "simulate --layers %s --json --iterations 6 --sparse-embedding 1",
             paper("qwen3-1.7b.txt"));
    j = json_of(rp_cli_simulate, cmd);
    ck_assert(json_object_object_get_ex(j, "sparse_embedding", &v) && json_object_get_int(v) == 1);
    ck_assert(json_object_object_get_ex(j, "embed_rows_frac", &v));
    ck_assert(fabs(json_object_get_double(v) - 16.0 * 33554432 / 622329856) < 1e-5);
    json_object_put(j);
    snprintf(cmd, sizeof cmd,
             "simulate --layers %s --iterations 6 --sparse-embedding 1 --embed-rows-frac 0.15",
             paper("qwen3-1.7b.txt"));
    ck_assert_msg(run(rp_cli_simulate, cmd) == 0, "%s", err_text);
    ck_assert(strstr(out_text, "as the engine does") && strstr(out_text, "0.1500"));
}
END_TEST

START_TEST(config_and_forced_plan)
{
    char cfg[512], cmd[8192];
    snprintf(cfg, sizeof cfg, "%s/examples/tiny-config.json", rp_test_srcdir());
    snprintf(cmd, sizeof cmd,
             "plan --init-config %s --gpus 2 --microbatches 2 --seq-len 64 --batch-size 4 --json "
             "--plan fwd=0-2;bwd=3-5,1-2,0",
             cfg);
    json_object *j = json_of(rp_cli_plan, cmd), *v;
    ck_assert(json_object_object_get_ex(j, "plan", &v));
    /* --recompute auto (the default) keeps blocks 1-2 below the tail (host
     * memory allows: the tiny model's are KiBs), a keep= the plan says */
    ck_assert_str_eq(json_object_get_string(v), "fwd=0-2;bwd=3-5,1-2,0;width=2;keep=2");
    ck_assert(json_object_object_get_ex(j, "kept_blocks", &v) && json_object_get_int(v) == 2);
    ck_assert(json_object_object_get_ex(j, "layers", &v) && json_object_get_int(v) == 6);
    ck_assert(json_object_object_get_ex(j, "tokens_per_s", &v) && json_object_get_double(v) > 0);
    json_object_put(j);
    /* stage keeps none: the forced plan as given; keep=1 stands under auto */
    const char *variants[][2] = {{" --recompute stage", "fwd=0-2;bwd=3-5,1-2,0;width=2"},
                                 {";keep=1", "fwd=0-2;bwd=3-5,1-2,0;width=2;keep=1"}};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd,
                 "plan --init-config %s --gpus 2 --microbatches 2 --seq-len 64 --batch-size 4 "
                 "--json --plan fwd=0-2;bwd=3-5,1-2,0%s",
                 cfg, variants[i][0]);
        j = json_of(rp_cli_plan, cmd);
        ck_assert_msg(j && json_object_object_get_ex(j, "plan", &v), "%s", out_text);
        ck_assert_str_eq(json_object_get_string(v), variants[i][1]);
        json_object_put(j);
    }
    snprintf(cmd, sizeof cmd, "simulate --init-config %s --gpus 2 --microbatches 2 --tflops 1",
             cfg);
    ck_assert_msg(run(rp_cli_simulate, cmd) == 0, "%s", err_text);
}
END_TEST

START_TEST(bad_command_lines_and_files)
{
    char cmd[8192];
    static const struct {
        const char *args, *needle;
    } usage[] = {
        {"--gpus 0", "--gpus"},
        {"--gpus x", "--gpus: 'x' is not an integer"},
        {"--frobnicate", "unknown option '--frobnicate'"},
        {"--microbatches", "--microbatches needs a value"},
        {"--optimizer-lag 2", "--optimizer-lag"},
        {"--bandwidth-gbs 0", "--bandwidth-gbs"},
        {"--init-config x.json", "exactly one of"},
        {"--plan fwd=0-3;bwd=9", "plan 'fwd=0-3;bwd=9'"},
        {"--width 3", "width 3"},
        {"--sparse-embedding 2", "--sparse-embedding"},
        {"--sparse-embedding 1 --embed-rows-frac 0", "--embed-rows-frac: 0 is not in (0, 1]"},
        {"--sparse-embedding 1 --embed-rows-frac 1.5", "--embed-rows-frac: 1.5 is not in"},
        {"--sparse-embedding 0 --embed-rows-frac 0.5",
         "--embed-rows-frac applies only with --sparse-embedding 1"},
        {"--progress sometimes", "--progress: 'sometimes' is not"},
    };
    for (size_t i = 0; i < sizeof usage / sizeof usage[0]; i++) {
        snprintf(cmd, sizeof cmd, "plan --layers %s %s", paper("qwen3-1.7b.txt"), usage[i].args);
        int rc = run(rp_cli_plan, cmd);
        ck_assert_msg(rc == 2 || (rc == 1 && strstr(usage[i].args, "width")), "'%s': rc %d",
                      usage[i].args, rc);
        ck_assert_msg(strstr(err_text, usage[i].needle) != NULL, "'%s': %s", usage[i].args,
                      err_text);
    }
    /* a bad layer file: exit 1, file, line and field named */
    char path[512];
    snprintf(path, sizeof path, "%s/bad.txt", rp_test_tmpdir());
    FILE *f = fopen(path, "w");
    fputs("roundpipe-layers 1\nlayer block fwd_ms=1 bwd_ms=2\nlayer head fwd_ms=1 bwd_ms=oops\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "simulate --layers %s", path);
    ck_assert_int_eq(run(rp_cli_simulate, cmd), 1);
    ck_assert_msg(strstr(err_text, "bad.txt:3: field 'bwd_ms'") != NULL, "%s", err_text);
    unlink(path);
    snprintf(cmd, sizeof cmd, "plan --layers %s/none.txt", rp_test_tmpdir());
    ck_assert_int_eq(run(rp_cli_plan, cmd), 1);
    ck_assert_msg(strstr(err_text, "none.txt: cannot open") != NULL, "%s", err_text);
    /* a layer that cannot fit */
    snprintf(cmd, sizeof cmd, "plan --layers %s --memory-limit-mib 1000", paper("qwen3-32b.txt"));
    ck_assert_int_eq(run(rp_cli_plan, cmd), 1);
    ck_assert_msg(strstr(err_text, "layer 0 (embedding) alone needs") != NULL, "%s", err_text);
    /* help */
    ck_assert_int_eq(run(rp_cli_simulate, "simulate --help"), 0);
    ck_assert(strstr(out_text, "--optimizer-lag") != NULL);
    ck_assert(strstr(out_text, "--sparse-embedding 0|1 1 (default, as the engine does)") != NULL);
}
END_TEST

static int64_t job_field(json_object *j, int job, const char *field)
{
    json_object *jobs, *v;
    ck_assert(json_object_object_get_ex(j, "jobs", &jobs));
    ck_assert(json_object_object_get_ex(json_object_array_get_idx(jobs, (size_t)job), field, &v));
    return json_object_get_int64(v);
}

static int64_t top_field(json_object *j, const char *field)
{
    json_object *v;
    ck_assert_msg(json_object_object_get_ex(j, field, &v), "no %s", field);
    return json_object_get_int64(v);
}

/* plan --lora-rank on the llama fixture (H 64, I 96, 4 heads and 2 kv
 * heads of 16, V 96, biases, 2 blocks, untied, fp32 files), counted here
 * from the shape: a block's frozen weights are 2 norms (64 each), q and o
 * (64 x 64), k and v (32 x 64), biases 64 + 32 + 32 + 64, gate, up, down
 * (96 x 64): 31040 elements; rank 4 on all seven projections adds 4 (64 +
 * 64) for q and o, 4 (64 + 32) for k and v, 4 (64 + 96) for gate, up and
 * down: 3712 (every A and B a multiple of 16). CUDA executors upload both
 * in bf16 and download only the adapters' fp32 gradients; the embedding's
 * rows a step can read (min(96 rows, 2 microbatches x 16 tokens) x 64:
 * engine/memory_model.h's rp_memory_embedding_rows) and the head (64 + 96
 * x 64) are uploaded, never downloaded; the host store holds the whole
 * embedding.
 * The base is converted into the store for bf16 (the files are fp32):
 * 2 bytes an element, each tensor a multiple of 64 bytes here; for fp32 CPU
 * executors it is mapped from the files, 4 bytes an element. Bad --lora-*
 * options are refused naming the option. */
START_TEST(lora_plan_counts_frozen_and_adapter_bytes)
{
    char dir[512], cmd[8192];
    snprintf(dir, sizeof dir, "%s/mpi-tests/fixtures/golden/llama/model", rp_test_srcdir());
    const int64_t block = 64 + 64 * 64 + 64 + 2 * (32 * 64 + 32) + 64 * 64 + 64 + 64 + 3 * 96 * 64;
    const int64_t adapters = 4 * (64 + 64) * 2 + 4 * (64 + 32) * 2 + 4 * (64 + 96) * 3;
    const int64_t embed = 96 * 64, embed_rows = 32 * 64, head = 64 + 96 * 64;
    ck_assert_int_eq(block, 31040);
    ck_assert_int_eq(adapters, 3712);
    snprintf(cmd, sizeof cmd,
             "plan --model %s --gpus 2 --microbatches 2 --seq-len 16 --batch-size 2 --json "
             "--device cuda --dtype bf16 --lora-rank 4 --plan fwd=0-1;bwd=2-3,0-1", dir);
    json_object *j = json_of(rp_cli_plan, cmd);
    ck_assert_int_eq(job_field(j, 0, "weight_bytes"), (embed_rows + block + adapters) * 2);
    ck_assert_int_eq(job_field(j, 1, "weight_bytes"), (block + adapters + head) * 2);
    ck_assert_int_eq(job_field(j, 1, "grad_bytes"), adapters * 4);
    ck_assert_int_eq(job_field(j, 2, "grad_bytes"), adapters * 4);
    ck_assert_int_eq(top_field(j, "lora_rank"), 4);
    ck_assert_int_eq(top_field(j, "host_base_mapped_bytes"), 0);
    ck_assert_int_eq(top_field(j, "host_base_store_bytes"), (embed + 2 * block + head) * 2);
    json_object_put(j);
    /* q_proj and v_proj only: 4 (64 + 64) + 4 (64 + 32) */
    snprintf(cmd, sizeof cmd,
             "plan --model %s --gpus 2 --microbatches 2 --seq-len 16 --batch-size 2 --json "
             "--device cuda --dtype bf16 --lora-rank 4 --lora-targets q_proj,v_proj "
             "--plan fwd=0-1;bwd=2-3,0-1", dir);
    j = json_of(rp_cli_plan, cmd);
    ck_assert_int_eq(job_field(j, 1, "grad_bytes"), (4 * (64 + 64) + 4 * (64 + 32)) * 4);
    json_object_put(j);
    /* fp32 CPU executors: the base mapped from the files, nothing of it in the store */
    snprintf(cmd, sizeof cmd,
             "plan --model %s --gpus 2 --microbatches 2 --seq-len 16 --batch-size 2 --json "
             "--device cpu --dtype fp32 --lora-rank 4", dir);
    j = json_of(rp_cli_plan, cmd);
    ck_assert_int_eq(top_field(j, "host_base_mapped_bytes"), (embed + 2 * block + head) * 4);
    ck_assert_int_eq(top_field(j, "host_base_store_bytes"), 0);
    json_object_put(j);
    snprintf(cmd, sizeof cmd,
             "plan --model %s --gpus 2 --microbatches 2 --seq-len 16 --batch-size 2 "
             "--device cpu --dtype fp32 --lora-rank 4", dir);
    ck_assert_msg(run(rp_cli_plan, cmd) == 0, "%s", err_text);
    ck_assert_msg(strstr(out_text, "LoRA rank 4") && strstr(out_text, "mapped read-only"), "%s",
                  out_text);
    snprintf(cmd, sizeof cmd, "simulate --model %s --gpus 2 --microbatches 2 --lora-rank 2 "
             "--iterations 4", dir);
    ck_assert_msg(run(rp_cli_simulate, cmd) == 0, "%s", err_text);
    static const struct {
        const char *args, *needle;
    } bad[] = {
        {"--lora-targets q_proj", "need --lora-rank"},
        {"--lora-dropout 0.1", "need --lora-rank"},
        {"--lora-rank 4 --lora-targets q_proj,bogus", "bogus"},
        {"--lora-rank 4 --lora-dropout 1", "--lora-dropout"},
        {"--lora-rank -1", "--lora-rank"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "plan --model %s %s", dir, bad[i].args);
        ck_assert_int_eq(run(rp_cli_plan, cmd), 2);
        ck_assert_msg(strstr(err_text, bad[i].needle) != NULL, "'%s': %s", bad[i].args, err_text);
    }
    snprintf(cmd, sizeof cmd, "plan --layers %s --lora-rank 4", paper("qwen3-1.7b.txt"));
    ck_assert_int_eq(run(rp_cli_plan, cmd), 2);
    ck_assert_msg(strstr(err_text, "applies to a config") != NULL, "%s", err_text);
}
END_TEST

static double job_ms(json_object *j, int job)
{
    json_object *jobs, *v;
    ck_assert(json_object_object_get_ex(j, "jobs", &jobs));
    ck_assert(json_object_object_get_ex(json_object_array_get_idx(jobs, (size_t)job),
                                        "ms_per_microbatch", &v));
    return json_object_get_double(v);
}

/* `plan --plan PLAN ARGS` of the model in dir, 16 tokens on 2 CPU executors
 * at 1e6 FLOP/s with a device too fast to be the bound: its JSON (the
 * caller puts it), after checking job 0's and job 2's ms per microbatch
 * against the hand-counted fwd_ms and bwd_ms. */
static json_object *hand_timed_plan(const char *dir, const char *args, const char *plan,
                                    double fwd_ms, double bwd_ms)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "plan --model %s --gpus 2 --microbatches 1 --seq-len 16 --batch-size 1 "
             "--json --device cpu --dtype fp32 --tflops 1e-6 --device-gbs 1e9 %s "
             "--plan %s", dir, args, plan);
    json_object *j = json_of(rp_cli_plan, cmd);
    ck_assert_msg(fabs(job_ms(j, 0) - fwd_ms) < 1e-5 * fwd_ms, "'%s': forward %g ms, by hand %g",
                  args, job_ms(j, 0), fwd_ms);
    ck_assert_msg(fabs(job_ms(j, 2) - bwd_ms) < 1e-5 * bwd_ms, "'%s': backward %g ms, by hand %g",
                  args, job_ms(j, 2), bwd_ms);
    return j;
}

/* plan on the gpt-oss fixture (H 32, 4 q heads and 2 kv heads of 12: q
 * width 48, kv 24; 4 experts of width 32, top 2; 3 blocks, the first and
 * last sliding with a window of 6), 16 tokens, 1e6 FLOP/s (--tflops 1e-6)
 * and a device too fast to be the bound (--device-gbs 1e9), kept blocks (no
 * recompute). The closed form costs a mixture of experts' block as the
 * engine runs it (rp_layer_flops_get), counted here by hand, per token:
 *   GEMM weights a token passes through: q, k, v, o 32 x 96 + 48 x 32, the
 *     router 32 x 4, 2 experts of 3 x 32 x 32: 10880 (2 FLOPs each);
 *   attention 4 x 48 x keys: a sliding block's query sees (6 x 7 / 2 + 10 x
 *     6) / 16 = 5.0625 keys on average, the full block's 17 / 2: 972 and
 *     1632 FLOPs;
 *   rank 2 adapters: q 2 (32 + 48), the router 2 (32 + 4), gate_up's (2I =
 *     64 outputs, gate and up sharing A but each forming x A: A's 32 inputs
 *     twice) 2 (2 x 32 + 64) and down's 2 (32 + 32) on each of the 2
 *     experts a token is routed to: 160 + 72 + 512 + 256 = 1000 weights,
 *     2000 FLOPs (A once: 872 and 1744).
 *   the backward makes the experts' rows again from the routing (the
 *     forward keeps only it): their gate and up GEMMs, 2 x 2 x 32 x 32
 *     = 4096 weights (8192 FLOPs), and with LoRA the gate_up adapter
 *     again and down's A x, 2 (2 (2 x 32 + 64) + 2 x 32) = 640 weights
 *     (1280 FLOPs), a block.
 * Full fine-tuning: forward 3 x 21760 + 2 x 972 + 1632 = 68856 FLOPs a
 * token, backward twice the GEMMs' (130560) and 2.5 x the attention's
 * (five products where the forward has two: 8940) and 3 x 8192.
 * LoRA on q, the router and the experts: forward 68856 + 3 x 2000 = 74856;
 * backward the base's input gradients (3 x 21760), the attention's 2.5
 * times and the adapters' twice their forward (86220), and 3 x (8192 +
 * 1280).
 * The router alone: forward 68856 + 3 x 144. The adapters' bytes
 * as the layout holds them (each A and B padded to 16 floats: the router's
 * B [4, 2] to 16): 160 + 64 + 16 + 4 x 192 + 4 x 128 = 1520 floats a block,
 * downloaded as fp32. The old closed form took a dense MLP of one expert,
 * no router, gate_up's adapter with I outputs and every expert adapter
 * once: 850.944 ms for this forward with LoRA, and refused the router
 * alone. */
START_TEST(moe_plan_counts_the_router_and_experts_as_they_run)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/mpi-tests/fixtures/golden-gpt-oss/oss-lora/model",
             rp_test_srcdir());
    static const struct {
        const char *lora;
        double fwd_ms, bwd_ms;
        int64_t grad_bytes;
    } cases[] = {
        {"", 68856 * 16 / 1e3, (130560 + 8940 + 3 * 8192) * 16 / 1e3, 0},
        {"--lora-rank 2 --lora-targets "
         "q_proj,mlp.router.weight,mlp.experts.gate_up_proj,mlp.experts.down_proj",
         74856 * 16 / 1e3, (86220 + 3 * (8192 + 1280)) * 16 / 1e3, 3 * 1520 * 4},
        {"--lora-rank 2 --lora-targets mlp.router.weight", (68856 + 3 * 144) * 16 / 1e3,
         (3 * 21760 + 2.5 * 3576 + 2 * 3 * 144 + 3 * 8192) * 16 / 1e3, 3 * (64 + 16) * 4},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        /* the embedding's forward is a gather: bytes at 1e9 GB/s, nothing */
        json_object *j = hand_timed_plan(dir, cases[c].lora, "fwd=0-3;bwd=4,0-3",
                                         cases[c].fwd_ms, cases[c].bwd_ms);
        if (cases[c].grad_bytes)
            ck_assert_int_eq(job_field(j, 2, "grad_bytes"), cases[c].grad_bytes);
        json_object_put(j);
    }
}
END_TEST

/* plan on the dense qwen3 fixture (H 64, I 96, 4 q heads and 2 kv heads of
 * 16: q width 64, kv 32; 2 blocks), 16 tokens, 1e6 FLOP/s, a device too
 * fast to be the bound, kept blocks (no recompute), counted here by hand
 * per token: GEMM weights q, k, v, o 64 x 192 and the MLP 3 x 64 x 96:
 * 30720 (2 FLOPs each); attention 4 x 64 x 17 / 2 = 2176 (17 / 2 keys a
 * query); forward 63616 a block, backward twice the GEMMs' and 2.5 x the
 * attention's (five products where the forward has two): 128320. An MLP walking
 * chunks of 8 tokens (--token-tile 8 --mlp-chunk-tokens 8) keeps none of
 * g, u, m: its backward makes them again, the gate and up GEMMs (2 x 2 x
 * 64 x 96 = 24576) more; with rank 2 on all seven projections (adapters q
 * 2 (64 + 64), k and v 2 (64 + 32), o 2 (64 + 64), gate, up and down 2 (64
 * + 96): 1856 weights, 3712 FLOPs) the forward is 67328, the backward the
 * frozen GEMMs' input gradients 61440, the attention's 2.5 x 2176 and the
 * adapters' 2 x 3712, plus over chunks 24576 and the gate and up adapters
 * and the down adapter's A again, 2 (320 + 320 + 192). */
START_TEST(dense_plan_counts_the_remade_mlp)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/mpi-tests/fixtures/golden/qwen3/model", rp_test_srcdir());
    static const struct {
        const char *args;
        double fwd, bwd; /* FLOPs a token of both blocks */
    } cases[] = {
        {"", 2 * 63616, 2 * 128320},
        {"--token-tile 8 --mlp-chunk-tokens 8", 2 * 63616, 2 * (128320 + 24576)},
        {"--token-tile 8 --mlp-chunk-tokens 16", 2 * 63616, 2 * 128320}, /* one chunk */
        {"--lora-rank 2", 2 * 67328, 2 * (61440 + 5440 + 7424)},
        {"--lora-rank 2 --token-tile 8 --mlp-chunk-tokens 8", 2 * 67328,
         2 * (61440 + 5440 + 7424 + 24576 + 1664)},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        json_object *j = hand_timed_plan(dir, cases[c].args, "fwd=0-2;bwd=3,0-2;keep=2",
                                         cases[c].fwd * 16 / 1e3, cases[c].bwd * 16 / 1e3);
        json_object_put(j);
    }
}
END_TEST

static double job_double(json_object *j, int job, const char *field)
{
    json_object *jobs, *v;
    ck_assert(json_object_object_get_ex(j, "jobs", &jobs));
    ck_assert_msg(json_object_object_get_ex(json_object_array_get_idx(jobs, (size_t)job), field,
                                            &v), "job %d has no %s", job, field);
    return json_object_get_double(v);
}

/* plan --lora-rank on the FP8 fixture (qwen3, H 64, I 96, 4 heads and 2 kv
 * heads of 16, 2 blocks, [24, 40] blocks of BF16 scales): each block is
 * dequantised before each use (engine/stage_buffers.c) unless the
 * executor's scratch holds it already. One dequantisation, counted here by
 * hand for fp32 CPU executors: it reads the e4m3 bytes of q, k, v, o, gate,
 * up, down (4096 + 2048 + 2048 + 4096 + 3 x 6144 = 30720), their scales
 * bounded as F32 (grids 3x2, 2x2, 2x2, 3x2, 4x2, 4x2, 3x3: 45 x 4 = 180)
 * and the norms in the compute dtype ((64 + 64 + 16 + 16) x 4 = 640), and
 * writes the block's 30880 elements in fp32 (123520): 155060 bytes, 0.15506
 * ms at --device-gbs 1. With 4 microbatches in one pipeline, a job of one
 * block dequantises once; a forward stage of 2 blocks twice a microbatch
 * (8); a backward one that recomputes both (keep=0), or only the lower
 * (keep=1: the upper's activations kept), uses 1 2 | 2 1 a microbatch and
 * the next starts with the block the last ended with: 3 + 3 x 2 = 9; with
 * both kept 2 1 a microbatch: 8; the tail of two blocks and the head
 * likewise 9. A plan's modelled iteration on one executor is at least its
 * compute, dequantisations included. The same fixture's model without an
 * FP8 base (golden/qwen3) dequantises nothing: its figures are those of
 * the other tests. */
START_TEST(fp8_plan_counts_the_dequantisations_as_the_engine_runs_them)
{
    char dir[512], cmd[8192];
    snprintf(dir, sizeof dir, "%s/mpi-tests/fixtures/golden-fp8/qwen3-bf16-scales-model",
             rp_test_srcdir());
    const double d = (30720 + 45 * 4 + 160 * 4 + 30880 * 4) / 1e6;
    static const struct {
        const char *plan;
        double count[3]; /* the jobs' dequantisations, in job order */
    } cases[] = {
        {"fwd=0-2;bwd=3,0-2;keep=0", {8, 0, 9}},
        {"fwd=0-2;bwd=3,0-2;keep=1", {8, 0, 9}},
        {"fwd=0-2;bwd=3,0-2;keep=2", {8, 0, 8}},
        {"fwd=0-1;bwd=2-3,0-1;keep=0", {1, 1, 1}},
        {"fwd=0;bwd=1-3,0;keep=0", {0, 9, 0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int gpus = 1; gpus <= 2; gpus++) {
            snprintf(cmd, sizeof cmd,
                     "plan --model %s --gpus %d --microbatches 4 --seq-len 16 --batch-size 4 "
                     "--json --device cpu --dtype fp32 --lora-rank 4 --device-gbs 1 "
                     "--pipelines 1 --plan %s",
                     dir, gpus, cases[c].plan);
            json_object *j = json_of(rp_cli_plan, cmd);
            double compute = 0;
            for (int job = 0; job < 3; job++) {
                double got = job_double(j, job, "dequant_ms");
                ck_assert_msg(fabs(got - cases[c].count[job] * d) < 1e-9,
                              "%s: job %d dequantises for %g ms, by hand %g x %g ms",
                              cases[c].plan, job, got, cases[c].count[job], d);
                compute += 4 * job_ms(j, job) + got;
            }
            json_object *v;
            ck_assert(json_object_object_get_ex(j, "iteration_ms", &v));
            if (gpus == 1)
                ck_assert_msg(json_object_get_double(v) >= compute * (1 - 1e-9),
                              "%s: one executor's iteration %g ms, its compute %g ms",
                              cases[c].plan, json_object_get_double(v), compute);
            json_object_put(j);
        }
    snprintf(dir, sizeof dir, "%s/mpi-tests/fixtures/golden/qwen3/model", rp_test_srcdir());
    snprintf(cmd, sizeof cmd,
             "plan --model %s --gpus 2 --microbatches 4 --seq-len 16 --batch-size 4 --json "
             "--device cpu --dtype fp32 --lora-rank 4 --device-gbs 1 --plan fwd=0-2;bwd=3,0-2",
             dir);
    json_object *j = json_of(rp_cli_plan, cmd);
    for (int job = 0; job < 3; job++)
        ck_assert(job_double(j, job, "dequant_ms") == 0);
    json_object_put(j);
}
END_TEST

/* What a report of the search prints, through pr into a file: the text. */
static void reports_of(rp_plan_cli_progress *pr, int live, char *buf, size_t cap)
{
    char path[512];
    snprintf(path, sizeof path, "%s/progress.txt", rp_test_tmpdir());
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    rp_plan_cli_progress_start(pr, "roundpipe plan", live ? RP_PROGRESS_AUTO : RP_PROGRESS_LINE);
    pr->out = f; /* as start chose stderr: the file instead, the mode forced */
    pr->live = live;
    rp_plan_search_set_report(pr->search, rp_plan_cli_progress_report, pr, 0, 0.0);
    rp_plan_cli_progress_context(pr, "--seq-len 8192");
    rp_cost_model *m = NULL;
    rp_error err = {0};
    ck_assert_int_eq(rp_cost_load(paper("qwen3-1.7b.txt"), &m, &err), RP_OK);
    rp_machine mc;
    rp_machine_defaults(&mc);
    mc.gpus = 2;
    mc.microbatches = 4;
    mc.search = pr->search;
    rp_plan *p = malloc(sizeof *p);
    rp_sim_result r;
    ck_assert_int_eq(rp_partition(m, &mc, 0, p, &r, &err), RP_OK);
    rp_plan_cli_progress_end(pr);
    rp_plan_cli_progress_stop(pr);
    fclose(f);
    slurp(path, buf, cap);
    free(p);
    rp_cost_model_destroy(&m);
}

START_TEST(progress_of_a_long_search)
{
    /* a search shorter than the delay prints nothing; --progress none the
     * same plan */
    char cmd[8192];
    static char plain[1 << 20];
    snprintf(cmd, sizeof cmd, "plan --layers %s --gpus 4 --microbatches 8", paper("qwen3-1.7b.txt"));
    ck_assert_int_eq(run(rp_cli_plan, cmd), 0);
    ck_assert_str_eq(err_text, "");
    snprintf(plain, sizeof plain, "%s", out_text);
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "plan --layers %s --gpus 4 --microbatches 8 --progress %s",
                 paper("qwen3-1.7b.txt"), i ? "line" : "none");
        ck_assert_int_eq(run(rp_cli_plan, cmd), 0);
        ck_assert_str_eq(err_text, "");
        ck_assert_str_eq(out_text, plain);
    }
    /* lines: each a whole line naming the command, what it plans and where */
    static char text[1 << 20];
    rp_plan_cli_progress pr;
    reports_of(&pr, 0, text, sizeof text);
    int lines = 0;
    for (char *l = text, *nl; *l; l = nl + 1, lines++) {
        nl = strchr(l, '\n');
        ck_assert_msg(nl != NULL, "a report without its newline: %s", l);
        ck_assert_msg(!strncmp(l, "roundpipe plan: planning --seq-len 8192: width ", 47) &&
                          strstr(l, " plans simulated, ") && !memchr(l, '\r', (size_t)(nl - l)),
                      "report %d: %.*s", lines, (int)(nl - l), l);
    }
    ck_assert_int_gt(lines, 10);
    /* live: one line redrawn in place, cleared at the end */
    reports_of(&pr, 1, text, sizeof text);
    ck_assert_ptr_null(strchr(text, '\n'));
    ck_assert_msg(!strncmp(text, "\r\033[Kroundpipe plan: planning --seq-len 8192: width ", 50),
                  "%.80s", text);
    size_t n = strlen(text);
    ck_assert(n > 4 && !strcmp(text + n - 4, "\r\033[K"));
}
END_TEST

static Suite *plan_cli_suite(void)
{
    Suite *s = suite_create("plan_cli");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, plan_json_agrees_with_the_partitioner);
    tcase_add_test(tc, simulate_compares_schedules);
    tcase_add_test(tc, h100_exact_keeps_up_where_the_optimizer_allows);
    tcase_add_test(tc, config_and_forced_plan);
    tcase_add_test(tc, bad_command_lines_and_files);
    tcase_add_test(tc, lora_plan_counts_frozen_and_adapter_bytes);
    tcase_add_test(tc, moe_plan_counts_the_router_and_experts_as_they_run);
    tcase_add_test(tc, dense_plan_counts_the_remade_mlp);
    tcase_add_test(tc, fp8_plan_counts_the_dequantisations_as_the_engine_runs_them);
    tcase_add_test(tc, progress_of_a_long_search);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(plan_cli_suite, "serial")
