/*
 * The vocabulary: tokenizer.ggml.* metadata read the way llama.cpp's
 * llama_vocab::impl::load reads it (defaults per model type, ids out of range
 * ignored), the text -> id table, and the entry points that dispatch to SPM,
 * BPE and WPM. See gguf/tokenize.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error_lib.h"
#include "tokenize/tokenize_internal.h"

/* ---- small shared helpers ---- */

uint64_t tok_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

int32_t tok_lookup(const gguf_tokenizer *t, const char *s, size_t n)
{
    for (uint64_t i = tok_hash(s, n) & t->mask;; i = (i + 1) & t->mask) {
        const uint32_t v = t->slots[i];
        if (!v)
            return -1;
        const gguf_str *e = &t->strs[v - 1];
        if (e->len == n && memcmp(e->data, s, n) == 0)
            return (int32_t)(v - 1);
    }
}

size_t tok_utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        const unsigned char c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint32_t min;
        if ((c & 0xE0) == 0xC0)
            n = 2, min = 0x80;
        else if ((c & 0xF0) == 0xE0)
            n = 3, min = 0x800;
        else if ((c & 0xF8) == 0xF0)
            n = 4, min = 0x10000;
        else
            return i;
        if (len - i < n)
            return i;
        uint32_t cp = c & (0xFF >> (n + 1));
        for (size_t k = 1; k < n; k++) {
            if ((p[i + k] & 0xC0) != 0x80)
                return i;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return i;
        i += n;
    }
    return i;
}

uint32_t tok_utf8_decode(const unsigned char *s, size_t *adv)
{
    const unsigned char c = s[0];
    if (c < 0x80) {
        *adv = 1;
        return c;
    }
    const size_t n = tok_utf8_len(c);
    uint32_t cp = c & (0xFF >> (n + 1));
    for (size_t k = 1; k < n; k++)
        cp = (cp << 6) | (s[k] & 0x3F);
    *adv = n;
    return cp;
}

size_t tok_utf8_encode(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2's bytes_to_unicode(): printable bytes stand for themselves, the 68
 * others get U+0100 and up in byte order. */
static bool printable_byte(unsigned b)
{
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_byte_to_cp(unsigned char b)
{
    if (printable_byte(b))
        return b;
    uint32_t n = 0;
    for (unsigned c = 0; c < b; c++)
        n += !printable_byte(c);
    return 256 + n;
}

int tok_cp_to_byte(uint32_t cp)
{
    if (cp < 256)
        return printable_byte(cp) ? (int)cp : -1;
    if (cp >= 256 + 68)
        return -1;
    uint32_t k = cp - 256;
    for (unsigned b = 0; b < 256; b++)
        if (!printable_byte(b) && k-- == 0)
            return (int)b;
    return -1;
}

int tok_ids_push(tok_ids *o, int32_t id)
{
    if (o->n == o->cap) {
        const int64_t cap = o->cap ? 2 * o->cap : 64;
        int32_t *v = realloc(o->v, (size_t)cap * sizeof *v);
        if (!v)
            return GGUF_E_NOMEM;
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = id;
    return 0;
}

/* ---- creation ---- */

/* An id from metadata: llama.cpp keeps its default when the key is absent or
 * the id is outside the vocabulary. */
static int32_t meta_id(const gguf_file *meta, const char *key, int32_t dflt, int64_t n_vocab)
{
    int64_t v;
    if (!gguf_get_i64(meta, key, &v, NULL) && v >= 0 && v < n_vocab)
        return (int32_t)v;
    return dflt >= 0 && dflt < n_vocab ? dflt : -1;
}

static void meta_bool(const gguf_file *meta, const char *key, bool *out)
{
    bool b;
    if (!gguf_get_bool(meta, key, &b, NULL))
        *out = b;
}

static int unsupported_pre(const char *path, gguf_str pre, gguf_error *err)
{
    char list[1536];
    size_t at = 0, n;
    const char *const *names = gguf_tokenizer_pre_names(&n);
    for (size_t i = 0; i < n && at + 32 < sizeof list; i++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", i ? ", " : "", names[i]);
    return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                     "%s: tokenizer.ggml.pre: '%.*s' is not supported (supported: %s)", path,
                     (int)(pre.len > 64 ? 64 : pre.len), pre.data, list);
}

uint16_t tok_attr_of_type(int64_t v)
{
    static const uint16_t attr_of[] = {0,
                                       TOK_ATTR_NORMAL,
                                       TOK_ATTR_UNKNOWN,
                                       TOK_ATTR_CONTROL,
                                       TOK_ATTR_USER_DEFINED,
                                       TOK_ATTR_UNUSED,
                                       TOK_ATTR_BYTE};
    return v >= 0 && v <= 6 ? attr_of[v] : 0; /* others: undefined */
}

static int read_types(gguf_tokenizer *t, const gguf_file *meta, gguf_error *err)
{
    const gguf_value *ty;
    for (int64_t i = 0; i < t->n_vocab; i++)
        t->attr[i] = TOK_ATTR_NORMAL;
    if (gguf_get_arr(meta, "tokenizer.ggml.token_type", &ty, NULL))
        return 0;
    if (ty->v.arr.n < (uint64_t)t->n_vocab)
        return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                         "%s: tokenizer.ggml.token_type: %llu types for %lld tokens", t->path,
                         (unsigned long long)ty->v.arr.n, (long long)t->n_vocab);
    for (int64_t i = 0; i < t->n_vocab; i++) {
        const gguf_value e = gguf_value_elem(ty, (uint64_t)i);
        int64_t v;
        if (gguf_value_to_i64(&e, &v))
            return gguf_fail(err, GGUF_E_WRONG_TYPE, GGUF_NO_OFFSET,
                             "%s: tokenizer.ggml.token_type: not integers", t->path);
        t->attr[i] = tok_attr_of_type(v);
    }
    return 0;
}

static int read_scores(gguf_tokenizer *t, const gguf_file *meta, gguf_error *err)
{
    const gguf_value *sc;
    if (gguf_get_arr(meta, "tokenizer.ggml.scores", &sc, NULL))
        return 0;
    if (sc->v.arr.n < (uint64_t)t->n_vocab)
        return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                         "%s: tokenizer.ggml.scores: %llu scores for %lld tokens", t->path,
                         (unsigned long long)sc->v.arr.n, (long long)t->n_vocab);
    for (int64_t i = 0; i < t->n_vocab; i++) {
        const gguf_value e = gguf_value_elem(sc, (uint64_t)i);
        double d;
        if (gguf_value_to_f64(&e, &d))
            return gguf_fail(err, GGUF_E_WRONG_TYPE, GGUF_NO_OFFSET,
                             "%s: tokenizer.ggml.scores: not numbers", t->path);
        t->scores[i] = (float)d;
    }
    return 0;
}

/* text -> id. A text given twice keeps its last id, as llama.cpp's map does;
 * empty texts are never found. */
static int build_index(gguf_tokenizer *t)
{
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)t->n_vocab)
        cap *= 2;
    t->mask = cap - 1;
    t->slots = calloc(cap, sizeof *t->slots);
    if (!t->slots)
        return GGUF_E_NOMEM;
    for (int64_t id = 0; id < t->n_vocab; id++) {
        const gguf_str *s = &t->strs[id];
        if (s->len > t->max_token_len)
            t->max_token_len = s->len;
        if (!s->len)
            continue;
        for (uint64_t i = tok_hash(s->data, s->len) & t->mask;; i = (i + 1) & t->mask) {
            const uint32_t v = t->slots[i];
            if (!v || (t->strs[v - 1].len == s->len &&
                       !memcmp(t->strs[v - 1].data, s->data, s->len))) {
                t->slots[i] = (uint32_t)(id + 1);
                break;
            }
        }
    }
    return 0;
}

static void spm_bytes(gguf_tokenizer *t)
{
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        const char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        t->byte_tok[b] = tok_lookup(t, name, 6);
        if (t->byte_tok[b] < 0) {
            const char c = (char)b; /* vocabularies without byte tokens */
            t->byte_tok[b] = tok_lookup(t, &c, 1);
        }
    }
}

int gguf_tokenizer_create_file(gguf_tokenizer **out, const gguf_file *meta, gguf_error *err)
{
    if (!out || !meta)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "gguf_tokenizer_create: NULL argument");
    *out = NULL;
    const char *path = gguf_file_path(meta);
    gguf_str kind = {"llama", 5};
    int rc = gguf_get_str(meta, "tokenizer.ggml.model", &kind, NULL);
    if (rc == GGUF_E_WRONG_TYPE)
        return gguf_fail(err, rc, GGUF_NO_OFFSET, "%s: tokenizer.ggml.model: not a string", path);
    gguf_tok_type type;
    if (gguf_str_eq(kind, "llama"))
        type = GGUF_TOK_SPM;
    else if (gguf_str_eq(kind, "gpt2"))
        type = GGUF_TOK_BPE;
    else if (gguf_str_eq(kind, "bert"))
        type = GGUF_TOK_WPM;
    else
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "%s: tokenizer.ggml.model: '%.*s' is not supported (supported: llama, "
                         "gpt2, bert)",
                         path, (int)(kind.len > 64 ? 64 : kind.len), kind.data);
    gguf_str pre = {"default", 7};
    const bool have_pre = gguf_get_str(meta, "tokenizer.ggml.pre", &pre, NULL) == 0;
    const tok_family *fam = NULL;
    if (type == GGUF_TOK_BPE) {
        fam = &gguf_tok_family_default; /* llama.cpp warns and uses 'default' */
        if (have_pre) {
            fam = NULL;
            for (size_t i = 0; i < gguf_tok_pre_name_count && !fam; i++)
                if (gguf_str_eq(pre, gguf_tok_pre_names[i].name))
                    fam = gguf_tok_pre_names[i].fam;
            if (!fam)
                return unsupported_pre(path, pre, err);
        }
    }

    const gguf_value *toks;
    rc = gguf_get_arr(meta, "tokenizer.ggml.tokens", &toks, err);
    if (rc)
        return rc;
    if (toks->v.arr.type != GGUF_VALUE_STRING)
        return gguf_fail(err, GGUF_E_WRONG_TYPE, GGUF_NO_OFFSET,
                         "%s: tokenizer.ggml.tokens: not an array of strings", path);
    const uint64_t nv = toks->v.arr.n;
    if (nv == 0)
        return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                         "%s: tokenizer.ggml.tokens: empty", path);
    if (nv > (1u << 30))
        return gguf_fail(err, GGUF_E_LIMIT, GGUF_NO_OFFSET,
                         "%s: tokenizer.ggml.tokens: %llu tokens (at most 2^30)", path,
                         (unsigned long long)nv);

    gguf_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: tokenizer", path);
    t->type = type;
    t->fam = fam;
    t->path = path;
    snprintf(t->model, sizeof t->model, "%.*s", (int)kind.len, kind.data);
    snprintf(t->pre, sizeof t->pre, "%.*s", (int)(pre.len > 63 ? 63 : pre.len), pre.data);
    t->n_vocab = (int64_t)nv;
    t->strs = toks->v.arr.strs;
    t->attr = calloc(nv, sizeof *t->attr);
    t->scores = calloc(nv, sizeof *t->scores);
    if (!t->attr || !t->scores || build_index(t)) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: tokenizer", path);
        goto fail;
    }
    if ((rc = read_types(t, meta, err)) || (rc = read_scores(t, meta, err)))
        goto fail;

    /* llama.cpp's defaults per model type, then the metadata. */
    int32_t bos = -1, eos = -1, unk = -1, sep = -1;
    switch (type) {
    case GGUF_TOK_SPM:
        bos = 1, eos = 2, unk = 0;
        t->add_space_prefix = true;
        t->add_bos = true;
        break;
    case GGUF_TOK_WPM:
        bos = 101, unk = 100, sep = 102;
        t->add_bos = true;
        t->add_sep = true;
        break;
    case GGUF_TOK_BPE:
        bos = fam->no_bos ? -1 : 11, eos = 11;
        t->add_bos = fam->add_bos;
        break;
    }
    t->bos = meta_id(meta, "tokenizer.ggml.bos_token_id", bos, t->n_vocab);
    t->eos = meta_id(meta, "tokenizer.ggml.eos_token_id", eos, t->n_vocab);
    t->unk = meta_id(meta, "tokenizer.ggml.unknown_token_id", unk, t->n_vocab);
    t->sep = meta_id(meta, "tokenizer.ggml.seperator_token_id", sep, t->n_vocab);
    meta_bool(meta, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix);
    meta_bool(meta, "tokenizer.ggml.add_bos_token", &t->add_bos);
    meta_bool(meta, "tokenizer.ggml.add_eos_token", &t->add_eos);
    meta_bool(meta, "tokenizer.ggml.add_sep_token", &t->add_sep);
    if (type == GGUF_TOK_WPM) {
        /* llama.cpp's WPM adds [CLS] and [SEP] whenever specials are added,
         * whatever add_bos_token and add_sep_token say */
        t->add_bos = true;
        t->add_eos = true;
    }

    if ((rc = tok_special_setup(t, meta, err)))
        goto fail;
    switch (type) {
    case GGUF_TOK_SPM: spm_bytes(t); break;
    case GGUF_TOK_BPE: rc = tok_bpe_setup(t, meta, err); break;
    case GGUF_TOK_WPM: rc = tok_wpm_setup(t, err); break;
    }
    if (rc || (rc = tok_pieces_setup(t, err)))
        goto fail;
    *out = t;
    return 0;
fail:
    gguf_tokenizer_free(t);
    return rc;
}

int gguf_tokenizer_create(gguf_tokenizer **out, const gguf_set *model, gguf_error *err)
{
    if (!out || !model)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "gguf_tokenizer_create: NULL argument");
    return gguf_tokenizer_create_file(out, gguf_set_meta(model), err);
}

void gguf_tokenizer_free(gguf_tokenizer *tok)
{
    if (!tok)
        return;
    free(tok->slots);
    free(tok->attr);
    free(tok->scores);
    free(tok->extra);
    free(tok->extra_buf);
    free(tok->sym_slots);
    free(tok->merges);
    for (int i = 0; i < tok->n_re; i++)
        tok_regex_free(tok->re[i]);
    tok_regex_free(tok->wpm_re);
    free(tok->special);
    free(tok->piece_buf);
    free(tok->piece_off);
    free(tok);
}

/* ---- tokenize ---- */

void gguf_tokenize_opts_init(gguf_tokenize_opts *opts)
{
    if (!opts)
        return;
    opts->version = GGUF_TOKENIZE_OPTS_VERSION;
    opts->add_bos = GGUF_TOK_AUTO;
    opts->add_eos = GGUF_TOK_AUTO;
    opts->parse_special = true;
}

int gguf_tokenize_text(const gguf_tokenizer *tok, const char *text, size_t len,
                       const gguf_tokenize_opts *opts, int32_t **out_ids, int64_t *n,
                       gguf_error *err)
{
    if (opts && opts->version > GGUF_TOKENIZE_OPTS_VERSION)
        return gguf_opts_version_fail(opts->version, GGUF_TOKENIZE_OPTS_VERSION, "gguf_tokenize_opts",
                                      err);
    if (!tok || (!text && len) || !out_ids || !n)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_tokenize: NULL argument");
    *out_ids = NULL;
    *n = 0;
    gguf_tokenize_opts o;
    gguf_tokenize_opts_init(&o);
    if (opts)
        o = *opts;
    const bool add_bos = o.add_bos == GGUF_TOK_AUTO ? tok->add_bos : o.add_bos != 0;
    const bool add_eos = o.add_eos == GGUF_TOK_AUTO ? tok->add_eos : o.add_eos != 0;
    const int32_t closing = tok->type == GGUF_TOK_WPM ? tok->sep : tok->eos;
    if (add_bos && tok->bos < 0)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "gguf_tokenize: BOS requested but %s has no BOS token", tok->path);
    if (add_eos && closing < 0)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "gguf_tokenize: %s requested but %s has no %s token",
                         tok->type == GGUF_TOK_WPM ? "SEP" : "EOS", tok->path,
                         tok->type == GGUF_TOK_WPM ? "separator" : "EOS");
    if (len > (1u << 30))
        return gguf_fail(err, GGUF_E_LIMIT, GGUF_NO_OFFSET,
                         "gguf_tokenize: %zu bytes of text (at most 1 GiB)", len);
    const size_t valid = tok_utf8_valid(text, len);
    if (valid != len)
        return gguf_fail(err, GGUF_E_BAD_UTF8, GGUF_NO_OFFSET,
                         "gguf_tokenize: text: invalid UTF-8 at byte %zu (0x%02X)", valid,
                         (unsigned char)text[valid]);

    tok_ids o_ids = {0};
    tok_frag *frags = NULL;
    size_t n_frags = 0;
    tok_matcher *m = NULL;
    tok_bpe_state *st = NULL;
    int rc = tok_ids_push(&o_ids, 0); /* a non-NULL array even for no ids */
    o_ids.n = 0;
    if (!rc && add_bos)
        rc = tok_ids_push(&o_ids, tok->bos);
    if (!rc && len)
        rc = tok_special_partition(tok, text, len, o.parse_special, &frags, &n_frags);
    if (!rc && tok->type != GGUF_TOK_SPM && n_frags)
        rc = tok_matcher_create(&m);
    if (!rc && tok->type == GGUF_TOK_BPE && n_frags)
        rc = tok_bpe_state_create(&st);
    if (rc) {
        gguf_fail(err, rc, GGUF_NO_OFFSET, "gguf_tokenize: out of memory");
        goto done;
    }
    bool prev_special = true; /* SPM: " " before text at the start and after a special */
    for (size_t i = 0; i < n_frags && !rc; i++) {
        const tok_frag *f = &frags[i];
        if (f->id >= 0) {
            if ((rc = tok_ids_push(&o_ids, f->id)))
                gguf_fail(err, rc, GGUF_NO_OFFSET, "gguf_tokenize: out of memory");
            prev_special = true;
            continue;
        }
        switch (tok->type) {
        case GGUF_TOK_SPM:
            rc = tok_spm_encode(tok, text + f->off, f->len, tok->add_space_prefix && prev_special,
                                &o_ids, err);
            break;
        case GGUF_TOK_BPE: rc = tok_bpe_encode(tok, st, m, text + f->off, f->len, &o_ids, err); break;
        case GGUF_TOK_WPM: rc = tok_wpm_encode(tok, m, text + f->off, f->len, &o_ids, err); break;
        }
        prev_special = false;
    }
    if (!rc && add_eos && (rc = tok_ids_push(&o_ids, closing)))
        gguf_fail(err, rc, GGUF_NO_OFFSET, "gguf_tokenize: out of memory");
done:
    free(frags);
    tok_matcher_free(m);
    tok_bpe_state_free(st);
    if (rc) {
        free(o_ids.v);
        return rc;
    }
    *out_ids = o_ids.v;
    *n = o_ids.n;
    return 0;
}

int gguf_tokenize(const gguf_tokenizer *tok, const char *text, size_t len, bool add_bos,
                  int32_t **out_ids, int64_t *n, gguf_error *err)
{
    gguf_tokenize_opts o;
    gguf_tokenize_opts_init(&o);
    o.add_bos = add_bos;
    o.add_eos = 0;
    return gguf_tokenize_text(tok, text, len, &o, out_ids, n, err);
}

/* ---- getters ---- */

gguf_tok_type gguf_tokenizer_type(const gguf_tokenizer *tok)
{
    return tok ? tok->type : (gguf_tok_type)0;
}
const char *gguf_tokenizer_model(const gguf_tokenizer *tok) { return tok ? tok->model : ""; }
const char *gguf_tokenizer_pre(const gguf_tokenizer *tok) { return tok ? tok->pre : ""; }
int64_t gguf_tokenizer_n_vocab(const gguf_tokenizer *tok) { return tok ? tok->n_vocab : 0; }
int32_t gguf_tokenizer_bos(const gguf_tokenizer *tok) { return tok ? tok->bos : -1; }
int32_t gguf_tokenizer_eos(const gguf_tokenizer *tok) { return tok ? tok->eos : -1; }
int32_t gguf_tokenizer_unk(const gguf_tokenizer *tok) { return tok ? tok->unk : -1; }
int32_t gguf_tokenizer_sep(const gguf_tokenizer *tok) { return tok ? tok->sep : -1; }
bool gguf_tokenizer_add_bos(const gguf_tokenizer *tok) { return tok && tok->add_bos; }
bool gguf_tokenizer_add_eos(const gguf_tokenizer *tok) { return tok && tok->add_eos; }

int gguf_tokenizer_token_type(const gguf_tokenizer *tok, int32_t id)
{
    if (!tok || id < 0 || id >= tok->n_vocab)
        return -1;
    const uint16_t a = tok->attr[id];
    if (a & TOK_ATTR_UNKNOWN)
        return GGUF_TOKEN_UNKNOWN;
    if (a & TOK_ATTR_CONTROL)
        return GGUF_TOKEN_CONTROL;
    if (a & TOK_ATTR_USER_DEFINED)
        return GGUF_TOKEN_USER_DEFINED;
    if (a & TOK_ATTR_UNUSED)
        return GGUF_TOKEN_UNUSED;
    if (a & TOK_ATTR_BYTE)
        return GGUF_TOKEN_BYTE;
    if (a & TOK_ATTR_NORMAL)
        return GGUF_TOKEN_NORMAL;
    return GGUF_TOKEN_UNDEFINED;
}
