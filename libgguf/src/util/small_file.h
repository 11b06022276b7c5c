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

#endif
