/* Proves, for the file set that saves a model (io/file_set.h):
 * - a commit replaces every member and removes the files named for removal
 *   (old shards) and stale temporary files of the members, leaving exactly
 *   the new set;
 * - a write that fails on any member (the RP_FAULT_SAVE_FILE hook, each
 *   member in turn) leaves the previous set byte for byte and no temporary
 *   file; so does an interrupt (rp_interrupt) and an explicit abort;
 * - a directory begin created is removed again on abort; begin on a path
 *   that is a file, or under a missing parent, fails naming the path. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/file_set.h"
#include "rp_check.h"

/* dir/name in one of 4 rotating buffers (dir must not be one of them) */
static char *path_in(const char *dir, const char *name)
{
    static char buf[4][600];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 600, "%s/%s", dir, name);
    return p;
}

/* a directory's path in its own buffer */
static const char *dir_named(const char *name)
{
    static char buf[2][600];
    static int k;
    char *p = buf[k++ % 2];
    snprintf(p, 600, "%s/%s", rp_test_tmpdir(), name);
    return p;
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void assert_text(const char *path, const char *want)
{
    char got[256] = "";
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s is missing", path);
    size_t n = fread(got, 1, sizeof got - 1, f);
    got[n] = '\0';
    fclose(f);
    ck_assert_str_eq(got, want);
}

/* The directory's entries, sorted, joined by spaces. */
static const char *listing(const char *dir)
{
    static char out[1024];
    char names[32][256];
    int n = 0;
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *de;
    while ((de = readdir(d)) && n < 32)
        if (de->d_name[0] != '.')
            snprintf(names[n++], 256, "%s", de->d_name);
    closedir(d);
    qsort(names, (size_t)n, 256, (int (*)(const void *, const void *))strcmp);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        strcat(out, i ? " " : "");
        strcat(out, names[i]);
    }
    return out;
}

/* Save the two-file set {weights, config} with the given texts. */
static rp_status save(const char *dir, const char *weights, const char *config, rp_error *err)
{
    rp_file_set *fs = NULL;
    rp_atomic_file **af = NULL;
    rp_status s = rp_file_set_begin(dir, &fs, err);
    if (s == RP_OK)
        s = rp_file_set_remove_after(fs, "model-00001-of-00002.safetensors", err);
    if (s == RP_OK)
        s = rp_file_set_remove_after(fs, "model.safetensors.index.json", err);
    if (s == RP_OK)
        s = rp_file_set_add(fs, "weights", &af, err);
    if (s == RP_OK)
        s = rp_atomic_file_write(af, weights, strlen(weights), err);
    if (s == RP_OK)
        s = rp_file_set_add(fs, "config", &af, err);
    if (s == RP_OK)
        s = rp_atomic_file_write(af, config, strlen(config), err);
    if (s == RP_OK)
        s = rp_file_set_commit(&fs, err);
    rp_file_set_abort(&fs);
    return s;
}

START_TEST(commit_replaces_the_set)
{
    const char *dir = dir_named("model");
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    put(path_in(dir, "weights"), "old weights");
    put(path_in(dir, "config"), "old config");
    put(path_in(dir, "model-00001-of-00002.safetensors"), "shard");
    put(path_in(dir, "model.safetensors.index.json"), "{}");
    put(path_in(dir, "weights.tmp-0a1b2c"), "left by a killed save");
    put(path_in(dir, "tokenizer.json"), "not ours");
    rp_error err = {0};
    ck_assert_int_eq(save(dir, "new weights", "new config", &err), RP_OK);
    assert_text(path_in(dir, "weights"), "new weights");
    assert_text(path_in(dir, "config"), "new config");
    ck_assert_str_eq(listing(dir), "config tokenizer.json weights");
}
END_TEST

START_TEST(a_failed_member_leaves_the_old_set)
{
    const char *dir = dir_named("model");
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    put(path_in(dir, "weights"), "old weights");
    put(path_in(dir, "config"), "old config");
    put(path_in(dir, "model.safetensors.index.json"), "{}");
    rp_error err = {0};
    for (int member = 1; member <= 2; member++) {
        char n[8];
        snprintf(n, sizeof n, "%d", member);
        setenv("RP_FAULT_SAVE_FILE", n, 1);
        ck_assert_int_eq(save(dir, "new weights", "new config", &err), RP_ERR_IO);
        ck_assert_msg(strstr(err.msg, member == 1 ? "weights" : "config") &&
                          strstr(err.msg, "RP_FAULT_SAVE_FILE"),
                      "message '%s'", err.msg);
        assert_text(path_in(dir, "weights"), "old weights");
        assert_text(path_in(dir, "config"), "old config");
        ck_assert_str_eq(listing(dir), "config model.safetensors.index.json weights");
    }
    unsetenv("RP_FAULT_SAVE_FILE");
    /* a new directory is removed again */
    const char *fresh = dir_named("fresh");
    setenv("RP_FAULT_SAVE_FILE", "2", 1);
    ck_assert_int_eq(save(fresh, "w", "c", &err), RP_ERR_IO);
    ck_assert_int_eq(access(fresh, F_OK), -1);
    unsetenv("RP_FAULT_SAVE_FILE");
}
END_TEST

START_TEST(an_interrupt_leaves_the_old_set)
{
    const char *dir = dir_named("model");
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    put(path_in(dir, "weights"), "old weights");
    put(path_in(dir, "config"), "old config");
    rp_interrupt(15); /* this test runs in its own forked process */
    rp_error err = {0};
    ck_assert_int_eq(save(dir, "new weights", "new config", &err), RP_ERR_INTERRUPTED);
    assert_text(path_in(dir, "weights"), "old weights");
    ck_assert_str_eq(listing(dir), "config weights");
}
END_TEST

START_TEST(begin_refuses_what_cannot_be_a_directory)
{
    const char *file = dir_named("a-file");
    put(file, "x");
    rp_file_set *fs = NULL;
    rp_error err = {0};
    ck_assert_int_eq(rp_file_set_begin(file, &fs, &err), RP_ERR_IO);
    ck_assert_msg(strstr(err.msg, file) && strstr(err.msg, "Not a directory"), "%s", err.msg);
    const char *orphan = dir_named("no/such/dir");
    ck_assert_int_eq(rp_file_set_begin(orphan, &fs, &err), RP_ERR_IO);
    ck_assert_msg(strstr(err.msg, orphan) != NULL, "%s", err.msg);
    ck_assert_ptr_null(fs);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("io_file_set");
    TCase *tc = tcase_create("all");
    tcase_add_test(tc, commit_replaces_the_set);
    tcase_add_test(tc, a_failed_member_leaves_the_old_set);
    tcase_add_test(tc, an_interrupt_leaves_the_old_set);
    tcase_add_test(tc, begin_refuses_what_cannot_be_a_directory);
    tcase_add_checked_fixture(tc, NULL, rp_test_tmpdir_clean);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(suite, "serial")
