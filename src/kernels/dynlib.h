/* A vendor library found at run time (dlopen), never linked: the search
 * and the messages shared by cuDNN's loader (cudnn_loader.h) and cuBLAS's
 * (cuda/cublas_api.h). Plain C with no vendor header, built everywhere.
 *
 * Where it looks: the path in the spec's environment variable when that is
 * set and not empty (and only there: a path given is honoured or reported,
 * never silently replaced); else the soname through the dynamic loader's
 * search (LD_LIBRARY_PATH, the runpath, ld.so.cache), then, when the spec
 * names one, the soname in the directory configure found the library in. */
#ifndef RP_KERNELS_DYNLIB_H
#define RP_KERNELS_DYNLIB_H

#include <stddef.h>

typedef struct rp_dynlib_spec {
    const char *what;              /* for messages: "cuDNN", "cuBLAS" */
    const char *env;               /* the variable that names the library's path */
    const char *soname;            /* "libcudnn.so.9" */
    const char *fallback_dir;      /* tried after the soname's search (NULL: none) */
    const char *example;           /* where such a library may lie, for the message */
    const char *const *symbols;    /* resolved, every one */
    int nsymbols;
} rp_dynlib_spec;

/* Opens the library (the search above, RTLD_NOW | RTLD_LOCAL) and resolves
 * every symbol into symbols[0 .. nsymbols - 1]: 0 with *handle, the
 * symbols and `path` (what was opened, path_len bytes) filled, or -1 with
 * nothing open and `why` (why_len bytes) saying what is missing: the path
 * and the loader's message, or a missing symbol. */
int rp_dynlib_open(const rp_dynlib_spec *spec, void **handle, void **symbols, char *path,
                   size_t path_len, char *why, size_t why_len);

/* The file holding `symbol` as the loader mapped it (dladdr: the whole
 * path behind a soname the search found), into path (len bytes); "" when
 * the loader cannot say. */
void rp_dynlib_file_of(const void *symbol, char *path, size_t len);

#endif
