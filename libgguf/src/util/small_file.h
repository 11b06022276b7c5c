/* The nesting check run before a JSON parser sees untrusted text (small
 * files are read whole by gguf_read_small_file, gguf/output.h).
 * Library-private: not installed. */
#ifndef GGUF_UTIL_SMALL_FILE_H
#define GGUF_UTIL_SMALL_FILE_H

#include <stddef.h>

#include "gguf/error.h"
#include "gguf/output.h" /* gguf_read_small_file */

/* Nesting depth of JSON text (brackets outside strings); stops past limit. */
int gguf_json_depth(const char *s, size_t n, int limit);

/* The gguf_status of a jansson load error (a json_error_t *): bad UTF-8 or NUL
 * GGUF_E_BAD_UTF8, a duplicate key GGUF_E_DUPLICATE, too deep GGUF_E_LIMIT, out
 * of memory GGUF_E_NOMEM (the environment, not the input), else
 * GGUF_E_BAD_VALUE. */
struct json_error_t;
int gguf_json_error_status(const struct json_error_t *je);

#endif
