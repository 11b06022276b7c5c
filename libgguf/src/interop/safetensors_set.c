/*
 * A checkpoint: one safetensors file, a folder, or model.safetensors.index.json,
 * with the quantization the folder's config.json / hf_quant_config.json declare.
 *
 *   model.safetensors.index.json
 *     {"metadata": {"total_size": N},
 *      "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors", ...}}
 *   config.json: "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}
 *                                      {"quant_method": "modelopt", "quant_algo": "NVFP4"}
 *                                      {"quant_method": "compressed-tensors",
 *                                       "format": "float-quantized" | "nvfp4-pack-quantized"}
 *   hf_quant_config.json: {"quantization": {"quant_algo": "NVFP4", "group_size": 16}}
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error_lib.h"
#include "interop/safetensors_internal.h"
#include "util/small_file.h"

struct gguf_st_set {
    char *path;
    char *dir;
    gguf_st_file **files;
    uint32_t n_files;
    gguf_st_tensor **by_name;
    int64_t n_tensors;
    gguf_st_quant quant;
};

static const char *scheme_names[GGUF_ST_SCHEME_COUNT] = {
    "none", "fp8-block", "fp8", "nvfp4", "ct-fp8", "ct-nvfp4", "other",
};

const char *gguf_st_scheme_name(gguf_st_scheme s)
{
    return (unsigned)s < GGUF_ST_SCHEME_COUNT ? scheme_names[s] : "unknown";
}

/* Parse small JSON with the same limits as headers. */
static int load_json(const char *path, json_t **out, gguf_error *err)
{
    char *buf;
    size_t len;
    int rc = gguf_read_small_file(path, GGUF_ST_MAX_CONFIG, &buf, &len, err);
    if (rc)
        return rc;
    if (gguf_json_depth(buf, len, GGUF_ST_MAX_DEPTH) > GGUF_ST_MAX_DEPTH) {
        free(buf);
        return gguf_fail(err, GGUF_E_LIMIT, 0, "%s: JSON nested deeper than %d", path,
                         GGUF_ST_MAX_DEPTH);
    }
    json_error_t je;
    *out = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    free(buf);
    if (!*out)
        return gguf_fail(err, gguf_json_error_status(&je), (uint64_t)je.position,
                         "%s: %s (line %d)", path, je.text, je.line);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return gguf_fail(err, GGUF_E_BAD_VALUE, 0, "%s: not a JSON object", path);
    }
    return 0;
}

static char *join(const char *dir, const char *name)
{
    const size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static bool ends_with(const char *s, const char *suffix)
{
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static bool file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int add_file(gguf_st_set *s, const char *path, gguf_error *err)
{
    if (s->n_files >= GGUF_ST_MAX_FILES)
        return gguf_fail(err, GGUF_E_LIMIT, GGUF_NO_OFFSET, "%s: more than %u files", s->path,
                         GGUF_ST_MAX_FILES);
    gguf_st_file **nf = realloc(s->files, sizeof *nf * (s->n_files + 1));
    if (!nf)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    s->files = nf;
    const int rc = gguf_st_file_open(&s->files[s->n_files], path, err);
    if (rc)
        return rc;
    gguf_st_file *f = s->files[s->n_files];
    for (int64_t i = 0; i < f->n_tensors; i++)
        f->tensors[i].file = s->n_files;
    s->n_files++;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The index: open each file once, then check the map against the files. */
static int open_index(gguf_st_set *s, const char *index_path, gguf_error *err)
{
    json_t *root = NULL;
    int rc = load_json(index_path, &root, err);
    if (rc)
        return rc;
    const char **names = NULL;
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        rc = gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET, "%s: weight_map: %s", index_path,
                       wm ? "not a JSON object" : "missing");
        goto done;
    }
    if (json_object_size(wm) > GGUF_ST_MAX_TENSORS) {
        rc = gguf_fail(err, GGUF_E_LIMIT, GGUF_NO_OFFSET, "%s: weight_map: %zu entries",
                       index_path, json_object_size(wm));
        goto done;
    }
    names = calloc(json_object_size(wm) + 1, sizeof *names);
    if (!names) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        goto done;
    }
    size_t n = 0;
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        if (!json_is_string(v)) {
            rc = gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                           "%s: weight_map.%s: not a string", index_path, key);
            goto done;
        }
        const char *fn = json_string_value(v);
        if (!fn[0] || strchr(fn, '/') || !strcmp(fn, ".") || !strcmp(fn, "..")) {
            rc = gguf_fail(err, GGUF_E_SPLIT, GGUF_NO_OFFSET,
                           "%s: weight_map.%s: \"%.200s\" is not a file name in the index's "
                           "folder", index_path, key, fn);
            goto done;
        }
        names[n++] = fn;
    }
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        if (i && !strcmp(names[i], names[i - 1]))
            continue;
        char *p = join(s->dir, names[i]);
        if (!p) {
            rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
            goto done;
        }
        rc = add_file(s, p, err);
        free(p);
        if (rc)
            goto done;
    }
    /* every name in its file */
    json_object_foreach(wm, key, v) {
        const char *fn = json_string_value(v);
        const gguf_st_file *f = NULL;
        for (uint32_t i = 0; i < s->n_files && !f; i++) {
            const char *base = strrchr(s->files[i]->path, '/');
            if (!strcmp(base ? base + 1 : s->files[i]->path, fn))
                f = s->files[i];
        }
        if (!f || !gguf_st_file_tensor_find(f, key)) {
            rc = gguf_fail(err, GGUF_E_SPLIT, GGUF_NO_OFFSET,
                           "%s: weight_map.%s: not in %s", index_path, key, fn);
            goto done;
        }
    }
    /* and every tensor of the files in the map: the index is the checkpoint's list */
    for (uint32_t i = 0; i < s->n_files; i++) {
        const gguf_st_file *f = s->files[i];
        for (int64_t k = 0; k < f->n_tensors; k++)
            if (!json_object_get(wm, f->tensors[k].name)) {
                rc = gguf_fail(err, GGUF_E_SPLIT, f->tensors[k].file_offset,
                               "%s: weight_map: %s of %s is not listed", index_path,
                               f->tensors[k].name, f->path);
                goto done;
            }
    }
done:
    free(names);
    json_decref(root);
    return rc;
}

static int open_folder(gguf_st_set *s, gguf_error *err)
{
    char *p = join(s->dir, "model.safetensors.index.json");
    if (!p)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    int rc;
    if (file_exists(p)) {
        rc = open_index(s, p, err);
        free(p);
        return rc;
    }
    free(p);
    if (!(p = join(s->dir, "model.safetensors")))
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    if (file_exists(p)) {
        rc = add_file(s, p, err);
        free(p);
        return rc;
    }
    free(p);
    struct dirent **ents = NULL;
    const int n = scandir(s->dir, &ents, NULL, alphasort);
    if (n < 0)
        return gguf_fail_errno(err, errno == ENOENT ? GGUF_E_NOT_FOUND : GGUF_E_IO, errno,
                               "%s", s->dir);
    rc = 0;
    for (int i = 0; i < n; i++) {
        if (!rc && ends_with(ents[i]->d_name, ".safetensors") && ents[i]->d_name[0] != '.') {
            char *fp = join(s->dir, ents[i]->d_name);
            rc = fp ? add_file(s, fp, err)
                    : gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
            free(fp);
        }
        free(ents[i]);
    }
    free(ents);
    if (!rc && s->n_files == 0)
        rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                       "%s: no model.safetensors.index.json and no *.safetensors file", s->dir);
    return rc;
}

/* ---- quantization configuration ---- */

static void copy_str(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src ? src : "");
}

static int read_block(json_t *arr, int64_t block[2], const char *file, const char *key,
                      gguf_error *err)
{
    if (!arr)
        return 0;
    if (!json_is_array(arr) || json_array_size(arr) != 2 ||
        !json_is_integer(json_array_get(arr, 0)) || !json_is_integer(json_array_get(arr, 1)) ||
        json_integer_value(json_array_get(arr, 0)) < 1 ||
        json_integer_value(json_array_get(arr, 1)) < 1)
        return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                         "%s: %s: not two positive integers", file, key);
    block[0] = json_integer_value(json_array_get(arr, 0));
    block[1] = json_integer_value(json_array_get(arr, 1));
    return 0;
}

static int scheme_from_config(gguf_st_quant *q, json_t *qc, const char *file, gguf_error *err)
{
    if (!json_is_object(qc))
        return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                         "%s: quantization_config: not a JSON object", file);
    const char *method = json_string_value(json_object_get(qc, "quant_method"));
    copy_str(q->method, sizeof q->method, method);
    copy_str(q->source, sizeof q->source, "config.json");
    if (!method) {
        q->scheme = GGUF_ST_SCHEME_OTHER;
        return 0;
    }
    if (!strcmp(method, "fp8")) {
        json_t *bs = json_object_get(qc, "weight_block_size");
        q->scheme = bs && !json_is_null(bs) ? GGUF_ST_SCHEME_FP8_BLOCK : GGUF_ST_SCHEME_FP8;
        return bs && !json_is_null(bs)
                   ? read_block(bs, q->block, file, "quantization_config.weight_block_size", err)
                   : 0;
    }
    if (!strcmp(method, "modelopt")) {
        const char *algo = json_string_value(json_object_get(qc, "quant_algo"));
        copy_str(q->method, sizeof q->method, algo ? algo : method);
        if (algo && !strcmp(algo, "NVFP4")) {
            q->scheme = GGUF_ST_SCHEME_NVFP4;
            q->block[0] = 1;
            q->block[1] = 16;
        } else if (algo && !strncmp(algo, "FP8", 3)) {
            q->scheme = GGUF_ST_SCHEME_FP8;
        } else {
            q->scheme = GGUF_ST_SCHEME_OTHER;
        }
        return 0;
    }
    if (!strcmp(method, "compressed-tensors")) {
        const char *fmt = json_string_value(json_object_get(qc, "format"));
        copy_str(q->method, sizeof q->method, fmt ? fmt : method);
        if (fmt && !strcmp(fmt, "float-quantized")) {
            q->scheme = GGUF_ST_SCHEME_CT_FP8;
            /* the block of the first group with a block strategy */
            json_t *groups = json_object_get(qc, "config_groups");
            const char *gk;
            json_t *g;
            if (json_is_object(groups))
                json_object_foreach(groups, gk, g) {
                    json_t *w = json_object_get(g, "weights");
                    json_t *bs = json_object_get(w, "block_structure");
                    if (bs && !json_is_null(bs))
                        return read_block(bs, q->block, file,
                                          "quantization_config.config_groups.weights."
                                          "block_structure", err);
                }
        } else if (fmt && !strcmp(fmt, "nvfp4-pack-quantized")) {
            q->scheme = GGUF_ST_SCHEME_CT_NVFP4;
            q->block[0] = 1;
            q->block[1] = 16;
        } else {
            q->scheme = GGUF_ST_SCHEME_OTHER;
        }
        return 0;
    }
    q->scheme = GGUF_ST_SCHEME_OTHER;
    return 0;
}

static int read_quant(gguf_st_set *s, gguf_error *err)
{
    char *p = join(s->dir, "hf_quant_config.json");
    if (!p)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    json_t *root = NULL;
    int rc = 0;
    if (file_exists(p)) {
        if ((rc = load_json(p, &root, err)) != 0)
            goto done;
        json_t *q = json_object_get(root, "quantization");
        const char *algo = json_string_value(json_object_get(q, "quant_algo"));
        if (!algo) {
            rc = gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                           "%s: quantization.quant_algo: missing or not a string", p);
            goto done;
        }
        copy_str(s->quant.source, sizeof s->quant.source, "hf_quant_config.json");
        copy_str(s->quant.method, sizeof s->quant.method, algo);
        if (!strcmp(algo, "NVFP4")) {
            json_t *gs = json_object_get(q, "group_size");
            const json_int_t g = json_is_integer(gs) ? json_integer_value(gs) : 16;
            if (g != 16) {
                rc = gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                               "%s: quantization.group_size: %lld (NVFP4 groups are 16)", p,
                               (long long)g);
                goto done;
            }
            s->quant.scheme = GGUF_ST_SCHEME_NVFP4;
            s->quant.block[0] = 1;
            s->quant.block[1] = 16;
        } else if (!strncmp(algo, "FP8", 3)) {
            s->quant.scheme = GGUF_ST_SCHEME_FP8;
        } else {
            s->quant.scheme = GGUF_ST_SCHEME_OTHER;
        }
        goto done; /* ModelOpt's own file wins over config.json */
    }
    free(p);
    if (!(p = join(s->dir, "config.json"))) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        goto done;
    }
    if (file_exists(p)) {
        if ((rc = load_json(p, &root, err)) != 0)
            goto done;
        json_t *qc = json_object_get(root, "quantization_config");
        if (qc)
            rc = scheme_from_config(&s->quant, qc, p, err);
    }
done:
    json_decref(root);
    free(p);
    return rc;
}

/* ---- the set ---- */

void gguf_st_set_free(gguf_st_set *s)
{
    if (!s)
        return;
    for (uint32_t i = 0; i < s->n_files; i++)
        gguf_st_file_free(s->files[i]);
    free(s->files);
    free(s->by_name);
    free(s->path);
    free(s->dir);
    free(s);
}

int gguf_st_set_open(gguf_st_set **out, const char *path, gguf_error *err)
{
    gguf_error_clear(err);
    if (!out || !path)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_st_set_open: NULL");
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return gguf_fail_errno(err, errno == ENOENT ? GGUF_E_NOT_FOUND : GGUF_E_IO, errno,
                               "%s", path);
    gguf_st_set *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    }
    int rc;
    if (S_ISDIR(sb.st_mode)) {
        s->dir = strdup(path);
    } else {
        const char *slash = strrchr(path, '/');
        s->dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
    }
    if (!s->dir) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        goto fail;
    }
    if (S_ISDIR(sb.st_mode))
        rc = open_folder(s, err);
    else if (ends_with(path, ".json"))
        rc = open_index(s, path, err);
    else
        rc = add_file(s, path, err);
    if (rc)
        goto fail;
    if ((rc = read_quant(s, err)) != 0)
        goto fail;
    int64_t total = 0;
    for (uint32_t i = 0; i < s->n_files; i++)
        total += s->files[i]->n_tensors;
    s->by_name = calloc((size_t)total + 1, sizeof *s->by_name);
    if (!s->by_name) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        goto fail;
    }
    for (uint32_t i = 0; i < s->n_files; i++)
        for (int64_t k = 0; k < s->files[i]->n_tensors; k++)
            s->by_name[s->n_tensors++] = &s->files[i]->tensors[k];
    qsort(s->by_name, (size_t)s->n_tensors, sizeof *s->by_name, gguf_st_cmp_name);
    for (int64_t i = 1; i < s->n_tensors; i++)
        if (!strcmp(s->by_name[i]->name, s->by_name[i - 1]->name)) {
            rc = gguf_fail(err, GGUF_E_DUPLICATE, s->by_name[i]->file_offset,
                           "%s: %s: in both %s and %s", path, s->by_name[i]->name,
                           s->files[s->by_name[i - 1]->file]->path,
                           s->files[s->by_name[i]->file]->path);
            goto fail;
        }
    *out = s;
    return 0;
fail:
    gguf_st_set_free(s);
    return rc;
}

const char *gguf_st_set_path(const gguf_st_set *s)
{
    return s->path;
}

uint32_t gguf_st_set_file_count(const gguf_st_set *s)
{
    return s ? s->n_files : 0;
}

const gguf_st_file *gguf_st_set_file(const gguf_st_set *s, uint32_t i)
{
    return s && i < s->n_files ? s->files[i] : NULL;
}

int64_t gguf_st_set_tensor_count(const gguf_st_set *s)
{
    return s ? s->n_tensors : 0;
}

const gguf_st_tensor *gguf_st_set_tensor_at(const gguf_st_set *s, int64_t i)
{
    return s && i >= 0 && i < s->n_tensors ? s->by_name[i] : NULL;
}

const gguf_st_tensor *gguf_st_set_tensor_find(const gguf_st_set *s, const char *name)
{
    return s && name ? gguf_st_bsearch(s->by_name, s->n_tensors, name) : NULL;
}

const gguf_st_quant *gguf_st_set_quant(const gguf_st_set *s)
{
    return &s->quant;
}
