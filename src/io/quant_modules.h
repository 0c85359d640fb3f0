/* Which modules a quantised checkpoint quantised: transformers reads
 * quantization_config.modules_to_not_convert as a list of patterns and
 * keeps every module a pattern matches in full precision. */
#ifndef RP_IO_QUANT_MODULES_H
#define RP_IO_QUANT_MODULES_H

#include <stddef.h>

/* 1 when a pattern is one rp_quant_module_converted understands: literal
 * characters, "." (any character) and "x*" (any run of x, "." included),
 * as Python's re reads them; else 0 (another regular-expression operator:
 * \ [ ] ( ) { } + ? ^ $ | or a leading "*"). */
int rp_quant_pattern_supported(const char *pattern);

/* Whether module `name` (e.g. "model.layers.3.mlp.experts") is quantised
 * under the n patterns, as transformers' should_convert_module decides:
 * not when a pattern, read as a regular expression, matches from the start
 * of the name up to a module boundary (the end, or a '.' just before or
 * just after), or when the name ends with the pattern's text. Every
 * pattern must be supported (rp_quant_pattern_supported); an unsupported
 * one matches nothing. */
int rp_quant_module_converted(const char *name, const char *const *patterns, size_t n);

/* Whether supported pattern p may keep (match) some module named `head`,
 * then any characters, then `tail` (e.g. "model.layers.3.mlp.experts.",
 * an expert's number, ".gate_proj"): 0 only when it certainly matches
 * none, so that a caller matching many such names tries only the patterns
 * that may (a pattern without '*' is compared with head and tail as
 * literal text; one with '*' may always match). */
int rp_quant_pattern_may_match(const char *p, const char *head, const char *tail);

#endif
