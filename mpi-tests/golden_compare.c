/* golden_compare EXPECTED.jsonl LOG.jsonl EXPECTED.safetensors SAVED.safetensors RTOL
 * golden_compare --loss-only EXPECTED.jsonl LOG.jsonl RTOL
 *
 * Compares a roundpipe training run against a PyTorch/transformers reference
 * (mpi-tests/fixtures/golden, made by tools/make_golden.py):
 *   - every step's loss, lr and grad_norm within RTOL relative; and its
 *     router_aux_loss (an MoE model's auxiliary loss) when the reference
 *     has one, while a log that has one where the reference has none fails;
 *   - every tensor of the reference's final weights present in the saved
 *     model with the same shape, and max|a - b| <= RTOL * max|b| per tensor
 *     (the scale is the tensor's largest magnitude: AdamW moves every element
 *     by about lr, so an element near zero has no meaningful relative error
 *     of its own).
 * --loss-only compares every step's loss (and the step number) only: the
 * bf16 bound of a CUDA run (mpi-tests/test_golden_cuda.sh).
 * Prints one line per failed check and "RP-CHECK: passed=P failed=F". */
#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

static int passed, failed;

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (ok) {
        passed++;
    } else {
        failed++;
        fputs("MISMATCH: ", stdout);
        vprintf(fmt, ap);
        fputc('\n', stdout);
    }
    va_end(ap);
}

static int read_lines(const char *path, json_object **objs, int max)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        check(0, "%s: cannot open", path);
        return 0;
    }
    char line[8192];
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        json_object *o = json_tokener_parse(line);
        if (!o) {
            check(0, "%s: line %d is not JSON", path, n + 1);
            break;
        }
        objs[n++] = o;
    }
    fclose(f);
    return n;
}

/* A missing key is NaN; a JSON null (a step with no counted target) is
 * +Inf, so null matches only null. */
static double field(json_object *o, const char *k)
{
    json_object *v;
    if (!json_object_object_get_ex(o, k, &v))
        return NAN;
    return v ? json_object_get_double(v) : INFINITY;
}

static double rel(double a, double b)
{
    if (isinf(a) || isinf(b))
        return a == b ? 0.0 : INFINITY;
    return fabs(a - b) / fmax(fabs(b), 1e-30);
}

int main(int argc, char **argv)
{
    int loss_only = argc == 5 && strcmp(argv[1], "--loss-only") == 0;
    if (argc != 6 && !loss_only) {
        fprintf(stderr, "usage: %s EXPECTED.jsonl LOG.jsonl EXPECTED.safetensors "
                        "SAVED.safetensors RTOL\n"
                        "       %s --loss-only EXPECTED.jsonl LOG.jsonl RTOL\n", argv[0], argv[0]);
        return 2;
    }
    if (loss_only)
        argv++;
    double rtol = atof(loss_only ? argv[3] : argv[5]), worst_loss = 0, worst_w = 0;
    json_object *exp[256], *got[256];
    int ne = read_lines(argv[1], exp, 256), ng = read_lines(argv[2], got, 256);
    check(ne > 0 && ne == ng, "%d expected steps, %d logged", ne, ng);
    for (int i = 0; i < ne && i < ng; i++) {
        const char *keys[] = {"step", "loss", "lr", "grad_norm"};
        for (int k = 0; k < (loss_only ? 2 : 4); k++) {
            double a = field(got[i], keys[k]), b = field(exp[i], keys[k]);
            double r = rel(a, b);
            if (k == 1 && r > worst_loss)
                worst_loss = r;
            check(r <= rtol, "step %d %s: got %.9g expected %.9g (rel %.2e)", i + 1, keys[k], a,
                  b, r);
        }
        if (loss_only)
            continue;
        int in_exp = json_object_object_get_ex(exp[i], "router_aux_loss", NULL);
        int in_got = json_object_object_get_ex(got[i], "router_aux_loss", NULL);
        if (in_exp) {
            double a = field(got[i], "router_aux_loss"), b = field(exp[i], "router_aux_loss");
            double r = rel(a, b);
            check(r <= rtol, "step %d router_aux_loss: got %.9g%s expected %.9g (rel %.2e)", i + 1,
                  a, in_got ? "" : " (missing)", b, r);
        } else if (in_got) {
            check(0, "step %d router_aux_loss: logged, but the reference has no aux loss", i + 1);
        }
    }
    rp_safetensors *se = NULL, *sg = NULL;
    rp_error err = {0};
    int ok = 0;
    if (!loss_only) {
        ok = rp_safetensors_open(argv[3], &se, &err) == RP_OK;
        check(ok, "%s", err.msg);
        ok = ok && rp_safetensors_open(argv[4], &sg, &err) == RP_OK;
        check(sg != NULL, "%s", err.msg);
    }
    for (size_t i = 0; ok && i < rp_safetensors_count(se); i++) {
        const char *name = rp_safetensors_name(se, i);
        rp_safetensors_tensor te;
        rp_safetensors_find(se, name, &te, NULL);
        float *b = malloc((size_t)te.numel * sizeof(float));
        float *a = malloc((size_t)te.numel * sizeof(float));
        int got_ok = rp_safetensors_read_f32(se, name, te.ndim, te.shape, b, &err) == RP_OK &&
                     rp_safetensors_read_f32(sg, name, te.ndim, te.shape, a, &err) == RP_OK;
        check(got_ok, "tensor %s: %s", name, err.msg);
        if (got_ok) {
            double scale = 0, diff = 0;
            for (int64_t j = 0; j < te.numel; j++) {
                scale = fmax(scale, fabs(b[j]));
                diff = fmax(diff, fabs((double)a[j] - b[j]));
            }
            double r = diff / fmax(scale, 1e-30);
            if (r > worst_w)
                worst_w = r;
            check(r <= rtol, "tensor %s: max|diff| %.3e, max|w| %.3e (rel %.2e)", name, diff,
                  scale, r);
        }
        free(a);
        free(b);
    }
    rp_safetensors_close(&se);
    rp_safetensors_close(&sg);
    for (int i = 0; i < ne; i++)
        json_object_put(exp[i]);
    for (int i = 0; i < ng; i++)
        json_object_put(got[i]);
    printf("golden: worst loss rel error %.3e, worst weight rel error %.3e (tolerance %.1e)\n",
           worst_loss, worst_w, rtol);
    printf("RP-CHECK: passed=%d failed=%d\n", passed, failed);
    return failed ? 1 : 0;
}
