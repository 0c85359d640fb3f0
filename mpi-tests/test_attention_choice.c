/* Proves, on any machine (no GPU needed): cuDNN's run-time loader
 * (kernels/cudnn_loader.h) reports a RP_CUDNN_LIBRARY that names a missing
 * file, or a file that is not cuDNN, by its path and leaves nothing open;
 * it opens the cuDNN 9 this machine's CUDA toolkit ships when pointed at it
 * (skipped where that file is absent) and resolves every entry point; the
 * attention choice (kernels/attention_choice.h) takes the own kernel under
 * auto with the loader's reason in its log line, refuses --attention cudnn
 * with that reason (and on a GPU older than sm_80), names cuDNN's version
 * when it is chosen, and sends windows, sinks, head dims cuDNN does not
 * run and document segments to the own kernel; a --documents run keeps
 * nothing for cuDNN; every CUDA path the H200 window of 2026-11-30 proved
 * is on without RP_ALLOW_UNPROVEN_CUDA, and RP_DISABLE_CUDA_PATHS turns
 * paths off, winning over it. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/unproven.h"
#include "kernels/attention_choice.h"
#include "kernels/attn_documents.h"
#include "kernels/cudnn_loader.h"
#include "rp_check.h"

/* what this machine's CUDA toolkit ships (the configure's default place) */
#define TOOLKIT_CUDNN "/usr/local/cuda/lib64/libcudnn.so.9"

START_TEST(missing_library_reported_by_its_path)
{
    setenv("RP_CUDNN_LIBRARY", "/nonexistent/libcudnn.so.9", 1);
    rp_cudnn_library lib;
    char why[640] = "";
    ck_assert_int_eq(rp_cudnn_library_open(&lib, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "RP_CUDNN_LIBRARY=/nonexistent/libcudnn.so.9 cannot be loaded"),
                  "message: %s", why);
    ck_assert_ptr_null(lib.handle);
    rp_cudnn_library_close(&lib); /* nothing to close: harmless */

    /* auto falls back and says why; cudnn is refused with the same reason */
    int use = 1;
    char note[768];
    rp_error err = {0};
    ck_assert_int_eq(rp_attention_choose(RP_ATTENTION_AUTO, why, 0, 9, 0, 1, &use, note, sizeof note,
                                         &err), RP_OK);
    ck_assert_int_eq(use, 0);
    ck_assert_msg(strncmp(note, "attention: own kernel (RP_CUDNN_LIBRARY=/nonexistent", 52) == 0,
                  "note: %s", note);
    ck_assert_int_eq(rp_attention_choose(RP_ATTENTION_CUDNN, why, 0, 9, 0, 1, &use, note,
                                         sizeof note, &err), RP_ERR_UNSUPPORTED);
    ck_assert_int_eq(use, 0);
    ck_assert_msg(strstr(err.msg, "--attention cudnn: RP_CUDNN_LIBRARY=/nonexistent"), "%s",
                  err.msg);
    unsetenv("RP_CUDNN_LIBRARY");
}
END_TEST

START_TEST(a_file_that_is_not_cudnn_refused)
{
    /* a shared library without cuDNN's symbols: the C library itself */
    setenv("RP_CUDNN_LIBRARY", "libc.so.6", 1);
    rp_cudnn_library lib;
    char why[640] = "";
    ck_assert_int_eq(rp_cudnn_library_open(&lib, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "libc.so.6 has no symbol cudnnGetVersion"), "message: %s", why);
    ck_assert_ptr_null(lib.handle);
    /* a file that is no library at all */
    char path[512];
    snprintf(path, sizeof path, "%s/not-a-library.so", rp_test_tmpdir());
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("not an ELF file\n", f);
    fclose(f);
    setenv("RP_CUDNN_LIBRARY", path, 1);
    ck_assert_int_eq(rp_cudnn_library_open(&lib, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "cannot be loaded") && strstr(why, path), "message: %s", why);
    unlink(path);
    unsetenv("RP_CUDNN_LIBRARY");
}
END_TEST

START_TEST(toolkit_cudnn_opens)
{
    if (access(TOOLKIT_CUDNN, R_OK) != 0) {
        printf("SKIP part: %s absent\n", TOOLKIT_CUDNN);
        return;
    }
    setenv("RP_CUDNN_LIBRARY", TOOLKIT_CUDNN, 1);
    rp_cudnn_library lib;
    char why[640] = "";
    ck_assert_msg(rp_cudnn_library_open(&lib, why, sizeof why) == 0, "%s", why);
    ck_assert_ptr_nonnull(lib.handle);
    ck_assert_uint_eq(lib.version / 10000, 9);
    for (int i = 0; i < RP_CUDNN_SYMBOLS; i++)
        ck_assert_msg(lib.symbols[i] != NULL, "%s unresolved", rp_cudnn_symbol_names[i]);
    ck_assert_str_eq(lib.path, TOOLKIT_CUDNN);
    int use = 0;
    char note[768], want[64];
    rp_error err = {0};
    ck_assert_int_eq(rp_attention_choose(RP_ATTENTION_AUTO, NULL, lib.version, 9, 0, 1, &use, note,
                                         sizeof note, &err), RP_OK);
    ck_assert_int_eq(use, 1);
    snprintf(want, sizeof want, "attention: cudnn 9.%zu.%zu (fused flash SDPA)",
             lib.version / 100 % 100, lib.version % 100);
    ck_assert_str_eq(note, want);
    rp_cudnn_library_close(&lib);
    ck_assert_ptr_null(lib.handle);
    unsetenv("RP_CUDNN_LIBRARY");
}
END_TEST

/* A GPU or library cuDNN's attention is not taken on: auto runs the own
 * kernel, its note saying why (note_has); --attention cudnn is refused,
 * naming the reason (err_has). */
static void refused_both(size_t version, int major, int minor, const char *note_has,
                         const char *err_has)
{
    int use = 1;
    char note[768];
    rp_error err = {0};
    ck_assert_int_eq(rp_attention_choose(RP_ATTENTION_AUTO, NULL, version, major, minor, 1, &use,
                                         note, sizeof note, &err), RP_OK);
    ck_assert_int_eq(use, 0);
    ck_assert_msg(strstr(note, "attention: own kernel (") && strstr(note, note_has), "%s", note);
    ck_assert_int_eq(rp_attention_choose(RP_ATTENTION_CUDNN, NULL, version, major, minor, 1, &use,
                                         note, sizeof note, &err), RP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "--attention cudnn: ") && strstr(err.msg, err_has), "%s",
                  err.msg);
}

START_TEST(choice_by_mode_and_gpu)
{
    int use = 1;
    char note[768];
    rp_error err = {0};
    ck_assert_int_eq(rp_attention_choose(RP_ATTENTION_OWN, NULL, 91900, 9, 0, 1, &use, note,
                                         sizeof note, &err), RP_OK);
    ck_assert_int_eq(use, 0);
    ck_assert_str_eq(note, "attention: own kernel (--attention own)");
    ck_assert_int_eq(rp_attention_choose(RP_ATTENTION_CUDNN, NULL, 91900, 8, 6, 1, &use, note,
                                         sizeof note, &err), RP_OK);
    ck_assert_int_eq(use, 1);
    ck_assert_str_eq(note, "attention: cudnn 9.19.0 (fused flash SDPA)");
    /* with the cudnn path turned off (RP_DISABLE_CUDA_PATHS), auto does not
     * take cuDNN; --attention cudnn asks for it outright */
    ck_assert_int_eq(rp_attention_choose(RP_ATTENTION_AUTO, NULL, 91900, 9, 0, 0, &use, note,
                                         sizeof note, &err), RP_OK);
    ck_assert_int_eq(use, 0);
    ck_assert_msg(strstr(note, "attention: own kernel (") &&
                      strstr(note, "RP_DISABLE_CUDA_PATHS names cudnn"), "%s", note);
    ck_assert_int_eq(rp_attention_choose(RP_ATTENTION_CUDNN, NULL, 91900, 9, 0, 0, &use, note,
                                         sizeof note, &err), RP_OK);
    ck_assert_int_eq(use, 1);
    ck_assert_int_eq(rp_attention_choose(RP_ATTENTION_AUTO, NULL, 91900, 9, 0, 1, &use, note,
                                         sizeof note, &err), RP_OK);
    ck_assert_int_eq(use, 1);
    /* an sm_75 GPU: auto takes the own kernel and says so; cudnn is refused */
    refused_both(91900, 7, 5, "sm_75", "sm_80");
    /* cuDNN 9.10.0 and 9.10.1 (known bugs in the bf16 backward) and sm_10x
     * (a deterministic backward needs knobs not set here) likewise; 9.10.2
     * and sm_120 as any other */
    refused_both(91000, 9, 0, "cuDNN 9.10.0's bf16 SDPA backward has known bugs", "cuDNN 9.10.0");
    refused_both(91001, 9, 0, "cuDNN 9.10.1's bf16 SDPA backward has known bugs", "cuDNN 9.10.1");
    refused_both(91900, 10, 0, "on sm_100 cuDNN's deterministic SDPA backward", "on sm_100");
    refused_both(91900, 10, 3, "on sm_103", "deterministic");
    ck_assert_int_eq(rp_attention_choose(RP_ATTENTION_AUTO, NULL, 91002, 9, 0, 1, &use, note,
                                         sizeof note, &err), RP_OK);
    ck_assert_int_eq(use, 1);
    ck_assert_int_eq(rp_attention_choose(RP_ATTENTION_CUDNN, NULL, 91900, 12, 0, 1, &use, note,
                                         sizeof note, &err), RP_OK);
    ck_assert_int_eq(use, 1);
    ck_assert_int_eq(rp_attention_choose(7, NULL, 91900, 9, 0, 1, &use, note, sizeof note, &err),
                     RP_ERR_INVALID_ARG);
    ck_assert_str_eq(rp_attention_mode_words[RP_ATTENTION_AUTO], "auto");
    ck_assert_str_eq(rp_attention_mode_words[RP_ATTENTION_CUDNN], "cudnn");
    ck_assert_str_eq(rp_attention_mode_words[RP_ATTENTION_OWN], "own");
}
END_TEST

START_TEST(shapes_cudnn_does_not_take)
{
    rp_attn_shape s = {.nseq = 2, .seqlen = 100, .nheads = 4, .nkv = 2, .head_dim = 64,
                       .scale = 0.125f};
    ck_assert_ptr_null(rp_attention_cudnn_refusal(&s));
    s.head_dim = 128;
    ck_assert_ptr_null(rp_attention_cudnn_refusal(&s));
    s.head_dim = 256;
    ck_assert_ptr_nonnull(rp_attention_cudnn_refusal(&s));
    s.head_dim = 60;
    ck_assert_ptr_nonnull(rp_attention_cudnn_refusal(&s));
    s.head_dim = 64;
    /* document segments are taken only with their host copy: the ragged
     * layout needs their count before the call */
    _Alignas(16) int32_t starts[8];
    s.seg_start = starts;
    ck_assert_msg(strstr(rp_attention_cudnn_refusal(&s), "document segments") &&
                      strstr(rp_attention_cudnn_refusal(&s), "host copy"), "segments");
    s.seg_host = starts;
    ck_assert_ptr_null(rp_attention_cudnn_refusal(&s));
    s.seg_start = s.seg_host = NULL;
    s.window = 128;
    ck_assert_msg(strstr(rp_attention_cudnn_refusal(&s), "window") != NULL, "window");
    s.window = 0;
    float sinks[4];
    s.sinks = sinks;
    ck_assert_msg(strstr(rp_attention_cudnn_refusal(&s), "sinks") != NULL, "sinks");
    s.sinks = NULL;
    s.seqlen = 1; /* cuDNN's backward takes no sequence of one token */
    ck_assert_msg(strstr(rp_attention_cudnn_refusal(&s), "one token") != NULL, "one token");
    s.seqlen = 2;
    ck_assert_ptr_null(rp_attention_cudnn_refusal(&s));
    s.seqlen = 100;
    s.nkv = 3; /* 4 heads do not group over 3 */
    ck_assert_ptr_nonnull(rp_attention_cudnn_refusal(&s));
}
END_TEST

/* What a run reserves for cuDNN, by hand: the workspace budget is 2 bytes
 * a score of one microbatch's heads over the lengths padded to 128 (nseq *
 * nheads * P^2), 16 + 4 head_dim bytes a padded row of each head (fp32
 * statistics and dQ's fp32 accumulator) and 1 MiB, where that is at most
 * a quarter of the device (else nothing), and never below what cuDNN
 * 9.14.0's deterministic backward asked on an H200 (bench/README,
 * 2026-11-30); the buffers the backward's statistics and Delta (fp32 per
 * row and head) and dq, dk, dv in bf16, each rounded up to 256 bytes;
 * nothing for a shape cuDNN does not take. */
START_TEST(what_a_run_reserves_for_cudnn)
{
    rp_attn_shape s = {.nseq = 2, .seqlen = 100, .nheads = 4, .nkv = 2, .head_dim = 64,
                       .scale = 0.125f};
    const size_t big = (size_t)80 << 30;
    /* 100 tokens pad to 128: 2 x 2 x 4 x 128^2 + (16 + 4 x 64) x 2 x 4 x
     * 128 + 1 MiB; the unpadded 2 x 2 x 4 x 100^2 = 160000 was below the
     * 262144 bytes cudnn-frontend estimates for this shape's dP (lengths
     * padded to 64) */
    ck_assert_uint_eq(rp_attention_cudnn_row_bytes(&s), 272);
    const size_t ws = 2u * 2 * 4 * 128 * 128 + 272u * 2 * 4 * 128 + 1048576;
    ck_assert_uint_eq(ws, 1589248);
    ck_assert_uint_eq(rp_attention_cudnn_workspace_budget(&s, big), ws);
    /* rows 200: stats 200*4*4 = 3200 -> 3328; dq 200*256*2 = 102400 (a
     * multiple of 256); dk, dv 200*128*2 = 51200 each */
    ck_assert_uint_eq(rp_attention_cudnn_buffer_bytes(&s), 2u * 3328 + 102400 + 2u * 51200);
    ck_assert_uint_eq(rp_attention_cudnn_reserve_bytes(&s, big),
                      ws + 2u * 3328 + 102400 + 2u * 51200);
    /* over a quarter of the device: nothing (the shape takes the own
     * kernel), not the quarter; at the quarter exactly: all of it */
    ck_assert_uint_eq(rp_attention_cudnn_workspace_want(&s), ws);
    ck_assert_uint_eq(rp_attention_cudnn_workspace_budget(&s, 4 * ws - 1), 0);
    ck_assert_uint_eq(rp_attention_cudnn_reserve_bytes(&s, 4 * ws - 1), 0);
    ck_assert_uint_eq(rp_attention_cudnn_workspace_budget(&s, 4 * ws), ws);
    /* 128 tokens need no padding, 129 pad to 256 */
    s.seqlen = 128;
    ck_assert_uint_eq(rp_attention_cudnn_workspace_budget(&s, big), ws);
    s.seqlen = 129;
    ck_assert_uint_eq(rp_attention_cudnn_workspace_budget(&s, big),
                      2u * 2 * 4 * 256 * 256 + 272u * 2 * 4 * 256 + 1048576);
    s.seqlen = 100;
    /* Qwen3-1.7B's heads at 4096 tokens: 512 MiB of dP, 33 MiB of rows
     * (528 bytes each) and 1 MiB; at 32768 tokens (32 GiB wanted) nothing
     * on an 80 GiB GPU, whose quarter is 20 GiB */
    rp_attn_shape q = {.nseq = 1, .seqlen = 4096, .nheads = 16, .nkv = 8, .head_dim = 128,
                       .scale = 0.088f};
    ck_assert_uint_eq(rp_attention_cudnn_workspace_budget(&q, big), (size_t)546 << 20);
    q.seqlen = 32768;
    ck_assert_uint_eq(rp_attention_cudnn_workspace_budget(&q, big), 0);
    ck_assert_uint_eq(rp_attention_cudnn_reserve_bytes(&q, big), 0);
    /* what cuDNN 9.14.0's plans asked on the H200 (139 GiB) for these heads
     * (bench_attention's RESULT attention-cudnn-workspace lines, bench/README
     * 2026-11-30): the budget covers each, and stays within 3% of it */
    const size_t h200 = (size_t)139 << 30;
    const int64_t lengths[4] = {4096, 8192, 16384, 32768};
    const size_t asked[4] = {570425472u, 2214592640u, 8724152448u, 34628173952u};
    for (int i = 0; i < 4; i++) {
        q.seqlen = lengths[i];
        size_t b = rp_attention_cudnn_workspace_budget(&q, h200);
        ck_assert_msg(b >= asked[i] && b <= asked[i] + asked[i] / 33, "seq %lld: budget %zu "
                      "against the %zu bytes cuDNN asked", (long long)lengths[i], b, asked[i]);
    }
    /* refused shapes reserve nothing */
    float sinks[4];
    s.sinks = sinks;
    ck_assert_uint_eq(rp_attention_cudnn_reserve_bytes(&s, big), 0);
    ck_assert_uint_eq(rp_attention_cudnn_buffer_bytes(&s), 0);
    s.sinks = NULL;
    s.head_dim = 60;
    ck_assert_uint_eq(rp_attention_cudnn_workspace_budget(&s, big), 0);
}
END_TEST

/* One rule for what train and plan keep for cuDNN, by hand for the shape
 * above (2 x 100 tokens, 4/2 heads of 64): 1589248 bytes of workspace
 * budget + 2 x 3328 + 102400 + 2 x 51200 of buffers = 1800704 bytes, in a
 * build with cuDNN's headers (0 in one without), for cudnn, and for auto
 * with the cudnn path on. A --documents run whose documents do not go to
 * cuDNN (the cudnn-documents path off: the callers' documents argument)
 * keeps nothing; own, auto with the cudnn path off, an sm_75 GPU and
 * gpt-oss keep nothing either. */
START_TEST(a_documents_run_reserves_nothing)
{
    const rp_attn_shape s = {.nseq = 2, .seqlen = 100, .nheads = 4, .nkv = 2, .head_dim = 64,
                             .scale = 0.125f};
    const size_t big = (size_t)80 << 30;
#ifdef RP_HAVE_CUDNN
    const size_t want = 1800704;
#else
    const size_t want = 0;
#endif
    /* mode, cudnn path on, sm, documents, gpt-oss */
    ck_assert_uint_eq(rp_attention_run_reserve_bytes(RP_ATTENTION_CUDNN, 0, 90, 0, 0, &s, big),
                      want);
    ck_assert_uint_eq(rp_attention_run_reserve_bytes(RP_ATTENTION_AUTO, 1, 0, 0, 0, &s, big),
                      want);
    ck_assert_uint_eq(rp_attention_run_reserve_bytes(RP_ATTENTION_CUDNN, 1, 90, 1, 0, &s, big), 0);
    ck_assert_uint_eq(rp_attention_run_reserve_bytes(RP_ATTENTION_AUTO, 1, 90, 1, 0, &s, big), 0);
    ck_assert_uint_eq(rp_attention_run_reserve_bytes(RP_ATTENTION_AUTO, 0, 90, 0, 0, &s, big), 0);
    ck_assert_uint_eq(rp_attention_run_reserve_bytes(RP_ATTENTION_OWN, 1, 90, 0, 0, &s, big), 0);
    ck_assert_uint_eq(rp_attention_run_reserve_bytes(RP_ATTENTION_CUDNN, 1, 75, 0, 0, &s, big), 0);
    ck_assert_uint_eq(rp_attention_run_reserve_bytes(RP_ATTENTION_CUDNN, 1, 90, 0, 1, &s, big), 0);
    /* documents cuDNN takes (the cudnn-documents path on): twice the
     * workspace budget, and statistics for 8 x 200 rows, 2 x 25600 + 102400
     * + 2 x 51200 = 256000 bytes of buffers */
    ck_assert_uint_eq(rp_attention_cudnn_documents_budget(&s, big), 2 * 1589248);
    ck_assert_uint_eq(rp_attention_cudnn_documents_budget(&s, 8 * 1589248), 2 * 1589248);
    ck_assert_uint_eq(rp_attention_cudnn_documents_budget(&s, 8 * 1589248 - 4), 0);
#ifdef RP_HAVE_CUDNN
    const size_t documents = 2 * 1589248 + 256000;
#else
    const size_t documents = 0;
#endif
    ck_assert_uint_eq(rp_attention_cudnn_documents_buffer_bytes(&s), 256000);
    ck_assert_uint_eq(rp_attention_run_reserve_bytes(RP_ATTENTION_AUTO, 1, 90,
                                                     RP_ATTENTION_DOCUMENTS_CUDNN, 0, &s, big),
                      documents);
    ck_assert_uint_eq(rp_attention_run_reserve_bytes(RP_ATTENTION_AUTO, 1, 90,
                                                     RP_ATTENTION_DOCUMENTS_OWN, 0, &s, big), 0);
    /* which: train documents, eval documents, the cudnn-documents path */
    ck_assert_int_eq(rp_attention_run_documents(0, 0, 0), RP_ATTENTION_NO_DOCUMENTS);
    ck_assert_int_eq(rp_attention_run_documents(0, 0, 1), RP_ATTENTION_NO_DOCUMENTS);
    ck_assert_int_eq(rp_attention_run_documents(1, 0, 0), RP_ATTENTION_DOCUMENTS_OWN);
    ck_assert_int_eq(rp_attention_run_documents(1, 1, 0), RP_ATTENTION_DOCUMENTS_OWN);
    ck_assert_int_eq(rp_attention_run_documents(0, 1, 0), RP_ATTENTION_NO_DOCUMENTS);
    ck_assert_int_eq(rp_attention_run_documents(1, 0, 1), RP_ATTENTION_DOCUMENTS_CUDNN);
    ck_assert_int_eq(rp_attention_run_documents(0, 1, 1), RP_ATTENTION_DOCUMENTS_CUDNN);
}
END_TEST

/* The documents of a call as cuDNN's ragged layout takes them
 * (kernels/attn_documents.h), against a brute force over the tokens: a
 * document is the tokens of one sequence sharing a seg_start value, as
 * rp_dataset_segments writes it. Random packings of 3 sequences of 37
 * tokens, and the rounding and refusal rules by hand. */
START_TEST(documents_as_ragged_batch_entries)
{
    enum { NSEQ = 3, LEN = 37, T = NSEQ * LEN };
    int32_t seg[T], first[2 * T + 1], length[2 * T];
    unsigned rng = 12345;
    for (int trial = 0; trial < 200; trial++) {
        for (int j = 0; j < NSEQ; j++) { /* starts drawn with a per-trial density */
            int cur = 0;
            for (int t = 0; t < LEN; t++) {
                rng = rng * 1103515245u + 12345u;
                if (t > 0 && (int)(rng >> 16) % 16 < trial % 9)
                    cur = t;
                seg[j * LEN + t] = cur;
            }
        }
        /* brute force: the distinct (sequence, seg_start) keys, their sizes */
        int64_t count = 0, longest = 0;
        for (int t = 0; t < T; t++) {
            int seen = 0, size = 0;
            for (int u = 0; u < T; u++) {
                int same = u / LEN == t / LEN && seg[u] == seg[t];
                size += same;
                seen |= same && u < t;
            }
            count += !seen;
            longest = size > longest ? size : longest;
        }
        rp_attn_documents d;
        rp_attn_documents_measure(seg, NSEQ, LEN, &d);
        ck_assert_int_eq(d.count, count);
        ck_assert_int_eq(d.longest, longest);
        ck_assert(d.slots >= d.count && d.slots < 2 * d.count + (d.count == 0));
        ck_assert((d.slots & (d.slots - 1)) == 0);
        ck_assert_int_eq(d.span, LEN); /* 64 at least, at most seqlen */
        rp_attn_documents_table(seg, NSEQ, LEN, &d, first, length);
        int covered[T] = {0};
        for (int64_t b = 0; b < d.slots; b++) {
            if (b >= d.count) {
                ck_assert_int_eq(first[b], T);
                ck_assert_int_eq(length[b], 0);
                continue;
            }
            ck_assert(length[b] >= 1 && (b == 0 || first[b] > first[b - 1]));
            for (int i = 0; i < length[b]; i++) { /* one sequence, one seg_start */
                const int t = first[b] + i;
                ck_assert(t / LEN == first[b] / LEN);
                ck_assert_int_eq(seg[t], first[b] % LEN);
                covered[t]++;
            }
        }
        ck_assert_int_eq(first[d.slots], T);
        for (int t = 0; t < T; t++)
            ck_assert_int_eq(covered[t], 1);
        /* the padded statistics' values (3 heads) name each token's row of
         * each head once, in its entry's order, padding none */
        enum { H = 3 };
        int rows[T * H] = {0};
        for (int64_t i = 0; i < d.slots * H * d.span; i++) {
            int64_t h = -1, t = rp_attn_documents_token(i, first, length, H, d.span, &h);
            const int64_t b = i / (d.span * H), pos = i % d.span;
            ck_assert(h >= 0 && h < H);
            if (pos >= length[b]) {
                ck_assert_int_eq(t, -1);
                continue;
            }
            ck_assert_int_eq(t, first[b] + pos);
            rows[t * H + h]++;
        }
        for (int r = 0; r < T * H; r++)
            ck_assert_int_eq(rows[r], 1);
    }
    /* rounding: 5 documents, the longest 100 tokens, in 2 x 4096 */
    int32_t *big = calloc(2 * 4096, sizeof *big);
    ck_assert_ptr_nonnull(big);
    const int cuts[] = {100, 150, 190};
    for (int t = 0; t < 4096; t++) {
        int cur = 0;
        for (int c = 0; c < 3; c++)
            cur = t >= cuts[c] ? cuts[c] : cur;
        big[t] = cur;
    }
    for (int t = 0; t < 4096; t++)
        big[4096 + t] = 0; /* the second sequence one document of 4096 */
    rp_attn_documents d;
    rp_attn_documents_measure(big, 2, 4096, &d);
    ck_assert_int_eq(d.count, 5);
    ck_assert_int_eq(d.longest, 4096);
    rp_attn_documents_measure(big, 1, 4096, &d); /* the first alone: 4 documents */
    ck_assert_int_eq(d.count, 4);
    ck_assert_int_eq(d.slots, 4);
    ck_assert_int_eq(d.span, 4096); /* 3906 tokens round up to 4096 */
    rp_attn_shape s = {.nseq = 1, .seqlen = 4096, .nheads = 16, .nkv = 8, .head_dim = 128};
    const size_t gpu = (size_t)80 << 30;
    ck_assert_msg(rp_attn_documents_refusal(&d, &s, gpu) &&
                      strstr(rp_attn_documents_refusal(&d, &s, gpu), "uneven"),
                  "4 x 4096^2 scores > twice 4096^2");
    for (int t = 0; t < 4096; t++) /* 32 documents of 128 */
        big[t] = t / 128 * 128;
    rp_attn_documents_measure(big, 1, 4096, &d);
    ck_assert_int_eq(d.count, 32);
    ck_assert_int_eq(d.longest, 128);
    ck_assert_int_eq(d.slots, 32);
    ck_assert_int_eq(d.span, 128);
    ck_assert_ptr_null(rp_attn_documents_refusal(&d, &s, gpu)); /* 32 x 128^2 < 4096^2 */
    for (int t = 0; t < 4096; t++) /* 4096 documents of one token: 4096 x 64^2 scores */
        big[t] = t;
    rp_attn_documents_measure(big, 1, 4096, &d);
    ck_assert_int_eq(d.slots, 4096);
    ck_assert_int_eq(d.span, 64);
    ck_assert_msg(rp_attn_documents_refusal(&d, &s, gpu) &&
                      strstr(rp_attn_documents_refusal(&d, &s, gpu), "statistics"),
                  "4096 x 64 rows > 8 x 4096");
    /* test_cuda_cudnn_attention's premises: its documents cases are given
     * to cuDNN, its uneven case is not */
    const struct {
        rp_attn_shape s;
        int starts[8];
        int taken;
    } gpu_cases[] = {
        {{.nseq = 1, .seqlen = 257, .nheads = 4, .nkv = 2, .head_dim = 128},
         {0, 40, 97, 200, -1},
         1},
        {{.nseq = 1, .seqlen = 200, .nheads = 8, .nkv = 1, .head_dim = 128}, {0, 100, -1}, 1},
        {{.nseq = 1, .seqlen = 1024, .nheads = 4, .nkv = 2, .head_dim = 64}, {0, 48, 100, -1}, 0},
    };
    for (size_t i = 0; i < sizeof gpu_cases / sizeof *gpu_cases; i++) {
        const int64_t L = gpu_cases[i].s.seqlen;
        for (int64_t t = 0; t < L; t++) {
            int cur = 0;
            for (int c = 0; gpu_cases[i].starts[c] >= 0; c++)
                cur = t >= gpu_cases[i].starts[c] ? gpu_cases[i].starts[c] : cur;
            big[t] = cur;
        }
        rp_attn_documents_measure(big, 1, L, &d);
        const char *why = rp_attn_documents_refusal(&d, &gpu_cases[i].s, gpu);
        ck_assert_msg(gpu_cases[i].taken ? why == NULL : why != NULL, "case %zu: %s", i,
                      why ? why : "taken");
    }
    /* and the two sequences of 300 with 12 documents of 1 to 64 tokens */
    const int starts300[2][8] = {{0, 1, 3, 64, 128, 190, 254, -1}, {0, 64, 128, 192, 256, -1}};
    for (int j = 0; j < 2; j++)
        for (int t = 0; t < 300; t++) {
            int cur = 0;
            for (int c = 0; starts300[j][c] >= 0; c++)
                cur = t >= starts300[j][c] ? starts300[j][c] : cur;
            big[j * 300 + t] = cur;
        }
    rp_attn_documents_measure(big, 2, 300, &d);
    ck_assert_int_eq(d.count, 12);
    ck_assert_int_eq(d.slots, 16);
    ck_assert_int_eq(d.span, 64);
    const rp_attn_shape s300 = {.nseq = 2, .seqlen = 300, .nheads = 4, .nkv = 2, .head_dim = 64};
    ck_assert_ptr_null(rp_attn_documents_refusal(&d, &s300, gpu));
    s.nseq = 1 << 12; /* 2^24 tokens of 2048 values: past int32 offsets */
    d.slots = 1, d.span = 64;
    ck_assert_msg(strstr(rp_attn_documents_refusal(&d, &s, gpu), "32-bit") != NULL, "offsets");
    free(big);
}
END_TEST

/* The switch of the CUDA paths waiting for a GPU (core/unproven.h), which
 * also says whether auto may take cuDNN. */
START_TEST(unproven_switch_parsed)
{
    rp_error err = {0};
    unsigned m = 99;
    ck_assert_int_eq(rp_unproven_parse(NULL, &m, &err), RP_OK);
    ck_assert_uint_eq(m, 0);
    ck_assert_int_eq(rp_unproven_parse("", &m, &err), RP_OK);
    ck_assert_uint_eq(m, 0);
    ck_assert_int_eq(rp_unproven_parse("0", &m, &err), RP_OK);
    ck_assert_uint_eq(m, 0);
    ck_assert_int_eq(rp_unproven_parse("1", &m, &err), RP_OK);
    ck_assert_uint_eq(m, (1u << RP_UNPROVEN_COUNT) - 1);
    ck_assert_int_eq(rp_unproven_parse("cudnn", &m, &err), RP_OK);
    ck_assert_uint_eq(m, 1u << RP_UNPROVEN_CUDNN);
    ck_assert_int_eq(rp_unproven_parse(" fp8-upload , gpt-oss,,documents ", &m, &err), RP_OK);
    ck_assert_uint_eq(m, 1u << RP_UNPROVEN_FP8_UPLOAD | 1u << RP_UNPROVEN_GPT_OSS |
                             1u << RP_UNPROVEN_DOCUMENTS);
    ck_assert_int_eq(rp_unproven_parse("copies,gemm-lt", &m, &err), RP_OK);
    ck_assert_uint_eq(m, 1u << RP_UNPROVEN_COPIES | 1u << RP_UNPROVEN_GEMM_LT);
    ck_assert_str_eq(rp_unproven_name(RP_UNPROVEN_GEMM_LT), "gemm-lt");
    ck_assert_int_eq(rp_unproven_parse("xent-fp32, fused-xent", &m, &err), RP_OK);
    ck_assert_uint_eq(m, 1u << RP_UNPROVEN_XENT_FP32 | 1u << RP_UNPROVEN_FUSED_XENT);
    ck_assert_int_eq(rp_unproven_parse("gemm-lt, bf16-mlp", &m, &err), RP_OK);
    ck_assert_uint_eq(m, 1u << RP_UNPROVEN_GEMM_LT | 1u << RP_UNPROVEN_BF16_MLP);
    ck_assert_str_eq(rp_unproven_name(RP_UNPROVEN_BF16_MLP), "bf16-mlp");
    ck_assert_int_eq(rp_unproven_parse("bf16-mlp,fused-gate-up", &m, &err), RP_OK);
    ck_assert_uint_eq(m, 1u << RP_UNPROVEN_BF16_MLP | 1u << RP_UNPROVEN_FUSED_GATE_UP);
    ck_assert_str_eq(rp_unproven_name(RP_UNPROVEN_FUSED_GATE_UP), "fused-gate-up");
    ck_assert_int_eq(rp_unproven_parse("cudnn-documents", &m, &err), RP_OK);
    ck_assert_uint_eq(m, 1u << RP_UNPROVEN_CUDNN_DOCUMENTS);
    /* a prefix, a longer word, "1" in a list name no path */
    const char *bad[] = {"cud", "cudnn9", "1,cudnn", "documents,fp8", "all", "bf16", "bf16-mlps"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_int_eq(rp_unproven_parse(bad[i], &m, &err), RP_ERR_INVALID_ARG);
        ck_assert_uint_eq(m, 0);
        ck_assert_msg(strstr(err.msg, "RP_ALLOW_UNPROVEN_CUDA") && strstr(err.msg, "gpt-oss"),
                      "%s", err.msg);
        for (int p = 0; p < RP_UNPROVEN_COUNT; p++) /* every name, none cut off */
            ck_assert_msg(strstr(err.msg, rp_unproven_name((rp_unproven)p)), "%s lacks %s",
                          err.msg, rp_unproven_name((rp_unproven)p));
    }
    for (int p = 0; p < RP_UNPROVEN_COUNT; p++)
        ck_assert_ptr_nonnull(rp_unproven_what((rp_unproven)p));
    ck_assert_ptr_null(rp_unproven_name(RP_UNPROVEN_COUNT));
    /* every path the H200 window of 2026-11-30 proved runs without the
     * switch, the one written since (cudnn-documents) only with it;
     * RP_DISABLE_CUDA_PATHS turns paths off, and wins over it */
    unsetenv("RP_ALLOW_UNPROVEN_CUDA");
    unsetenv("RP_DISABLE_CUDA_PATHS");
    const unsigned waiting = 1u << RP_UNPROVEN_CUDNN_DOCUMENTS;
    for (int p = 0; p < RP_UNPROVEN_COUNT; p++) {
        if (rp_unproven_in(waiting, (rp_unproven)p)) {
            ck_assert_ptr_null(rp_unproven_proven((rp_unproven)p));
            ck_assert(!rp_unproven_allowed((rp_unproven)p));
            continue;
        }
        ck_assert_msg(rp_unproven_proven((rp_unproven)p) &&
                          strstr(rp_unproven_proven((rp_unproven)p), "2026-11-30"),
                      "%s", rp_unproven_name((rp_unproven)p));
        ck_assert(rp_unproven_allowed((rp_unproven)p));
    }
    ck_assert_uint_eq(rp_unproven_proven_mask(), ((1u << RP_UNPROVEN_COUNT) - 1) & ~waiting);
    ck_assert_uint_eq(rp_unproven_mask(), ((1u << RP_UNPROVEN_COUNT) - 1) & ~waiting);
    setenv("RP_ALLOW_UNPROVEN_CUDA", "cudnn-documents", 1);
    ck_assert(rp_unproven_allowed(RP_UNPROVEN_CUDNN_DOCUMENTS));
    ck_assert(rp_unproven_allowed(RP_UNPROVEN_CUDNN)); /* "cudnn-documents" is its own word */
    ck_assert_uint_eq(rp_unproven_mask(), (1u << RP_UNPROVEN_COUNT) - 1);
    unsetenv("RP_ALLOW_UNPROVEN_CUDA");
    ck_assert_ptr_null(rp_unproven_proven(RP_UNPROVEN_COUNT));
    setenv("RP_DISABLE_CUDA_PATHS", "cudnn, bf16-mlp", 1);
    ck_assert(rp_unproven_allowed(RP_UNPROVEN_GPT_OSS));
    ck_assert(!rp_unproven_allowed(RP_UNPROVEN_CUDNN));
    ck_assert(!rp_unproven_allowed(RP_UNPROVEN_BF16_MLP));
    setenv("RP_ALLOW_UNPROVEN_CUDA", "cudnn", 1);
    ck_assert(!rp_unproven_allowed(RP_UNPROVEN_CUDNN));
    setenv("RP_DISABLE_CUDA_PATHS", "1", 1);
    ck_assert_uint_eq(rp_unproven_mask(), 0);
    setenv("RP_DISABLE_CUDA_PATHS", "cudnn,nope", 1); /* a bad switch allows nothing */
    ck_assert_uint_eq(rp_unproven_mask(), 0);
    ck_assert_int_eq(rp_unproven_check(&err), RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "RP_DISABLE_CUDA_PATHS: 'nope' is not a CUDA path that can be "
                                  "turned off") != NULL, "%s", err.msg);
    unsetenv("RP_DISABLE_CUDA_PATHS");
    setenv("RP_ALLOW_UNPROVEN_CUDA", "gpt-oss,nope", 1);
    ck_assert(!rp_unproven_allowed(RP_UNPROVEN_GPT_OSS)); /* a bad switch allows nothing */
    ck_assert_int_eq(rp_unproven_check(&err), RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "'nope'") != NULL, "%s", err.msg);
    unsetenv("RP_ALLOW_UNPROVEN_CUDA");
    ck_assert_int_eq(rp_unproven_check(&err), RP_OK);
}
END_TEST

/* The start-up line's list of the paths a switch allows. */
START_TEST(unproven_paths_listed)
{
    char buf[256];
    ck_assert_uint_eq(rp_unproven_list(0, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "");
    unsigned m = 1u << RP_UNPROVEN_BF16_MLP | 1u << RP_UNPROVEN_DOCUMENTS | 1u << RP_UNPROVEN_COPIES;
    ck_assert_uint_eq(rp_unproven_list(m, buf, sizeof buf), strlen("documents, copies, bf16-mlp"));
    ck_assert_str_eq(buf, "documents, copies, bf16-mlp");
    /* too small: the whole names that fit, and the length the list needs */
    ck_assert_uint_eq(rp_unproven_list(m, buf, 18), strlen("documents, copies, bf16-mlp"));
    ck_assert_str_eq(buf, "documents, copies");
    ck_assert_uint_eq(rp_unproven_list(m, buf, 9), strlen("documents, copies, bf16-mlp"));
    ck_assert_str_eq(buf, "");
    /* every path, in the table's order: what "1" allows */
    size_t need = rp_unproven_list((1u << RP_UNPROVEN_COUNT) - 1, buf, sizeof buf);
    ck_assert_uint_eq(need, strlen(buf));
    const char *at = buf;
    for (int p = 0; p < RP_UNPROVEN_COUNT; p++) {
        const char *name = rp_unproven_name((rp_unproven)p);
        ck_assert_msg(strncmp(at, name, strlen(name)) == 0, "%s: %s not at '%s'", buf, name, at);
        at += strlen(name);
        at += *at ? 2 : 0;
    }
    ck_assert_str_eq(at, "");
}
END_TEST

static Suite *choice_suite(void)
{
    Suite *s = suite_create("attention_choice");
    TCase *tc = tcase_create("choice");
    tcase_add_checked_fixture(tc, NULL, rp_test_tmpdir_clean);
    tcase_add_test(tc, missing_library_reported_by_its_path);
    tcase_add_test(tc, a_file_that_is_not_cudnn_refused);
    tcase_add_test(tc, toolkit_cudnn_opens);
    tcase_add_test(tc, choice_by_mode_and_gpu);
    tcase_add_test(tc, shapes_cudnn_does_not_take);
    tcase_add_test(tc, what_a_run_reserves_for_cudnn);
    tcase_add_test(tc, a_documents_run_reserves_nothing);
    tcase_add_test(tc, documents_as_ragged_batch_entries);
    tcase_add_test(tc, unproven_switch_parsed);
    tcase_add_test(tc, unproven_paths_listed);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(choice_suite, "serial")
