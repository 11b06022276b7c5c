/*
 * .npy reader: the header dict is parsed by hand because it is a Python
 * literal (single quotes, True/False, tuples), which no JSON parser reads;
 * the grammar is the tiny one numpy writes, and nothing else is accepted.
 * See gguf/npy.h for what is checked.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error_lib.h"
#include "gguf/dequant.h"
#include "gguf/npy.h"

struct gguf_npy {
    char *path;
    const uint8_t *base;
    uint64_t size;
    bool mapped;
    gguf_npy_info info;
    int64_t fstride[GGUF_NPY_MAX_DIMS]; /* Fortran order: elements per step of each dim */
};

static const char *const dtype_names[GGUF_NPY_DTYPE_COUNT] = {
    "bool", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "f32", "f64", "bf16",
};

const char *gguf_npy_dtype_name(gguf_npy_dtype d)
{
    return (unsigned)d < GGUF_NPY_DTYPE_COUNT ? dtype_names[d] : "unknown";
}

bool gguf_npy_dtype_is_float(gguf_npy_dtype d)
{
    return d == GGUF_NPY_F16 || d == GGUF_NPY_F32 || d == GGUF_NPY_F64 || d == GGUF_NPY_BF16;
}

/* ------------------------------------------------------------ the header */

/* A cursor over the header dict; off0 is the dict's offset in the file. */
typedef struct hcur {
    const char *s;
    size_t n, i;
    uint64_t off0;
    const char *path;
    gguf_error *err;
} hcur;

static uint64_t hoff(const hcur *c)
{
    return c->off0 + c->i;
}

static void skip_ws(hcur *c)
{
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t'))
        c->i++;
}

static int hfail(hcur *c, int code, const char *field, const char *what)
{
    return gguf_fail(c->err, code, hoff(c), "%s: header%s%s%s: %s", c->path, field ? " '" : "",
                     field ? field : "", field ? "'" : "", what);
}

/* A quoted string without escapes, at most cap-1 bytes, into out. */
static int read_str(hcur *c, const char *field, char *out, size_t cap)
{
    if (c->i >= c->n || (c->s[c->i] != '\'' && c->s[c->i] != '"'))
        return hfail(c, GGUF_E_BAD_VALUE, field, "expected a quoted string");
    const char q = c->s[c->i++];
    size_t k = 0;
    while (c->i < c->n && c->s[c->i] != q) {
        const unsigned char ch = (unsigned char)c->s[c->i];
        if (ch == '\\' || ch < 0x20 || ch >= 0x7F)
            return hfail(c, GGUF_E_BAD_VALUE, field, "escape or non-ASCII byte in a string");
        if (k + 1 >= cap)
            return hfail(c, GGUF_E_BAD_VALUE, field, "string too long");
        out[k++] = (char)ch;
        c->i++;
    }
    if (c->i >= c->n)
        return hfail(c, GGUF_E_BAD_VALUE, field, "unterminated string");
    c->i++;
    out[k] = 0;
    return 0;
}

static bool take_word(hcur *c, const char *w)
{
    const size_t k = strlen(w);
    if (c->n - c->i < k || memcmp(c->s + c->i, w, k))
        return false;
    /* "Trueish" is not True */
    if (c->i + k < c->n) {
        const char nx = c->s[c->i + k];
        if ((nx >= 'a' && nx <= 'z') || (nx >= 'A' && nx <= 'Z') || (nx >= '0' && nx <= '9') ||
            nx == '_')
            return false;
    }
    c->i += k;
    return true;
}

static int parse_descr(hcur *c, const gguf_npy_opts *opts, gguf_npy_info *info)
{
    if (c->i < c->n && c->s[c->i] == '[')
        return hfail(c, GGUF_E_UNSUPPORTED, "descr", "a structured dtype (a list of fields)");
    const uint64_t at = hoff(c);
    char d[16];
    int rc = read_str(c, "descr", d, sizeof d);
    if (rc)
        return rc;
    static const struct {
        char kind;
        int size;
        gguf_npy_dtype dt;
    } known[] = {
        {'b', 1, GGUF_NPY_BOOL}, {'i', 1, GGUF_NPY_I8},  {'i', 2, GGUF_NPY_I16},
        {'i', 4, GGUF_NPY_I32},  {'i', 8, GGUF_NPY_I64}, {'u', 1, GGUF_NPY_U8},
        {'u', 2, GGUF_NPY_U16},  {'u', 4, GGUF_NPY_U32}, {'u', 8, GGUF_NPY_U64},
        {'f', 2, GGUF_NPY_F16},  {'f', 4, GGUF_NPY_F32}, {'f', 8, GGUF_NPY_F64},
        {'V', 2, GGUF_NPY_BF16},
    };
    const size_t len = strlen(d);
    if (len == 3 && (d[0] == '<' || d[0] == '>' || d[0] == '|') && d[2] >= '1' && d[2] <= '8') {
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
            if (known[k].kind != d[1] || known[k].size != d[2] - '0')
                continue;
            /* '|' (not applicable) only for one byte and for void; '<'/'>' for the rest */
            if ((d[0] == '|') != (known[k].size == 1) && d[1] != 'V')
                break;
            if (known[k].dt == GGUF_NPY_BF16 && !(opts && opts->v2_as_bf16))
                return gguf_fail(c->err, GGUF_E_BAD_TYPE, at,
                                 "%s: header 'descr': '%s' is a 2-byte void: ml_dtypes saves "
                                 "bfloat16 so, but the file cannot say it; read it as bfloat16 "
                                 "only when told (--npy-v2 bf16)", c->path, d);
            memcpy(info->descr, d, len + 1);
            info->dtype = known[k].dt;
            info->item_size = (uint32_t)known[k].size;
            info->big_endian = d[0] == '>' && known[k].size > 1;
            return 0;
        }
    }
    return gguf_fail(c->err, GGUF_E_BAD_TYPE, at,
                     "%s: header 'descr': '%s' is not a dtype this reader knows (f2 f4 f8, "
                     "i1..i8, u1..u8, b1, V2 as bfloat16)", c->path, d);
}

static int parse_shape(hcur *c, gguf_npy_info *info)
{
    if (c->i >= c->n || c->s[c->i] != '(')
        return hfail(c, GGUF_E_BAD_VALUE, "shape", "expected a tuple '('");
    c->i++;
    int nd = 0;
    bool comma = false; /* a comma followed the last number */
    for (;;) {
        skip_ws(c);
        if (c->i >= c->n)
            return hfail(c, GGUF_E_BAD_VALUE, "shape", "unterminated tuple");
        if (c->s[c->i] == ')') {
            if (nd == 1 && !comma)
                return hfail(c, GGUF_E_BAD_VALUE, "shape", "(n) is not a tuple: write (n,)");
            c->i++;
            break;
        }
        if (nd > 0 && !comma)
            return hfail(c, GGUF_E_BAD_VALUE, "shape", "expected ',' or ')'");
        if (c->s[c->i] < '0' || c->s[c->i] > '9')
            return hfail(c, GGUF_E_BAD_VALUE, "shape", "expected a non-negative integer");
        if (nd == GGUF_NPY_MAX_DIMS)
            return hfail(c, GGUF_E_LIMIT, "shape", "more than 8 dimensions");
        const size_t start = c->i;
        uint64_t v = 0;
        while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') {
            if (c->i - start >= 19) {
                c->i = start;
                return hfail(c, GGUF_E_LIMIT, "shape", "a dimension of more than 19 digits");
            }
            v = v * 10 + (uint64_t)(c->s[c->i] - '0');
            c->i++;
        }
        if (c->s[start] == '0' && c->i - start > 1) {
            c->i = start;
            return hfail(c, GGUF_E_BAD_VALUE, "shape", "a leading zero (not Python)");
        }
        if (v > INT64_MAX) {
            c->i = start;
            return hfail(c, GGUF_E_OVERFLOW, "shape", "a dimension over 2^63-1");
        }
        info->shape[nd++] = (int64_t)v;
        skip_ws(c);
        comma = c->i < c->n && c->s[c->i] == ',';
        if (comma)
            c->i++;
    }
    info->n_dims = nd;
    return 0;
}

static int parse_dict(hcur *c, const gguf_npy_opts *opts, gguf_npy_info *info)
{
    enum { K_DESCR = 1, K_FORTRAN = 2, K_SHAPE = 4 };
    unsigned seen = 0;
    int rc;
    skip_ws(c);
    if (c->i >= c->n || c->s[c->i] != '{')
        return hfail(c, GGUF_E_BAD_VALUE, NULL, "not a dict (expected '{')");
    c->i++;
    bool need_sep = false;
    for (;;) {
        skip_ws(c);
        if (c->i >= c->n)
            return hfail(c, GGUF_E_BAD_VALUE, NULL, "the dict does not end ('}' missing)");
        if (c->s[c->i] == '}') {
            c->i++;
            break;
        }
        if (need_sep)
            return hfail(c, GGUF_E_BAD_VALUE, NULL, "expected ',' or '}'");
        const uint64_t key_at = hoff(c);
        char key[32];
        if ((rc = read_str(c, NULL, key, sizeof key)))
            return rc;
        unsigned bit = !strcmp(key, "descr")           ? K_DESCR
                       : !strcmp(key, "fortran_order") ? K_FORTRAN
                       : !strcmp(key, "shape")         ? K_SHAPE
                                                       : 0;
        if (!bit)
            return gguf_fail(c->err, GGUF_E_BAD_VALUE, key_at,
                             "%s: header: unknown key '%s' (only 'descr', 'fortran_order', "
                             "'shape')", c->path, key);
        if (seen & bit)
            return gguf_fail(c->err, GGUF_E_DUPLICATE, key_at, "%s: header: key '%s' twice",
                             c->path, key);
        seen |= bit;
        skip_ws(c);
        if (c->i >= c->n || c->s[c->i] != ':')
            return hfail(c, GGUF_E_BAD_VALUE, key, "expected ':'");
        c->i++;
        skip_ws(c);
        if (bit == K_DESCR) {
            rc = parse_descr(c, opts, info);
        } else if (bit == K_SHAPE) {
            rc = parse_shape(c, info);
        } else if (take_word(c, "True")) {
            info->fortran_order = true;
        } else if (take_word(c, "False")) {
            info->fortran_order = false;
        } else {
            rc = hfail(c, GGUF_E_BAD_VALUE, key, "expected True or False");
        }
        if (rc)
            return rc;
        skip_ws(c);
        need_sep = true;
        if (c->i < c->n && c->s[c->i] == ',') {
            c->i++;
            need_sep = false;
        }
    }
    /* numpy pads with spaces and ends the header with '\n' */
    for (; c->i < c->n; c->i++)
        if (c->s[c->i] != ' ' && c->s[c->i] != '\t' && c->s[c->i] != '\n' && c->s[c->i] != '\r')
            return hfail(c, GGUF_E_BAD_VALUE, NULL, "bytes after the dict that are not spaces");
    if (seen != (K_DESCR | K_FORTRAN | K_SHAPE)) {
        const char *miss = !(seen & K_DESCR) ? "descr" : !(seen & K_FORTRAN) ? "fortran_order"
                                                                            : "shape";
        return gguf_fail(c->err, GGUF_E_BAD_VALUE, c->off0, "%s: header: key '%s' missing",
                         c->path, miss);
    }
    return 0;
}

static int parse_file(gguf_npy *a, const gguf_npy_opts *opts, gguf_error *err)
{
    const uint8_t *b = a->base;
    gguf_npy_info *info = &a->info;
    if (a->size < 8 || memcmp(b, "\x93NUMPY", 6))
        return gguf_fail(err, GGUF_E_BAD_MAGIC, 0, "%s: not a .npy file (no \\x93NUMPY magic)",
                         a->path);
    info->major = b[6];
    info->minor = b[7];
    if (info->minor != 0 || info->major < 1 || info->major > 3)
        return gguf_fail(err, GGUF_E_BAD_VERSION, 6,
                         "%s: format version %d.%d (this reader knows 1.0, 2.0, 3.0)", a->path,
                         info->major, info->minor);
    const uint64_t len_size = info->major == 1 ? 2 : 4;
    if (a->size < 8 + len_size)
        return gguf_fail(err, GGUF_E_TRUNCATED, 8, "%s: header length: the file ends inside it",
                         a->path);
    uint64_t hlen = (uint64_t)b[8] | (uint64_t)b[9] << 8;
    if (len_size == 4)
        hlen |= (uint64_t)b[10] << 16 | (uint64_t)b[11] << 24;
    if (hlen > GGUF_NPY_MAX_HEADER)
        return gguf_fail(err, GGUF_E_LIMIT, 8, "%s: header length %llu over %u bytes", a->path,
                         (unsigned long long)hlen, GGUF_NPY_MAX_HEADER);
    const uint64_t hstart = 8 + len_size;
    if (hlen > a->size - hstart)
        return gguf_fail(err, GGUF_E_TRUNCATED, 8,
                         "%s: header length %llu: the file ends after %llu bytes of it", a->path,
                         (unsigned long long)hlen, (unsigned long long)(a->size - hstart));
    hcur c = {(const char *)b + hstart, (size_t)hlen, 0, hstart, a->path, err};
    int rc = parse_dict(&c, opts, info);
    if (rc)
        return rc;
    uint64_t count = 1;
    for (int d = 0; d < info->n_dims; d++)
        if (!gguf_mul_u64(count, (uint64_t)info->shape[d], &count) || count > INT64_MAX)
            return gguf_fail(err, GGUF_E_OVERFLOW, hstart,
                             "%s: header 'shape': the element count overflows", a->path);
    uint64_t nbytes;
    if (!gguf_mul_u64(count, info->item_size, &nbytes))
        return gguf_fail(err, GGUF_E_OVERFLOW, hstart,
                         "%s: header 'shape': the byte count overflows", a->path);
    info->n_elements = (int64_t)count;
    info->nbytes = nbytes;
    info->data_offset = hstart + hlen;
    const uint64_t avail = a->size - info->data_offset;
    if (nbytes > avail)
        return gguf_fail(err, GGUF_E_TRUNCATED, info->data_offset,
                         "%s: data: shape and '%s' need %llu bytes, the file has %llu", a->path,
                         info->descr, (unsigned long long)nbytes, (unsigned long long)avail);
    if (nbytes < avail)
        return gguf_fail(err, GGUF_E_BAD_OFFSET, info->data_offset + nbytes,
                         "%s: data: %llu bytes after the array (several arrays in one file?)",
                         a->path, (unsigned long long)(avail - nbytes));
    int64_t s = 1;
    for (int d = 0; d < info->n_dims; d++) {
        a->fstride[d] = s;
        s *= info->shape[d] ? info->shape[d] : 1;
    }
    return 0;
}

static int new_array(gguf_npy **out, const char *name, gguf_error *err)
{
    gguf_npy *a = calloc(1, sizeof *a);
    if (!a || !(a->path = strdup(name))) {
        free(a);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: out of memory", name);
    }
    *out = a;
    return 0;
}

static int finish_open(gguf_npy *a, gguf_npy **out, const gguf_npy_opts *opts, gguf_error *err)
{
    const int rc = parse_file(a, opts, err);
    if (rc) {
        gguf_npy_free(a);
        return rc;
    }
    *out = a;
    return 0;
}

int gguf_npy_open_memory(gguf_npy **out, const void *data, size_t size, const char *name,
                         const gguf_npy_opts *opts, gguf_error *err)
{
    if (opts && opts->version > GGUF_NPY_OPTS_VERSION) {
        if (out)
            *out = NULL;
        return gguf_opts_version_fail(opts->version, GGUF_NPY_OPTS_VERSION, "gguf_npy_opts", err);
    }
    gguf_error_clear(err);
    if (!out || (!data && size))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_npy_open_memory: NULL");
    *out = NULL;
    gguf_npy *a = NULL; /* set by new_array on success (GCC 12 -O3 cannot tell) */
    int rc = new_array(&a, name ? name : "<memory>", err);
    if (rc)
        return rc;
    a->base = data;
    a->size = size;
    return finish_open(a, out, opts, err);
}

int gguf_npy_open(gguf_npy **out, const char *path, const gguf_npy_opts *opts, gguf_error *err)
{
    if (opts && opts->version > GGUF_NPY_OPTS_VERSION) {
        if (out)
            *out = NULL;
        return gguf_opts_version_fail(opts->version, GGUF_NPY_OPTS_VERSION, "gguf_npy_opts", err);
    }
    gguf_error_clear(err);
    if (!out || !path)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_npy_open: NULL");
    *out = NULL;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return gguf_fail_errno(err, errno == ENOENT ? GGUF_E_NOT_FOUND : GGUF_E_IO, errno, "%s",
                               path);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        const int e = errno;
        close(fd);
        return gguf_fail_errno(err, GGUF_E_IO, e, "%s: stat", path);
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return gguf_fail(err, GGUF_E_NOT_GGUF, GGUF_NO_OFFSET,
                         "%s: not a regular file (a folder or a device)", path);
    }
    gguf_npy *a = NULL; /* set by new_array on success (GCC 12 -O3 cannot tell) */
    int rc = new_array(&a, path, err);
    if (rc) {
        close(fd);
        return rc;
    }
    a->size = (uint64_t)sb.st_size;
    if (a->size > 0) {
        void *m = mmap(NULL, (size_t)a->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            const int e = errno;
            close(fd);
            gguf_npy_free(a);
            return gguf_fail_errno(err, e == ENOMEM ? GGUF_E_NOMEM : GGUF_E_IO, e, "%s: mmap",
                                   path);
        }
        a->base = m;
        a->mapped = true;
    }
    close(fd);
    return finish_open(a, out, opts, err);
}

void gguf_npy_free(gguf_npy *a)
{
    if (!a)
        return;
    if (a->mapped)
        munmap((void *)a->base, (size_t)a->size);
    free(a->path);
    free(a);
}

const char *gguf_npy_path(const gguf_npy *a)
{
    return a->path;
}

const gguf_npy_info *gguf_npy_get_info(const gguf_npy *a)
{
    return &a->info;
}

const uint8_t *gguf_npy_data(const gguf_npy *a)
{
    return a->base + a->info.data_offset;
}

/* ------------------------------------------------------------ the data */

/* The item's bytes in little-endian order. */
static void item_le(const gguf_npy *a, int64_t pos, uint8_t *v)
{
    const uint32_t k = a->info.item_size;
    const uint8_t *p = gguf_npy_data(a) + (uint64_t)pos * k;
    if (!a->info.big_endian) {
        memcpy(v, p, k);
        return;
    }
    for (uint32_t j = 0; j < k; j++)
        v[j] = p[k - 1 - j];
}

static float item_f32(const gguf_npy *a, int64_t pos)
{
    uint8_t v[8];
    item_le(a, pos, v);
    switch (a->info.dtype) {
    case GGUF_NPY_BOOL: return v[0] ? 1.0f : 0.0f;
    case GGUF_NPY_I8: return (float)(int8_t)v[0];
    case GGUF_NPY_U8: return (float)v[0];
    case GGUF_NPY_I16: { int16_t x; memcpy(&x, v, 2); return (float)x; }
    case GGUF_NPY_U16: { uint16_t x; memcpy(&x, v, 2); return (float)x; }
    case GGUF_NPY_I32: { int32_t x; memcpy(&x, v, 4); return (float)x; }
    case GGUF_NPY_U32: { uint32_t x; memcpy(&x, v, 4); return (float)x; }
    case GGUF_NPY_I64: { int64_t x; memcpy(&x, v, 8); return (float)x; }
    case GGUF_NPY_U64: { uint64_t x; memcpy(&x, v, 8); return (float)x; }
    case GGUF_NPY_F16: { uint16_t x; memcpy(&x, v, 2); return gguf_fp16_to_fp32(x); }
    case GGUF_NPY_BF16: { uint16_t x; memcpy(&x, v, 2); return gguf_bf16_to_fp32(x); }
    case GGUF_NPY_F32: { float x; memcpy(&x, v, 4); return x; }
    case GGUF_NPY_F64: { double x; memcpy(&x, v, 8); return (float)x; }
    default: return 0.0f;
    }
}

/* Walks C-order indices [i0, i0+n) and yields the storage position of each. */
typedef struct walker {
    const gguf_npy *a;
    int64_t idx[GGUF_NPY_MAX_DIMS];
    int64_t pos;
} walker;

static void walk_start(walker *w, const gguf_npy *a, int64_t i0)
{
    w->a = a;
    w->pos = i0;
    if (!a->info.fortran_order)
        return;
    int64_t r = i0;
    w->pos = 0;
    for (int d = a->info.n_dims - 1; d >= 0; d--) {
        const int64_t s = a->info.shape[d];
        w->idx[d] = s ? r % s : 0;
        r = s ? r / s : 0;
        w->pos += w->idx[d] * a->fstride[d];
    }
}

static void walk_next(walker *w)
{
    const gguf_npy *a = w->a;
    if (!a->info.fortran_order) {
        w->pos++;
        return;
    }
    for (int d = a->info.n_dims - 1; d >= 0; d--) {
        if (++w->idx[d] < a->info.shape[d]) {
            w->pos += a->fstride[d];
            return;
        }
        w->pos -= (w->idx[d] - 1) * a->fstride[d];
        w->idx[d] = 0;
    }
}

static int check_range(const gguf_npy *a, int64_t i0, int64_t n, const void *dst,
                       gguf_error *err)
{
    if (!a || (!dst && n) || i0 < 0 || n < 0 || i0 > a->info.n_elements ||
        n > a->info.n_elements - i0)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "%s: elements [%lld, +%lld) outside the array of %lld",
                         a ? a->path : "?", (long long)i0, (long long)n,
                         a ? (long long)a->info.n_elements : 0LL);
    return 0;
}

int gguf_npy_read_f32(const gguf_npy *a, int64_t i0, int64_t n, float *dst, gguf_error *err)
{
    int rc = check_range(a, i0, n, dst, err);
    if (rc)
        return rc;
    if (a->info.dtype == GGUF_NPY_F32 && !a->info.big_endian && !a->info.fortran_order) {
        memcpy(dst, gguf_npy_data(a) + (uint64_t)i0 * 4, (size_t)n * 4);
        return 0;
    }
    walker w;
    walk_start(&w, a, i0);
    for (int64_t k = 0; k < n; k++, walk_next(&w))
        dst[k] = item_f32(a, w.pos);
    return 0;
}

int gguf_npy_read_i64(const gguf_npy *a, int64_t i0, int64_t n, int64_t *dst, gguf_error *err)
{
    int rc = check_range(a, i0, n, dst, err);
    if (rc)
        return rc;
    if (gguf_npy_dtype_is_float(a->info.dtype))
        return gguf_fail(err, GGUF_E_BAD_TYPE, GGUF_NO_OFFSET,
                         "%s: '%s' is a float array, not integers", a->path, a->info.descr);
    walker w;
    walk_start(&w, a, i0);
    for (int64_t k = 0; k < n; k++, walk_next(&w)) {
        uint8_t v[8] = {0};
        item_le(a, w.pos, v);
        switch (a->info.dtype) {
        case GGUF_NPY_I8: dst[k] = (int8_t)v[0]; break;
        case GGUF_NPY_I16: { int16_t x; memcpy(&x, v, 2); dst[k] = x; break; }
        case GGUF_NPY_I32: { int32_t x; memcpy(&x, v, 4); dst[k] = x; break; }
        case GGUF_NPY_I64: memcpy(&dst[k], v, 8); break;
        case GGUF_NPY_U64: {
            uint64_t x;
            memcpy(&x, v, 8);
            if (x > INT64_MAX)
                return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                                 "%s: element %lld: %llu is over 2^63-1", a->path,
                                 (long long)(i0 + k), (unsigned long long)x);
            dst[k] = (int64_t)x;
            break;
        }
        default: { /* bool, u8, u16, u32: little-endian, zero-extended */
            uint64_t x;
            memcpy(&x, v, 8);
            dst[k] = (int64_t)x;
            break;
        }
        }
    }
    return 0;
}
