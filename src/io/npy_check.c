/* Validating token and loss-mask arrays before training reads them: a bad
 * token id would index outside the embedding table. */
#include "io/npy.h"

rp_status rp_npy_check_tokens(const rp_npy *np, int64_t vocab_size, rp_error *err)
{
    rp_npy_dtype t = rp_npy_get_dtype(np);
    if (t == RP_NPY_BOOL)
        return rp_error_set(err, RP_ERR_MISMATCH,
                            "%s: field 'descr': token ids must be integers, got '%s'",
                            rp_npy_path(np), rp_npy_dtype_descr(t));
    int64_t n = rp_npy_length(np);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = rp_npy_get(np, i);
        if (v < 0 || v >= vocab_size)
            return rp_error_set(err, RP_ERR_RANGE,
                                "%s: token at index %lld is %lld, outside [0, %lld) (vocab_size)",
                                rp_npy_path(np), (long long)i, (long long)v,
                                (long long)vocab_size);
    }
    return RP_OK;
}

rp_status rp_npy_check_mask(const rp_npy *mask, const rp_npy *tokens, rp_error *err)
{
    rp_npy_dtype t = rp_npy_get_dtype(mask);
    if (t != RP_NPY_U8 && t != RP_NPY_BOOL)
        return rp_error_set(err, RP_ERR_MISMATCH,
                            "%s: field 'descr': loss mask must be '|u1' or '|b1', got '%s'",
                            rp_npy_path(mask), rp_npy_dtype_descr(t));
    if (rp_npy_length(mask) != rp_npy_length(tokens))
        return rp_error_set(err, RP_ERR_MISMATCH,
                            "%s: loss mask has %lld elements but tokens %s have %lld",
                            rp_npy_path(mask), (long long)rp_npy_length(mask),
                            rp_npy_path(tokens), (long long)rp_npy_length(tokens));
    int64_t n = rp_npy_length(mask);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = rp_npy_get(mask, i);
        if (v != 0 && v != 1)
            return rp_error_set(err, RP_ERR_RANGE,
                                "%s: loss mask at index %lld is %lld, expected 0 or 1",
                                rp_npy_path(mask), (long long)i, (long long)v);
    }
    return RP_OK;
}

rp_status rp_npy_open_mask(const char *mask_path, const rp_npy *tokens, rp_npy **out,
                           rp_error *err)
{
    RP_TRY(rp_npy_open(mask_path, out, err));
    rp_status s = rp_npy_check_mask(*out, tokens, err);
    if (s != RP_OK)
        rp_npy_close(out);
    return s;
}
