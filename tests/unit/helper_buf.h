/* A byte-buffer builder for hand-crafted (and deliberately broken) GGUF headers. */
#ifndef HELPER_BUF_H
#define HELPER_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct tbuf {
    uint8_t *p;
    size_t n, cap;
} tbuf;

void tb_bytes(tbuf *b, const void *p, size_t n);
void tb_u8(tbuf *b, uint8_t v);
void tb_u32(tbuf *b, uint32_t v);
void tb_u64(tbuf *b, uint64_t v);
void tb_str(tbuf *b, const char *s);
void tb_pad(tbuf *b, size_t align);
void tb_zeros(tbuf *b, size_t n);
void tb_free(tbuf *b);
/* GGUF header start: magic, version, n_tensors, n_kv. */
void tb_header(tbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv);
/* A kv of type uint32 / string. */
void tb_kv_u32(tbuf *b, const char *key, uint32_t v);
void tb_kv_str(tbuf *b, const char *key, const char *v);
/* A tensor info with n_dims dims. */
void tb_tensor(tbuf *b, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type,
               uint64_t offset);

/* A temporary folder for a test; removed (recursively) by th_rmdir. */
char *th_mkdtemp(void);
void th_rmdir(const char *dir);
int th_write_file(const char *path, const void *p, size_t n);

#endif
