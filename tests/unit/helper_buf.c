#include "helper_buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tb_bytes(tbuf *b, const void *p, size_t n)
{
    if (b->cap - b->n < n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p)
            abort();
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

void tb_u8(tbuf *b, uint8_t v) { tb_bytes(b, &v, 1); }
void tb_u32(tbuf *b, uint32_t v) { tb_bytes(b, &v, 4); }
void tb_u64(tbuf *b, uint64_t v) { tb_bytes(b, &v, 8); }

void tb_str(tbuf *b, const char *s)
{
    tb_u64(b, strlen(s));
    tb_bytes(b, s, strlen(s));
}

void tb_zeros(tbuf *b, size_t n)
{
    static const uint8_t z[4096];
    while (n) {
        size_t k = n < sizeof z ? n : sizeof z;
        tb_bytes(b, z, k);
        n -= k;
    }
}

void tb_pad(tbuf *b, size_t align) { tb_zeros(b, (align - b->n % align) % align); }

void tb_free(tbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

void tb_header(tbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    tb_bytes(b, "GGUF", 4);
    tb_u32(b, version);
    tb_u64(b, n_tensors);
    tb_u64(b, n_kv);
}

void tb_kv_u32(tbuf *b, const char *key, uint32_t v)
{
    tb_str(b, key);
    tb_u32(b, 4);
    tb_u32(b, v);
}

void tb_kv_str(tbuf *b, const char *key, const char *v)
{
    tb_str(b, key);
    tb_u32(b, 8);
    tb_str(b, v);
}

void tb_tensor(tbuf *b, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type,
               uint64_t offset)
{
    tb_str(b, name);
    tb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++)
        tb_u64(b, (uint64_t)ne[i]);
    tb_u32(b, type);
    tb_u64(b, offset);
}

char *th_mkdtemp(void)
{
    const char *base = getenv("TMPDIR");
    char *t = malloc(4096);
    snprintf(t, 4096, "%s/ggufkit-test-XXXXXX", base ? base : "/tmp");
    if (!mkdtemp(t))
        abort();
    return t;
}

void th_rmdir(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) {
        /* best effort */
    }
}

int th_write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t k = fwrite(p, 1, n, f);
    return (fclose(f) == 0 && k == n) ? 0 : -1;
}
