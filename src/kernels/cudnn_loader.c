/* cuDNN found at run time (cudnn_loader.h). */
#include "kernels/cudnn_loader.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const rp_cudnn_symbol_names[RP_CUDNN_SYMBOLS] = {
    "cudnnGetVersion",
    "cudnnGetErrorString",
    "cudnnCreate",
    "cudnnDestroy",
    "cudnnSetStream",
    "cudnnBackendCreateDescriptor",
    "cudnnBackendDestroyDescriptor",
    "cudnnBackendSetAttribute",
    "cudnnBackendGetAttribute",
    "cudnnBackendFinalize",
    "cudnnBackendExecute",
};

#define SONAME "libcudnn.so.9"

int rp_cudnn_library_open(rp_cudnn_library *lib, char *why, size_t why_len)
{
    memset(lib, 0, sizeof *lib);
    const char *env = getenv("RP_CUDNN_LIBRARY");
    int from_env = env && env[0];
    const char *path = from_env ? env : SONAME;
    if (strlen(path) >= sizeof lib->path) {
        snprintf(why, why_len, "RP_CUDNN_LIBRARY: the path is longer than %zu bytes",
                 sizeof lib->path - 1);
        return -1;
    }
    dlerror();
    /* RTLD_LOCAL: cuDNN's symbols stay out of the global namespace (the
     * caller's own libraries never bind to them by accident) */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        if (from_env)
            snprintf(why, why_len, "RP_CUDNN_LIBRARY=%s cannot be loaded: %s", path,
                     e ? e : "dlopen failed");
        else
            snprintf(why, why_len,
                     "%s not found (%s); set RP_CUDNN_LIBRARY to its path, e.g. "
                     "site-packages/nvidia/cudnn/lib/libcudnn.so.9",
                     SONAME, e ? e : "dlopen failed");
        return -1;
    }
    for (int i = 0; i < RP_CUDNN_SYMBOLS; i++) {
        dlerror();
        lib->symbols[i] = dlsym(h, rp_cudnn_symbol_names[i]);
        if (!lib->symbols[i]) {
            snprintf(why, why_len, "%s has no symbol %s: not the cuDNN %d backend API", path,
                     rp_cudnn_symbol_names[i], RP_CUDNN_MAJOR_WANTED);
            dlclose(h);
            memset(lib, 0, sizeof *lib);
            return -1;
        }
    }
    size_t (*get_version)(void) = (size_t(*)(void))lib->symbols[RP_CUDNN_GET_VERSION];
    size_t v = get_version();
    if (v / 10000 != RP_CUDNN_MAJOR_WANTED) {
        snprintf(why, why_len, "%s is cuDNN %zu.%zu.%zu; roundpipe needs %d.x", path, v / 10000,
                 v / 100 % 100, v % 100, RP_CUDNN_MAJOR_WANTED);
        dlclose(h);
        memset(lib, 0, sizeof *lib);
        return -1;
    }
    lib->handle = h;
    lib->version = v;
    memcpy(lib->path, path, strlen(path) + 1);
    return 0;
}

void rp_cudnn_library_close(rp_cudnn_library *lib)
{
    if (lib && lib->handle)
        dlclose(lib->handle);
    if (lib)
        memset(lib, 0, sizeof *lib);
}
