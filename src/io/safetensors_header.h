/* The JSON header of a safetensors file, parsed and validated (internal to
 * src/io). A hand-written parser rather than json-c because json-c silently
 * keeps the last of two equal keys, and a duplicate tensor name must be an
 * error; it also lets every message name the header byte offset. */
#ifndef RP_IO_SAFETENSORS_HEADER_H
#define RP_IO_SAFETENSORS_HEADER_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"

#define RP_ST_MAX_DIMS 8
/* Larger headers are refused before parsing (the reference implementation
 * uses the same bound). */
#define RP_ST_MAX_HEADER ((uint64_t)100 << 20)

typedef struct rp_st_entry {
    char *name;
    int dtype;  /* index into the dtype table, see rp_st_dtype_* */
    int ndim;
    int64_t shape[RP_ST_MAX_DIMS];
    uint64_t begin, end; /* byte offsets relative to the data section */
} rp_st_entry;

typedef struct rp_st_header {
    rp_st_entry *entries; /* sorted by name, names unique */
    size_t n;
    char **meta_keys, **meta_vals; /* __metadata__, in file order */
    size_t nmeta;
} rp_st_header;

/* Parse len bytes of header JSON. data_len is the size of the byte buffer
 * that follows the header; every tensor must lie inside it and no two may
 * overlap. file names the file in messages. On failure h is left empty. */
rp_status rp_st_header_parse(const char *json, size_t len, uint64_t data_len, const char *file,
                             rp_st_header *h, rp_error *err);
void rp_st_header_free(rp_st_header *h);

/* Index of entry name, or -1. */
ptrdiff_t rp_st_header_find(const rp_st_header *h, const char *name);

/* Dtype table: safetensors spelling, element size, and whether roundpipe
 * computes with it (F32, BF16, F16 map to an rp_dtype). */
const char *rp_st_dtype_name(int dtype);
size_t rp_st_dtype_size(int dtype);
int rp_st_dtype_to_rp(int dtype, rp_dtype *out); /* 1 if supported */

#endif
