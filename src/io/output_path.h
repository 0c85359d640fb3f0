/* Checking, before any work, that a run's outputs can be written, so that a
 * bad --save, --log or --trace fails at start-up instead of after training.
 * Nothing is created: a probe file is made and removed at once. Messages
 * name the option, the path and the reason. */
#ifndef RP_IO_OUTPUT_PATH_H
#define RP_IO_OUTPUT_PATH_H

#include "core/error.h"

/* dir exists as a writable directory, or its parent does (it will be
 * created then). */
rp_status rp_output_dir_check(const char *option, const char *dir, rp_error *err);

/* path is not a directory; an existing file is writable; for a new path or
 * a regular file (written by rename) the parent directory is writable. */
rp_status rp_output_file_check(const char *option, const char *path, rp_error *err);

#endif
