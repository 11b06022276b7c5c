/* Small text files read whole (config.json, an index, a prompts file), and
 * the nesting check run before a JSON parser sees untrusted text.
 * Library-private: not installed. */
#ifndef GGUF_UTIL_SMALL_FILE_H
#define GGUF_UTIL_SMALL_FILE_H

#include <stddef.h>

#include "gguf/error.h"

/* Read a small JSON file (config.json, an index) whole, at most
 * max_bytes bytes; *out is malloc'd. GGUF_E_NOT_FOUND if absent. */
int gguf_read_small_file(const char *path, size_t max_bytes, char **out, size_t *len,
                         gguf_error *err);
/* Nesting depth of JSON text (brackets outside strings); stops past limit. */
int gguf_json_depth(const char *s, size_t n, int limit);

#endif
