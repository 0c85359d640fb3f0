#include "io/json_util.h"

#include <string.h>

rp_status rp_json_parse(const char *text, size_t len, const char *name, json_object **out,
                        rp_error *err)
{
    *out = NULL;
    if (len == 0)
        return rp_error_set(err, RP_ERR_FORMAT, "%s: empty file, expected JSON", name);
    if (len > (size_t)1 << 30)
        return rp_error_set(err, RP_ERR_FORMAT, "%s: JSON text too large", name);
    /* json-c stops at a NUL byte; a NUL inside the text is malformed input. */
    if (memchr(text, '\0', len))
        return rp_error_set(err, RP_ERR_FORMAT, "%s: not valid JSON: NUL byte at offset %zu", name,
                            (size_t)((const char *)memchr(text, '\0', len) - text));
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", name);
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS);
    json_object *v = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error je = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (!v || je != json_tokener_success) {
        json_object_put(v);
        if (je == json_tokener_continue)
            return rp_error_set(err, RP_ERR_FORMAT, "%s: not valid JSON: unexpected end of text",
                                name);
        return rp_error_set(err, RP_ERR_FORMAT, "%s: not valid JSON: %s at offset %zu", name,
                            json_tokener_error_desc(je), end);
    }
    for (size_t i = end; i < len; i++) {
        char c = text[i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            json_object_put(v);
            return rp_error_set(err, RP_ERR_FORMAT,
                                "%s: not valid JSON: trailing characters at offset %zu", name, i);
        }
    }
    *out = v;
    return RP_OK;
}

const char *rp_json_type_name(const json_object *v)
{
    switch (json_object_get_type(v)) {
    case json_type_null: return "null";
    case json_type_boolean: return "boolean";
    case json_type_double: return "number";
    case json_type_int: return "integer";
    case json_type_object: return "object";
    case json_type_array: return "array";
    case json_type_string: return "string";
    }
    return "unknown";
}
