/* json-c helpers shared by the JSON readers in src/io: strict whole-text
 * parsing and the names of JSON types for messages. */
#ifndef RP_IO_JSON_UTIL_H
#define RP_IO_JSON_UTIL_H

#include <json-c/json.h>
#include <stddef.h>

#include "core/error.h"

/* Parse exactly one JSON value filling text[0, len) (whitespace around it
 * allowed). Errors are RP_ERR_FORMAT naming name and the byte offset. */
rp_status rp_json_parse(const char *text, size_t len, const char *name, json_object **out,
                        rp_error *err);

/* "object", "array", "string", "integer", "number", "boolean", "null". */
const char *rp_json_type_name(const json_object *v);

#endif
