/* cuDNN 9, found at run time (dlopen), never linked: a binary built with
 * cuDNN's headers runs where the library is missing, on the own attention
 * kernel. Plain C with no CUDA or cuDNN header, so it is built (and its
 * search tested) everywhere, GPU or not.
 *
 * Where it looks (dynlib.h): the path in the environment variable
 * RP_CUDNN_LIBRARY when that is set and not empty (and only there), else
 * the plain soname libcudnn.so.9 through the dynamic loader's search
 * (LD_LIBRARY_PATH, the runpath, ld.so.cache). On a machine where cuDNN
 * exists only inside PyTorch's wheel, RP_CUDNN_LIBRARY names
 * site-packages/nvidia/cudnn/lib/libcudnn.so.9.
 */
#ifndef RP_KERNELS_CUDNN_LOADER_H
#define RP_KERNELS_CUDNN_LOADER_H

#include <stddef.h>

/* The entry points the attention uses, in the order of
 * rp_cudnn_symbol_names (the cuDNN 9 backend API of cudnn_graph.h): those
 * before RP_CUDNN_REQUIRED must all resolve; those after it are taken where
 * the library has them (NULL else). */
enum {
    RP_CUDNN_GET_VERSION,
    RP_CUDNN_GET_ERROR_STRING,
    RP_CUDNN_CREATE,
    RP_CUDNN_DESTROY,
    RP_CUDNN_SET_STREAM,
    RP_CUDNN_BACKEND_CREATE_DESCRIPTOR,
    RP_CUDNN_BACKEND_DESTROY_DESCRIPTOR,
    RP_CUDNN_BACKEND_SET_ATTRIBUTE,
    RP_CUDNN_BACKEND_GET_ATTRIBUTE,
    RP_CUDNN_BACKEND_FINALIZE,
    RP_CUDNN_BACKEND_EXECUTE,
    RP_CUDNN_REQUIRED,
    /* cuDNN's words for the last error of the calling thread (9.0 and
     * newer): a refusal's message quotes them */
    RP_CUDNN_GET_LAST_ERROR_STRING = RP_CUDNN_REQUIRED,
    RP_CUDNN_SYMBOLS
};

extern const char *const rp_cudnn_symbol_names[RP_CUDNN_SYMBOLS];

/* The library's version is major*10000 + minor*100 + patch (cuDNN 9's
 * cudnnGetVersion); only major 9 is accepted (the backend's attribute
 * numbering is the headers' of major 9). */
#define RP_CUDNN_MAJOR_WANTED 9

typedef struct rp_cudnn_library {
    void *handle;                       /* dlopen's */
    void *symbols[RP_CUDNN_SYMBOLS];    /* cast by the caller to the header's types */
    size_t version;                     /* cudnnGetVersion() */
    char path[512];                     /* what was opened: RP_CUDNN_LIBRARY's or the soname */
} rp_cudnn_library;

/* Opens cuDNN (the search above) and resolves every symbol (the optional
 * ones where present): 0 and *lib filled, or -1 with *lib zeroed and `why`
 * (of why_len bytes) saying what is missing: the path and the loader's
 * message, a missing required symbol, or a version other than 9.x.
 * Nothing is left open on failure. */
int rp_cudnn_library_open(rp_cudnn_library *lib, char *why, size_t why_len);

/* Closes what rp_cudnn_library_open opened (nothing when it failed). */
void rp_cudnn_library_close(rp_cudnn_library *lib);

#endif
