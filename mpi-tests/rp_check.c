#include "rp_check.h"

#include <ftw.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

long rp_test_status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t len = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, len) == 0 && line[len] == ':')
            v = strtol(line + len + 1, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

long rp_test_peak_reset(void)
{
    FILE *clear = fopen("/proc/self/clear_refs", "w");
    if (clear) {
        fputs("5", clear);
        fclose(clear);
    }
    const long rss = rp_test_status_kb("VmRSS"), peak = rp_test_status_kb("VmHWM");
    ck_assert_msg(rss > 0 && peak > 0, "no VmRSS or VmHWM in /proc/self/status");
    ck_assert_msg(peak - rss < 1024, "the peak so far (%ld kB) is not what is resident (%ld kB): "
                  "a later growth cannot be told", peak, rss);
    return rss;
}

const char *rp_test_srcdir(void)
{
    const char *s = getenv("srcdir");
    return (s && *s) ? s : ".";
}

const char *rp_test_tmpdir(void)
{
    static char dir[256];
    if (!dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/rp-test-XXXXXX", (base && *base) ? base : "/tmp");
        if (!mkdtemp(dir))
            return NULL;
    }
    return dir;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag;
    return ftw->level == 0 ? 0 : remove(path);
}

/* Whether tests run in forked children (set by rp_check_main). */
static int tests_fork = 1;

void rp_test_tmpdir_clean(void)
{
    nftw(rp_test_tmpdir(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (tests_fork)
        rmdir(rp_test_tmpdir()); /* this child's directory is done */
}

int rp_check_main(int argc, char **argv, Suite *(*make_suite)(void), const char *ranks)
{
    if (argc > 1 && strcmp(argv[1], "--rp-test-ranks") == 0) {
        printf("%s\n", ranks);
        return 0;
    }
    int mpi = strcmp(ranks, "serial") != 0, rank = 0;
    if (mpi) { /* as the roundpipe command: several nodes need it (engine/nodes.h) */
        int provided;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    }
    SRunner *sr = srunner_create(make_suite());
    if (mpi)
        srunner_set_fork_status(sr, CK_NOFORK);
    tests_fork = srunner_fork_status(sr) == CK_FORK;
    srunner_run_all(sr, rank == 0 ? CK_NORMAL : CK_SILENT);
    int run = srunner_ntests_run(sr), failed = srunner_ntests_failed(sr);
    if (rank != 0 && failed > 0) { /* ranks other than 0 run silently: show why */
        TestResult **res = srunner_failures(sr);
        for (int i = 0; i < failed; i++)
            fprintf(stderr, "[rank %d] %s:%d: %s: %s\n", rank, tr_lfile(res[i]), tr_lno(res[i]),
                    tr_tcname(res[i]), tr_msg(res[i]));
        free(res);
    }
    srunner_free(sr);
    if (mpi) {
        int global[1];
        MPI_Allreduce(&failed, &global[0], 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (global[0] > 0 && failed == 0 && rank == 0)
            fprintf(stderr, "another rank reported failures\n");
        if (failed > 0 && rank != 0)
            fprintf(stderr, "[rank %d] %d of %d checks failed\n", rank, failed, run);
        failed = global[0];
        MPI_Finalize();
    }
    if (rank == 0)
        printf("RP-CHECK: passed=%d failed=%d\n", run - failed, failed);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
