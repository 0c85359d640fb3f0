/* cuDNN found at run time (cudnn_loader.h). */
#include "kernels/cudnn_loader.h"
#include "kernels/dynlib.h"

#include <dlfcn.h>
#include <stdio.h>
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
    "cudnnGetLastErrorString",
};

static const rp_dynlib_spec spec = {
    .what = "cuDNN 9 backend API",
    .env = "RP_CUDNN_LIBRARY",
    .soname = "libcudnn.so.9",
    .example = "site-packages/nvidia/cudnn/lib/libcudnn.so.9",
    .symbols = rp_cudnn_symbol_names,
    .nsymbols = RP_CUDNN_REQUIRED,
};

int rp_cudnn_library_open(rp_cudnn_library *lib, char *why, size_t why_len)
{
    memset(lib, 0, sizeof *lib);
    void *h;
    if (rp_dynlib_open(&spec, &h, lib->symbols, lib->path, sizeof lib->path, why, why_len) != 0)
        return -1;
    size_t (*get_version)(void) = (size_t(*)(void))lib->symbols[RP_CUDNN_GET_VERSION];
    size_t v = get_version();
    if (v / 10000 != RP_CUDNN_MAJOR_WANTED) {
        snprintf(why, why_len, "%s is cuDNN %zu.%zu.%zu; roundpipe needs %d.x", lib->path,
                 v / 10000, v / 100 % 100, v % 100, RP_CUDNN_MAJOR_WANTED);
        dlclose(h);
        memset(lib, 0, sizeof *lib);
        return -1;
    }
    for (int i = RP_CUDNN_REQUIRED; i < RP_CUDNN_SYMBOLS; i++)
        lib->symbols[i] = dlsym(h, rp_cudnn_symbol_names[i]);
    lib->handle = h;
    lib->version = v;
    return 0;
}

void rp_cudnn_library_close(rp_cudnn_library *lib)
{
    if (lib && lib->handle)
        dlclose(lib->handle);
    if (lib)
        memset(lib, 0, sizeof *lib);
}
