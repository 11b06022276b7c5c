/*
 * gguf/file.h - open GGUF files and split sets read-only, validated at the door.
 *
 * A gguf_file is one physical file, memory-mapped read-only. Opening parses the
 * header, the metadata and the tensor infos, and proves every count, length,
 * shape, size and offset against the file size (with overflow checks) before
 * returning: after a successful open no accessor can fail or read outside the
 * map. Only header pages are touched, so opening a 400 GB model costs what its
 * header costs.
 *
 * A gguf_set is a logical model: one file, or every part of a split set
 * (PREFIX-00001-of-00010.gguf ...) found from any one of its parts and checked
 * through the parts' split.no / split.count / split.tensors.count keys.
 *
 * Lifetimes: every pointer handed out (keys, strings, values, tensor infos,
 * tensor data) borrows from the file or set and stays valid until it is freed.
 * The library is little-endian only (x86-64, AArch64), as are GGUF files in use.
 *
 *   +------------------------------------------------------------+
 *   | "GGUF" | version u32 | n_tensors u64 | n_kv u64             |
 *   | n_kv x  { key: string, value_type u32, value }              |
 *   | n_tensors x { name: string, n_dims u32, ne[n_dims] u64,     |
 *   |              type u32, offset u64 (from data start) }       |
 *   | padding to general.alignment (default 32)                   |
 *   | data section: tensors at their (aligned) offsets             |
 *   +------------------------------------------------------------+
 *   string = { len u64, bytes[len] } (no NUL); array = { type u32, n u64, items }
 */
#ifndef GGUF_FILE_H
#define GGUF_FILE_H

#include "gguf/export.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"
#include "gguf/types.h"

GGUF_BEGIN_DECLS

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_ALIGNMENT (1u << 20)   /* larger values are treated as corrupt */
#define GGUF_MAX_NESTING 8              /* arrays of arrays, at most this deep */
#define GGUF_MAX_NAME_LEN 65535u        /* keys and tensor names */

/* A string borrowed from the file: not NUL-terminated. */
typedef struct gguf_str {
    const char *data;
    uint64_t len;
} gguf_str;

/*
 * A metadata value. Scalars are decoded; arrays keep a borrowed view:
 *  - arrays of scalars: `raw` points at n packed little-endian items;
 *  - arrays of strings: `strs` has n entries;
 *  - arrays of arrays:  `vals` has n entries (each of type GGUF_VALUE_ARRAY).
 * Use gguf_value_elem() to read element i of any array.
 * Writers accept values built by hand the same way (raw in host order).
 */
typedef struct gguf_value gguf_value;
struct gguf_value {
    uint32_t type; /* gguf_value_type */
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        float f32;
        bool b;
        uint64_t u64;
        int64_t i64;
        double f64;
        gguf_str str;
        struct {
            uint32_t type; /* element type */
            uint64_t n;
            const void *raw;
            const gguf_str *strs;
            const gguf_value *vals;
        } arr;
    } v;
};

typedef struct gguf_kv {
    const char *key;   /* NUL-terminated, valid UTF-8 */
    uint64_t key_len;
    gguf_value value;
    uint64_t offset;   /* byte offset of the key in the file */
} gguf_kv;

typedef struct gguf_tensor {
    const char *name;      /* NUL-terminated, valid UTF-8 */
    uint32_t type;         /* gguf_type, always valid */
    uint32_t n_dims;       /* 0..4 */
    int64_t ne[GGUF_MAX_DIMS]; /* ggml order, innermost first; unused dims are 1 */
    int64_t n_elements;
    uint64_t nbytes;
    uint64_t offset;       /* from the start of the data section */
    uint64_t file_offset;  /* absolute offset of the data in its file */
    uint64_t info_offset;  /* absolute offset of this tensor's info in the header */
    const uint8_t *data;   /* nbytes bytes inside the map */
    uint32_t part;         /* index of its file in the set (0 for a lone file) */
    uint32_t index;        /* position in its file's tensor table */
} gguf_tensor;

typedef struct gguf_file gguf_file;
typedef struct gguf_set gguf_set;

enum {
    GGUF_OPEN_SINGLE = 1u << 0, /* gguf_set_open: open only this file, ignore split naming */
};

typedef struct gguf_open_opts {
    unsigned int version; /* GGUF_OPEN_OPTS_VERSION, or 0 for the same (see below) */
    uint32_t flags;
} gguf_open_opts;
/* The layout version of gguf_open_opts: the library refuses a larger one with
 * GGUF_E_OPTS_VERSION (docs/conventions.md, "Options structs"). */
#define GGUF_OPEN_OPTS_VERSION 1
/* The defaults, version set: gguf_open_opts o = GGUF_OPEN_OPTS_INIT; */
#define GGUF_OPEN_OPTS_INIT {.version = GGUF_OPEN_OPTS_VERSION}

/*
 * Open and validate one file. opts may be NULL.
 * @return 0; GGUF_E_NOT_FOUND (no such file), GGUF_E_IO (cannot open/stat/mmap),
 *         GGUF_E_NOT_GGUF (a directory or device, empty, Git LFS pointer, HTML page, safetensors),
 *         GGUF_E_BAD_MAGIC, GGUF_E_BAD_VERSION (v1, big-endian), GGUF_E_TRUNCATED,
 *         GGUF_E_OVERFLOW, GGUF_E_LIMIT, GGUF_E_BAD_TYPE, GGUF_E_BAD_SHAPE,
 *         GGUF_E_BAD_ALIGNMENT, GGUF_E_BAD_OFFSET, GGUF_E_DUPLICATE,
 *         GGUF_E_BAD_UTF8, GGUF_E_NOMEM (also when the address space cannot hold
 *         the map). err names the file, field and offset.
 */
int gguf_file_open(gguf_file **out, const char *path, const gguf_open_opts *opts,
                   gguf_error *err);

/*
 * Same, over a caller's buffer (borrowed: it must outlive the file). `name`
 * is used in error messages. For tests and fuzzing.
 */
int gguf_file_open_memory(gguf_file **out, const void *data, size_t size, const char *name,
                          const gguf_open_opts *opts, gguf_error *err);

void gguf_file_free(gguf_file *f);

const char *gguf_file_path(const gguf_file *f);
uint32_t gguf_file_version(const gguf_file *f);
uint32_t gguf_file_alignment(const gguf_file *f);
uint64_t gguf_file_data_offset(const gguf_file *f); /* absolute start of the data section */
uint64_t gguf_file_size(const gguf_file *f);
uint64_t gguf_file_header_size(const gguf_file *f); /* bytes of header + infos, before padding */
const uint8_t *gguf_file_bytes(const gguf_file *f); /* the whole map */
int gguf_file_fd(const gguf_file *f);               /* -1 for memory files */

int64_t gguf_file_kv_count(const gguf_file *f);
const gguf_kv *gguf_file_kv_at(const gguf_file *f, int64_t i);
const gguf_kv *gguf_file_kv_find(const gguf_file *f, const char *key); /* NULL if absent */

int64_t gguf_file_tensor_count(const gguf_file *f);
const gguf_tensor *gguf_file_tensor_at(const gguf_file *f, int64_t i);
const gguf_tensor *gguf_file_tensor_find(const gguf_file *f, const char *name); /* O(1) */

/*
 * Typed getters by key. Integer getters accept any integer type whose value
 * fits (u64 rejects negatives; i64 rejects u64 values over INT64_MAX); f64
 * accepts float32/float64 and integers.
 * @return 0; GGUF_E_NOT_FOUND; GGUF_E_WRONG_TYPE; GGUF_E_BAD_VALUE (out of range).
 */
int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, gguf_error *err);
int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, gguf_error *err);
int gguf_get_f64(const gguf_file *f, const char *key, double *out, gguf_error *err);
int gguf_get_bool(const gguf_file *f, const char *key, bool *out, gguf_error *err);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, gguf_error *err);
/* An array (any element type); *out borrows from the file. */
int gguf_get_arr(const gguf_file *f, const char *key, const gguf_value **out, gguf_error *err);

/* Conversions of one value, with the same rules as the getters. */
int gguf_value_to_u64(const gguf_value *v, uint64_t *out);
int gguf_value_to_i64(const gguf_value *v, int64_t *out);
int gguf_value_to_f64(const gguf_value *v, double *out);
/* Element i of an array (i < n), decoded into a value; arrays of arrays give arrays. */
gguf_value gguf_value_elem(const gguf_value *arr, uint64_t i);
/* True when a string equals a NUL-terminated C string. */
bool gguf_str_eq(gguf_str s, const char *cstr);

/*
 * Open a logical model from any part. A file named PREFIX-NNNNN-of-MMMMM.gguf
 * opens all MMMMM parts; any other file opens alone (and must not claim
 * split.count > 1). Checks: every part present and valid, split.no == part
 * index (0-based), split.count == MMMMM on every part, equal versions, the
 * tensor total equal to split.tensors.count, no tensor name twice in the set.
 * A later part may lack general.alignment (llama.cpp writes it into part 1
 * only) and then uses the default; one that declares another alignment than
 * part 1 is an error.
 * @return 0, the codes of gguf_file_open for the failing part, GGUF_E_SPLIT.
 */
int gguf_set_open(gguf_set **out, const char *path, const gguf_open_opts *opts, gguf_error *err);
void gguf_set_free(gguf_set *s);

uint32_t gguf_set_part_count(const gguf_set *s);
const gguf_file *gguf_set_part(const gguf_set *s, uint32_t i);
/* The part that carries the model metadata (part 0). */
const gguf_file *gguf_set_meta(const gguf_set *s);

int64_t gguf_set_tensor_count(const gguf_set *s);
const gguf_tensor *gguf_set_tensor_at(const gguf_set *s, int64_t i);   /* set order */
const gguf_tensor *gguf_set_tensor_find(const gguf_set *s, const char *name); /* O(1) */

/*
 * Parse a split part name. On a match fills prefix (the path up to "-NNNNN-of"),
 * *no (1-based) and *count and returns true.
 */
bool gguf_split_parse_name(const char *path, char *prefix, size_t prefix_size, uint32_t *no,
                           uint32_t *count);
/* Write PREFIX-%05u-of-%05u.gguf into out. @return 0 or GGUF_E_LIMIT if it does not fit. */
int gguf_split_part_name(char *out, size_t size, const char *prefix, uint32_t no, uint32_t count);

#define GGUF_KEY_ALIGNMENT "general.alignment"
#define GGUF_KEY_SPLIT_NO "split.no"
#define GGUF_KEY_SPLIT_COUNT "split.count"
#define GGUF_KEY_SPLIT_TENSORS "split.tensors.count"

GGUF_END_DECLS
#endif /* GGUF_FILE_H */
