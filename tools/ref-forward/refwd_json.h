/*
 * ref-forward's JSON documents are jansson values, printed by the tools' one
 * writer (cli_json_print_report, tools/common/cli_json.c). Out of memory is
 * checked once, at the end: a put or push that fails frees the container and
 * gives NULL, a later one on NULL frees its value, and the writer refuses a
 * NULL document (the subcommand then exits 3). So a document is built as
 *
 *     o = refwd_json_put(o, "n_over", json_integer(n));
 *     o = refwd_json_put(o, "entries", entries);
 *     if (cli_json_print_report(out, tool, o) != 0) ...
 */
#ifndef REFWD_JSON_H
#define REFWD_JSON_H

#include <stdint.h>

#include <jansson.h>

/* o[key] = v, taking v. @return o, or NULL (o and v freed) when either is NULL
 * or the set fails. */
json_t *refwd_json_put(json_t *o, const char *key, json_t *v);
/* Append v to the array a, taking v. @return as refwd_json_put. */
json_t *refwd_json_push(json_t *a, json_t *v);
/* Token ids as an array of integers; NULL out of memory. */
json_t *refwd_json_ids(const int32_t *ids, int64_t n);

#endif
