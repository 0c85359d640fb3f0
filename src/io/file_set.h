/* A set of files in one directory that replaces the previous set all or
 * nothing (a saved model: weights + config.json; later a checkpoint):
 *   begin   - the directory is created if missing;
 *   add     - each member is written under a temporary name beside its
 *             final one (io/atomic_file.h);
 *   commit  - every member is fsync'd, then all are renamed into place one
 *             after the other, the files named by rp_file_set_remove_after
 *             (a previous set's extra files) and stale temporary files of
 *             the members are removed, and the directory is fsync'd;
 *   abort   - the temporary files are removed (and the directory, if begin
 *             created it), leaving the previous set untouched.
 * Until commit starts renaming, the directory holds the old set intact; a
 * failure in any member's write or sync aborts without touching it.
 * Test hook: RP_FAULT_SAVE_FILE=N in the environment makes the first write
 * of the N-th member (counting from 1) fail as on a full disk. */
#ifndef RP_IO_FILE_SET_H
#define RP_IO_FILE_SET_H

#include "core/error.h"
#include "io/atomic_file.h"

typedef struct rp_file_set rp_file_set;

rp_status rp_file_set_begin(const char *dir, rp_file_set **out, rp_error *err);

/* Start member `name` (a plain file name in the set's directory). *out
 * points into the set: write with rp_atomic_file_write(*out, ...); when a
 * write fails, *out becomes NULL and the set must be aborted. */
rp_status rp_file_set_add(rp_file_set *fs, const char *name, rp_atomic_file ***out,
                          rp_error *err);

/* Remove `name` from the directory when the set is committed (after the
 * new members are in place); a missing file is not an error. */
rp_status rp_file_set_remove_after(rp_file_set *fs, const char *name, rp_error *err);

const char *rp_file_set_dir(const rp_file_set *fs);

/* Move the members into place; frees *fs and sets it to NULL either way. */
rp_status rp_file_set_commit(rp_file_set **fs, rp_error *err);

/* Remove the temporary files; frees *fs (no-op on NULL). */
void rp_file_set_abort(rp_file_set **fs);

#endif
