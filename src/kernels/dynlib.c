/* Vendor libraries found at run time (dynlib.h). */
#include "kernels/dynlib.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* dlopen of `path`; NULL with the loader's message in `msg`. RTLD_LOCAL:
 * the library's symbols stay out of the global namespace (the caller's
 * own libraries never bind to them by accident). */
static void *open_one(const char *path, char *msg, size_t msg_len)
{
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(msg, msg_len, "%s", e ? e : "dlopen failed");
    }
    return h;
}

int rp_dynlib_open(const rp_dynlib_spec *spec, void **handle, void **symbols, char *path,
                   size_t path_len, char *why, size_t why_len)
{
    *handle = NULL;
    memset(symbols, 0, sizeof *symbols * (size_t)spec->nsymbols);
    const char *env = getenv(spec->env);
    const int from_env = env && env[0];
    char msg[512] = "";
    const char *tried = from_env ? env : spec->soname;
    if (strlen(tried) >= path_len) {
        snprintf(why, why_len, "%s: the path is longer than %zu bytes", spec->env, path_len - 1);
        return -1;
    }
    void *h = open_one(tried, msg, sizeof msg);
    if (!h && from_env) {
        snprintf(why, why_len, "%s=%s cannot be loaded: %s", spec->env, env, msg);
        return -1;
    }
    char alt[1024] = "";
    if (!h && spec->fallback_dir && spec->fallback_dir[0]) {
        snprintf(alt, sizeof alt, "%s/%s", spec->fallback_dir, spec->soname);
        char msg2[512];
        h = strlen(alt) < path_len ? open_one(alt, msg2, sizeof msg2) : NULL;
        if (h)
            tried = alt;
    }
    if (!h) {
        snprintf(why, why_len, "%s not found (%s)%s%s; set %s to its path, e.g. %s", spec->soname,
                 msg, alt[0] ? ", nor " : "", alt, spec->env, spec->example);
        return -1;
    }
    for (int i = 0; i < spec->nsymbols; i++) {
        dlerror();
        symbols[i] = dlsym(h, spec->symbols[i]);
        if (!symbols[i]) {
            snprintf(why, why_len, "%s has no symbol %s: not the %s this roundpipe was built for",
                     tried, spec->symbols[i], spec->what);
            dlclose(h);
            memset(symbols, 0, sizeof *symbols * (size_t)spec->nsymbols);
            return -1;
        }
    }
    *handle = h;
    memcpy(path, tried, strlen(tried) + 1);
    return 0;
}

void rp_dynlib_file_of(const void *symbol, char *path, size_t len)
{
    Dl_info info;
    if (len == 0)
        return;
    path[0] = '\0';
    if (symbol && dladdr(symbol, &info) && info.dli_fname)
        snprintf(path, len, "%s", info.dli_fname);
}
