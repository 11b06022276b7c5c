/* ref-forward: building JSON documents with one out-of-memory check (refwd_json.h). */
#include "refwd_json.h"

json_t *refwd_json_put(json_t *o, const char *key, json_t *v)
{
    /* jansson frees v when it cannot take it, o == NULL included */
    if (json_object_set_new(o, key, v) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *refwd_json_push(json_t *a, json_t *v)
{
    if (json_array_append_new(a, v) != 0) {
        json_decref(a);
        return NULL;
    }
    return a;
}

json_t *refwd_json_ids(const int32_t *ids, int64_t n)
{
    json_t *a = json_array();
    for (int64_t i = 0; a && i < n; i++)
        a = refwd_json_push(a, json_integer(ids[i]));
    return a;
}
