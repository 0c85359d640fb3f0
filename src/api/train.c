/* The public training API (include/roundpipe.h) over the engine. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "engine/trainer.h"
#include "roundpipe.h"

struct rp_train_config {
    rp_train_options o;
    char **strings; /* copies of the values the options point to */
    size_t nstrings;
    rp_error err;
};

rp_status rp_train_config_create(rp_train_config **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return RP_ERR_NOMEM;
    rp_train_options_default(&(*out)->o);
    return RP_OK;
}

void rp_train_config_destroy(rp_train_config **config)
{
    rp_train_config *c = config ? *config : NULL;
    if (!c)
        return;
    for (size_t i = 0; i < c->nstrings; i++)
        free(c->strings[i]);
    free(c->strings);
    free(c);
    *config = NULL;
}

rp_status rp_train_config_set(rp_train_config *c, const char *option, const char *value)
{
    if (!c || !option || !value)
        return RP_ERR_INVALID_ARG;
    char **grown = realloc(c->strings, (c->nstrings + 1) * sizeof *grown);
    char *copy = strdup(value);
    if (grown)
        c->strings = grown;
    if (!grown || !copy) {
        free(copy);
        return rp_error_set(&c->err, RP_ERR_NOMEM, "copying the value of '%s'", option);
    }
    c->strings[c->nstrings++] = copy;
    return rp_train_options_set(&c->o, option, copy, &c->err);
}

const char *rp_train_config_error(const rp_train_config *c)
{
    return c ? c->err.msg : "";
}

rp_status rp_train_config_set_step_callback(rp_train_config *c, rp_step_callback callback,
                                            void *arg)
{
    if (!c)
        return RP_ERR_INVALID_ARG;
    c->o.on_step = callback;
    c->o.on_step_arg = arg;
    return RP_OK;
}

rp_status rp_train(rp_train_config *c, MPI_Comm comm)
{
    if (!c)
        return RP_ERR_INVALID_ARG;
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    rp_logger lg = {.stream = c->o.progress == RP_PROGRESS_NONE ? NULL : stderr,
                    .level = RP_LOG_INFO, .rank = rank};
    rp_error_clear(&c->err);
    return rp_train_run(&c->o, comm, &lg, &c->err);
}
