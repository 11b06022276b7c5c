/* Token text from the bare GGUF vocabulary, for models whose tokenizer
 * gguf_tokenizer_create cannot build (an unsupported pre-tokenizer): id ->
 * bytes through the tokenizer's own decoder (tok_piece_bytes), with the token
 * types as the file has them. Not a tokenizer. */
#include <stdlib.h>
#include <string.h>

#include "gguf/forward.h"
#include "tokenize/tokenize_internal.h"

int gguf_fwd_token_text(const gguf_file *meta, int32_t id, char *buf, size_t size)
{
    if (buf && size)
        buf[0] = 0;
    const gguf_value *toks;
    if (!meta || gguf_get_arr(meta, "tokenizer.ggml.tokens", &toks, NULL) ||
        toks->v.arr.type != GGUF_VALUE_STRING)
        return GGUF_E_NOT_FOUND;
    if (id < 0 || (uint64_t)id >= toks->v.arr.n || !buf || size == 0)
        return GGUF_E_INVALID;
    uint16_t attr = TOK_ATTR_NORMAL;
    const gguf_value *types;
    if (!gguf_get_arr(meta, "tokenizer.ggml.token_type", &types, NULL) &&
        (uint64_t)id < types->v.arr.n) {
        gguf_value tv = gguf_value_elem(types, (uint64_t)id);
        int64_t ty;
        if (!gguf_value_to_i64(&tv, &ty))
            attr = tok_attr_of_type(ty);
    }
    if (attr & TOK_ATTR_CONTROL)
        return 0; /* control tokens print as nothing */
    gguf_str model = {"llama", 5};
    gguf_get_str(meta, "tokenizer.ggml.model", &model, NULL);
    const gguf_tok_type type = gguf_str_eq(model, "gpt2")   ? GGUF_TOK_BPE
                               : gguf_str_eq(model, "bert") ? GGUF_TOK_WPM
                                                            : GGUF_TOK_SPM;
    const gguf_str s = toks->v.arr.strs[id];
    char local[256];
    char *piece = s.len <= sizeof local ? local : malloc(s.len);
    if (!piece)
        return GGUF_E_NOMEM;
    size_t n = tok_piece_bytes(type, attr, s, NULL, piece);
    if (n > size - 1)
        n = size - 1;
    memcpy(buf, piece, n);
    buf[n] = 0;
    if (piece != local)
        free(piece);
    return (int)n;
}

static int32_t get_id(const gguf_file *meta, const char *key)
{
    int64_t v;
    if (!meta || gguf_get_i64(meta, key, &v, NULL) || v < 0 || v > INT32_MAX)
        return -1;
    return (int32_t)v;
}

int32_t gguf_fwd_token_bos(const gguf_file *meta)
{
    return get_id(meta, "tokenizer.ggml.bos_token_id");
}

int32_t gguf_fwd_token_eos(const gguf_file *meta)
{
    return get_id(meta, "tokenizer.ggml.eos_token_id");
}
