/*
 * A read-only safetensors reader for the --reference comparison.
 *
 *   +-----------------+------------------------------+---------------------+
 *   | header len u64  | JSON header (len bytes)      | data                |
 *   +-----------------+------------------------------+---------------------+
 *   JSON: { "NAME": {"dtype": "BF16", "shape": [r, c], "data_offsets": [b, e]},
 *           ..., "__metadata__": {...} }   offsets relative to the data start
 *
 * Files are mapped read-only; every tensor's range and size is checked
 * against the file before use. A folder means every *.safetensors in it.
 */
#include "dequant_verify.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/dequant.h"

typedef struct st_file {
    void *map;
    size_t size;
} st_file;

struct dv_st_set {
    st_file *files;
    int n_files;
    dv_st_tensor *tensors;
    int64_t n_tensors, cap;
};

/* ---- a small JSON reader, enough for safetensors headers ---- */

typedef struct js {
    const char *p, *end;
    int err;
} js;

static void ws(js *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t'))
        j->p++;
}

static int expect(js *j, char c)
{
    ws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return 1;
    }
    j->err = 1;
    return 0;
}

static int peek(js *j, char c)
{
    ws(j);
    return j->p < j->end && *j->p == c;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A JSON string into a malloc'd UTF-8 C string (NULL on error). */
static char *str(js *j)
{
    if (!expect(j, '"'))
        return NULL;
    size_t cap = 64, n = 0;
    char *out = malloc(cap);
    while (out && j->p < j->end && *j->p != '"') {
        if (n + 5 >= cap) {
            char *o = realloc(out, cap *= 2);
            if (!o) {
                free(out);
                out = NULL;
                break;
            }
            out = o;
        }
        char c = *j->p++;
        if (c != '\\') {
            out[n++] = c;
            continue;
        }
        if (j->p >= j->end)
            break;
        c = *j->p++;
        switch (c) {
        case 'n': out[n++] = '\n'; break;
        case 't': out[n++] = '\t'; break;
        case 'r': out[n++] = '\r'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'u': {
            unsigned cp = 0;
            for (int k = 0; k < 4; k++) {
                const int h = j->p < j->end ? hexval(*j->p++) : -1;
                if (h < 0) {
                    j->err = 1;
                    free(out);
                    return NULL;
                }
                cp = cp << 4 | (unsigned)h;
            }
            if (cp < 0x80) {
                out[n++] = (char)cp;
            } else if (cp < 0x800) {
                out[n++] = (char)(0xC0 | cp >> 6);
                out[n++] = (char)(0x80 | (cp & 63));
            } else {
                out[n++] = (char)(0xE0 | cp >> 12);
                out[n++] = (char)(0x80 | ((cp >> 6) & 63));
                out[n++] = (char)(0x80 | (cp & 63));
            }
            break;
        }
        default: out[n++] = c; break; /* \" \\ \/ */
        }
    }
    if (!out || j->p >= j->end) {
        free(out);
        j->err = 1;
        return NULL;
    }
    j->p++; /* closing quote */
    out[n] = 0;
    return out;
}

static int64_t integer(js *j)
{
    ws(j);
    char *e;
    errno = 0;
    const long long v = strtoll(j->p, &e, 10);
    if (e == j->p || errno || e > j->end) {
        j->err = 1;
        return 0;
    }
    j->p = e;
    return v;
}

static void skip_value(js *j, int depth)
{
    ws(j);
    if (j->p >= j->end || depth > 64) {
        j->err = 1;
        return;
    }
    const char c = *j->p;
    if (c == '"') {
        free(str(j));
    } else if (c == '{' || c == '[') {
        const char close = c == '{' ? '}' : ']';
        j->p++;
        if (peek(j, close)) {
            j->p++;
            return;
        }
        while (!j->err) {
            if (c == '{') {
                free(str(j));
                expect(j, ':');
            }
            skip_value(j, depth + 1);
            if (peek(j, ',')) {
                j->p++;
                continue;
            }
            expect(j, close);
            break;
        }
    } else {
        while (j->p < j->end && *j->p != ',' && *j->p != '}' && *j->p != ']')
            j->p++;
    }
}

static dv_st_dtype dtype_of(const char *s)
{
    return !strcmp(s, "F32") ? DV_ST_F32 : !strcmp(s, "F16") ? DV_ST_F16
                                         : !strcmp(s, "BF16") ? DV_ST_BF16 : DV_ST_OTHER;
}

static int dtype_size(const char *s)
{
    if (!strcmp(s, "F64") || !strcmp(s, "I64") || !strcmp(s, "U64"))
        return 8;
    if (!strcmp(s, "F32") || !strcmp(s, "I32") || !strcmp(s, "U32"))
        return 4;
    if (!strcmp(s, "F16") || !strcmp(s, "BF16") || !strcmp(s, "I16") || !strcmp(s, "U16"))
        return 2;
    return 1;
}

static int add_file(dv_st_set *s, const char *path, char *msg, size_t msg_size)
{
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(msg, msg_size, "%s: %s", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size < 8) {
        snprintf(msg, msg_size, "%s: not a safetensors file (too small)", path);
        close(fd);
        return -1;
    }
    const size_t size = (size_t)sb.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(msg, msg_size, "%s: mmap: %s", path, strerror(errno));
        return -1;
    }
    st_file *nf = realloc(s->files, sizeof *nf * (size_t)(s->n_files + 1));
    if (!nf) {
        munmap(map, size);
        snprintf(msg, msg_size, "out of memory");
        return -1;
    }
    s->files = nf;
    s->files[s->n_files++] = (st_file){map, size};

    const uint8_t *b = map;
    uint64_t hlen = 0;
    for (int k = 0; k < 8; k++)
        hlen |= (uint64_t)b[k] << (8 * k);
    if (hlen > size - 8 || hlen > (100u << 20)) {
        snprintf(msg, msg_size, "%s: header length %llu does not fit the file (offset 0)", path,
                 (unsigned long long)hlen);
        return -1;
    }
    const uint8_t *data = b + 8 + hlen;
    const uint64_t data_size = size - 8 - hlen;
    js j = {(const char *)b + 8, (const char *)b + 8 + hlen, 0};
    if (!expect(&j, '{')) {
        snprintf(msg, msg_size, "%s: header is not a JSON object (offset 8)", path);
        return -1;
    }
    if (peek(&j, '}'))
        return 0;
    while (!j.err) {
        char *name = str(&j);
        if (!name || !expect(&j, ':')) {
            free(name);
            break;
        }
        if (!strcmp(name, "__metadata__")) {
            free(name);
            skip_value(&j, 0);
        } else {
            dv_st_tensor t = {.name = name};
            int64_t b0 = -1, b1 = -1;
            expect(&j, '{');
            while (!j.err && !peek(&j, '}')) {
                char *key = str(&j);
                expect(&j, ':');
                if (key && !strcmp(key, "dtype")) {
                    char *dt = str(&j);
                    if (dt) {
                        snprintf(t.dtype_name, sizeof t.dtype_name, "%s", dt);
                        t.dtype = dtype_of(dt);
                    }
                    free(dt);
                } else if (key && !strcmp(key, "shape")) {
                    expect(&j, '[');
                    while (!j.err && !peek(&j, ']')) {
                        const int64_t v = integer(&j);
                        if (t.n_dims < 8)
                            t.shape[t.n_dims] = v;
                        t.n_dims++;
                        if (peek(&j, ','))
                            j.p++;
                    }
                    expect(&j, ']');
                } else if (key && !strcmp(key, "data_offsets")) {
                    expect(&j, '[');
                    b0 = integer(&j);
                    expect(&j, ',');
                    b1 = integer(&j);
                    expect(&j, ']');
                } else {
                    skip_value(&j, 0);
                }
                free(key);
                if (peek(&j, ','))
                    j.p++;
            }
            expect(&j, '}');
            int64_t n = 1;
            int bad = t.n_dims > 8 || t.dtype_name[0] == 0;
            for (int k = 0; k < t.n_dims && k < 8 && !bad; k++) {
                if (t.shape[k] < 0 || (t.shape[k] > 0 && n > INT64_MAX / t.shape[k]))
                    bad = 1;
                else
                    n *= t.shape[k];
            }
            if (!bad && (b0 < 0 || b1 < b0 || (uint64_t)b1 > data_size ||
                         (uint64_t)(b1 - b0) != (uint64_t)n * (uint64_t)dtype_size(t.dtype_name)))
                bad = 1;
            if (j.err || bad) {
                snprintf(msg, msg_size, "%s: tensor '%s': bad dtype, shape or data_offsets", path,
                         name);
                free(name);
                return -1;
            }
            t.n_elements = n;
            t.data = data + b0;
            if (s->n_tensors == s->cap) {
                s->cap = s->cap ? 2 * s->cap : 256;
                dv_st_tensor *nt = realloc(s->tensors, sizeof *nt * (size_t)s->cap);
                if (!nt) {
                    free(name);
                    snprintf(msg, msg_size, "out of memory");
                    return -1;
                }
                s->tensors = nt;
            }
            s->tensors[s->n_tensors++] = t;
        }
        if (peek(&j, ',')) {
            j.p++;
            continue;
        }
        expect(&j, '}');
        break;
    }
    if (j.err) {
        snprintf(msg, msg_size, "%s: malformed JSON header near offset %lld", path,
                 (long long)(j.p - (const char *)b));
        return -1;
    }
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const dv_st_tensor *)a)->name, ((const dv_st_tensor *)b)->name);
}

static int ends_with(const char *s, const char *suffix)
{
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

dv_st_set *dv_st_open(const char *path, char *msg, size_t msg_size)
{
    dv_st_set *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(msg, msg_size, "out of memory");
        return NULL;
    }
    struct stat sb;
    if (stat(path, &sb) != 0) {
        snprintf(msg, msg_size, "%s: %s", path, strerror(errno));
        free(s);
        return NULL;
    }
    int rc = 0;
    if (S_ISDIR(sb.st_mode)) {
        struct dirent **names = NULL;
        const int n = scandir(path, &names, NULL, alphasort);
        for (int i = 0; i < n; i++) {
            if (rc == 0 && ends_with(names[i]->d_name, ".safetensors")) {
                char full[4096];
                snprintf(full, sizeof full, "%s/%s", path, names[i]->d_name);
                rc = add_file(s, full, msg, msg_size);
            }
            free(names[i]);
        }
        free(names);
        if (rc == 0 && s->n_files == 0) {
            snprintf(msg, msg_size, "%s: no *.safetensors file in this folder", path);
            rc = -1;
        }
    } else {
        rc = add_file(s, path, msg, msg_size);
    }
    if (rc != 0) {
        dv_st_close(s);
        return NULL;
    }
    qsort(s->tensors, (size_t)s->n_tensors, sizeof *s->tensors, by_name);
    return s;
}

void dv_st_close(dv_st_set *s)
{
    if (!s)
        return;
    for (int64_t i = 0; i < s->n_tensors; i++)
        free(s->tensors[i].name);
    free(s->tensors);
    for (int i = 0; i < s->n_files; i++)
        munmap(s->files[i].map, s->files[i].size);
    free(s->files);
    free(s);
}

const dv_st_tensor *dv_st_find(const dv_st_set *s, const char *name)
{
    if (!s)
        return NULL;
    dv_st_tensor key = {.name = (char *)name};
    return bsearch(&key, s->tensors, (size_t)s->n_tensors, sizeof key, by_name);
}

int64_t dv_st_count(const dv_st_set *s)
{
    return s ? s->n_tensors : 0;
}

float dv_st_get(const dv_st_tensor *t, int64_t i)
{
    const uint8_t *p = t->data;
    switch (t->dtype) {
    case DV_ST_F32: {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    case DV_ST_F16: return gguf_fp16_to_fp32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
    case DV_ST_BF16: return gguf_bf16_to_fp32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
    default: return 0.0f;
    }
}
