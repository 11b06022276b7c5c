/*
 * --reference: GGUF tensors against the HF safetensors they were made from.
 *
 * The reference is read through libgguf's safetensors module (any dtype,
 * block-scaled FP8, NVFP4), dequantized a run of rows at a time. HF names and
 * llama's Q/K row permutation come from the model module (gguf/model.h:
 * gguf_role_parse, gguf_role_hf_name, gguf_llama_qk_row_to_hf); architectures
 * it does not model but that name tensors as llama does (mistral, granite) use
 * llama's table (gguf_arch_naming_from_name).
 *
 * Layout facts used:
 *   - numpy shape = reversed ggml ne, so GGUF row r (ne[0] elements) is HF
 *     row r of the same tensor, element for element;
 *   - llama's converter permutes the rows of attn_q / attn_k per head:
 *       GGUF row h*hd + 2i + j  holds  HF row h*hd + j*hd/2 + i;
 *   - stacked experts (ffn_*_exps, ne [a, b, n_expert]) are HF's per-expert
 *     tensors mlp.experts.E.*_proj back to back;
 *   - MLA: HF kv_b_proj [n_head*(nope+v), kv_lora] holds per head nope k
 *     rows then v rows; GGUF attn_k_b (ne [nope, kv_lora, n_head]) is the k
 *     part transposed per head, attn_v_b (ne [kv_lora, v, n_head]) the v part.
 *
 * Besides the global SNR, every comparison is cut into units (dequant_verify.h):
 * the blocks of the reference's scale grid, and its rows. On the reference's
 * coordinates (HF row, HF column; a row r of matrix m of a stack is m * rows + r):
 *
 *     FP8 128 x 128           NVFP4 1 x 16             plain: 1 x 32
 *     +------+------+--       +-+-+-+-+-+-+--          +--+--+--+--
 *     |      |      |         +-+-+-+-+-+-+--          +--+--+--+--
 *     | 128  |      |         +-+-+-+-+-+-+--          +--+--+--+--
 *     +------+------+--        16 cols, 1 row           32 cols, 1 row
 *
 * A grid of more than one row per block is held whole (rows may come in any
 * order: llama's Q/K permutation); a one-row grid is scored row by row.
 */
#include "dequant_verify.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/model.h"
#include "gguf/types.h"

/* Minimum SNR, in dB, a correct tensor of each type reaches against its
 * float source. Quantization noise of b bits gives roughly 6b - 7 dB on
 * Gaussian weights; these floors sit well under that, and well over what a
 * transposed or reordered tensor gives (about -3 dB: the error is as large as
 * both signals together). */
double dv_expect_snr_db(uint32_t type)
{
    switch (type) {
    case GGUF_TYPE_F32:
    case GGUF_TYPE_F64: return 100.0;
    case GGUF_TYPE_F16: return 55.0;
    case GGUF_TYPE_BF16: return 40.0;
    case GGUF_TYPE_Q8_0:
    case GGUF_TYPE_Q8_1:
    case GGUF_TYPE_Q8_K: return 30.0;
    case GGUF_TYPE_Q6_K: return 24.0;
    case GGUF_TYPE_Q5_0:
    case GGUF_TYPE_Q5_1:
    case GGUF_TYPE_Q5_K: return 18.0;
    case GGUF_TYPE_Q4_0:
    case GGUF_TYPE_Q4_1:
    case GGUF_TYPE_Q4_K:
    case GGUF_TYPE_IQ4_NL:
    case GGUF_TYPE_IQ4_XS:
    case GGUF_TYPE_MXFP4:
    case GGUF_TYPE_NVFP4: return 12.0;
    case GGUF_TYPE_Q3_K:
    case GGUF_TYPE_IQ3_XXS:
    case GGUF_TYPE_IQ3_S: return 7.0;
    case GGUF_TYPE_Q2_K:
    case GGUF_TYPE_IQ2_XXS:
    case GGUF_TYPE_IQ2_XS:
    case GGUF_TYPE_IQ2_S: return 3.0;
    default: return 1.0; /* 1-bit and ternary types, integers */
    }
}

/* The floor a reference stored in a lossy format allows on its own: its own
 * quantization noise (E4M3 keeps 4 significant bits: about 31 dB on Gaussian
 * weights; NVFP4's E2M1 2 bits with a per-16 scale: about 20 dB). */
static double ref_floor_db(const gguf_st_weight *w)
{
    switch (w->format) {
    case GGUF_ST_FMT_FP8_SCALED: return 20.0;
    case GGUF_ST_FMT_NVFP4:
    case GGUF_ST_FMT_NVFP4_CT: return 10.0;
    default: break;
    }
    switch (w->data->dtype) {
    case GGUF_ST_F32:
    case GGUF_ST_F64: return 100.0;
    case GGUF_ST_F16: return 55.0;
    case GGUF_ST_BF16: return 40.0;
    case GGUF_ST_F8_E4M3:
    case GGUF_ST_F8_E5M2: return 20.0;
    default: return 1.0;
    }
}

void dv_model_info_read(dv_model_info *mi, const gguf_set *set)
{
    memset(mi, 0, sizeof *mi);
    const gguf_file *f = gguf_set_meta(set);
    gguf_str a;
    if (gguf_get_str(f, "general.architecture", &a, NULL) == 0)
        snprintf(mi->arch, sizeof mi->arch, "%.*s", (int)(a.len < 63 ? a.len : 63), a.data);
    char key[128];
    snprintf(key, sizeof key, "%s.attention.head_count", mi->arch);
    int64_t v;
    if (gguf_get_i64(f, key, &v, NULL) == 0)
        mi->n_head = v;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", mi->arch);
    mi->n_head_kv = gguf_get_i64(f, key, &v, NULL) == 0 ? v : mi->n_head;
}

/* ---- names ---- */

/* The model module's HF name for a tensor, with "*" replaced by the expert
 * index when expert >= 0. Returns 0, or -1 when the module has none. */
static int map_name(const dv_model_info *mi, const char *gguf, int64_t expert, char *out,
                    size_t size, int *is_exps, int *is_llama_qk)
{
    const gguf_arch arch = gguf_arch_naming_from_name(mi->arch);
    gguf_role role;
    int64_t layer;
    char name[256];
    const char *note = NULL;
    if (arch == GGUF_ARCH_UNKNOWN || gguf_role_parse(arch, gguf, &role, &layer) != 0 ||
        gguf_role_hf_name(arch, role, layer, name, sizeof name, &note) != 0)
        return -1;
    *is_exps = role == GGUF_ROLE_FFN_GATE_EXPS || role == GGUF_ROLE_FFN_UP_EXPS ||
               role == GGUF_ROLE_FFN_DOWN_EXPS;
    *is_llama_qk = arch == GGUF_ARCH_LLAMA && (role == GGUF_ROLE_ATTN_Q || role == GGUF_ROLE_ATTN_K);
    const char *star = strchr(name, '*');
    if (star && expert >= 0)
        snprintf(out, size, "%.*s%lld%s", (int)(star - name), name, (long long)expert, star + 1);
    else
        snprintf(out, size, "%s", name);
    return 0;
}

bool dv_ref_is_kv_b_part(const char *gguf_name)
{
    const char *p = strstr(gguf_name, ".attn_k_b.weight");
    const char *q = strstr(gguf_name, ".attn_v_b.weight");
    return (p && !p[16]) || (q && !q[16]);
}

/* numpy shape of a GGUF tensor: reversed ne over its n_dims (at least 1) */
static int np_shape(const gguf_tensor *t, int64_t *shape)
{
    const int nd = t->n_dims ? (int)t->n_dims : 1;
    for (int i = 0; i < nd; i++)
        shape[i] = t->ne[nd - 1 - i];
    return nd;
}

static int same_shape(const gguf_st_weight *s, const int64_t *shape, int nd)
{
    /* trailing/leading 1s aside, shapes must match exactly */
    int64_t a[GGUF_ST_MAX_DIMS], b[8];
    int na = 0, nb = 0;
    for (int i = 0; i < s->n_dims; i++)
        if (s->shape[i] != 1)
            a[na++] = s->shape[i];
    for (int i = 0; i < nd; i++)
        if (shape[i] != 1)
            b[nb++] = shape[i];
    if (na != nb)
        return 0;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

static void shape_str(char *out, size_t size, const int64_t *shape, int nd)
{
    int k = snprintf(out, size, "[");
    for (int i = 0; i < nd && (size_t)k < size; i++)
        k += snprintf(out + k, size - (size_t)k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if ((size_t)k < size)
        snprintf(out + k, size - (size_t)k, "]");
}

/* Find a reference weight; status "missing" / "skipped" when it cannot be used. */
static int find_ref(dv_ref_result *r, const gguf_st_set *st, const char *name, gguf_st_weight *w)
{
    gguf_error err;
    const int rc = gguf_st_weight_find(st, name, w, &err);
    if (rc == 0) {
        snprintf(r->ref_dtype, sizeof r->ref_dtype, "%s", gguf_st_dtype_name(w->data->dtype));
        snprintf(r->ref_format, sizeof r->ref_format, "%s", gguf_st_format_name(w->format));
        /* a lossy reference cannot vouch for more than its own precision */
        const double f = ref_floor_db(w);
        if (f < r->expect_snr_db)
            r->expect_snr_db = f;
        return 0;
    }
    if (rc == GGUF_E_NOT_FOUND && !gguf_st_set_tensor_find(st, name) &&
        !strstr(err.message, "_scale") && !strstr(err.message, "_packed")) {
        snprintf(r->status, sizeof r->status, "missing");
        snprintf(r->note, sizeof r->note, "no %s in the reference", name);
    } else { /* present but unusable: a scale missing or of the wrong shape */
        snprintf(r->status, sizeof r->status, "shape");
        snprintf(r->note, sizeof r->note, "%s", err.message);
    }
    return -1;
}

/* ---- the units: blocks of the reference's grid, and rows ---- */

/* Units of more than one row are held whole, up to this many (40 MiB). */
#define DV_GRID_MAX_HELD ((int64_t)1 << 20)

static void grid_free(dv_grid *g)
{
    free(g->acc);
    free(g->wpk);
    dv_units_free(&g->blocks);
    dv_units_free(&g->rows);
    memset(g, 0, sizeof *g);
}

/* The unit shape a reference weight's format defines: its scale block, or
 * 1 x DV_PLAIN_BLOCK for a plain dtype. */
static void grid_shape(const gguf_st_weight *w, int64_t *br, int64_t *bc)
{
    *br = 1;
    *bc = DV_PLAIN_BLOCK;
    if (w->format != GGUF_ST_FMT_PLAIN && w->block_rows > 0 && w->block_cols > 0) {
        *br = w->block_rows;
        *bc = w->block_cols;
    }
}

/* Set up the units of n_mat matrices of mat_rows x cols, compared with a GGUF
 * of that type. Returns 0, or -1 when out of memory (then no units). */
static int grid_begin(dv_grid *g, const gguf_st_weight *w, int64_t mat_rows, int64_t n_mat,
                      int64_t cols, uint32_t type)
{
    memset(g, 0, sizeof *g);
    dv_units_init(&g->blocks);
    dv_units_init(&g->rows);
    if (cols < 1 || cols > INT32_MAX || mat_rows < 1 || n_mat < 1)
        return -1;
    grid_shape(w, &g->br, &g->bc);
    if (g->br > mat_rows)
        g->br = mat_rows;
    if (g->bc > cols)
        g->bc = cols;
    g->mat_rows = mat_rows;
    g->cols = cols;
    g->n_mat = n_mat;
    if (g->br > INT32_MAX / g->bc) { /* one scale for a whole matrix: rows say it all */
        g->br = 1;
        g->bc = cols;
    }
    g->nbr = (mat_rows + g->br - 1) / g->br;
    g->nbc = (cols + g->bc - 1) / g->bc;
    const gguf_type_info *ti = gguf_type_get(type);
    g->win = ti && ti->block_size > 1 ? DV_PEAK_WINDOW : 1;
    const int64_t held = g->br > 1 ? n_mat * g->nbr * g->nbc : g->nbc;
    g->blocks_on = held <= DV_GRID_MAX_HELD;
    g->acc = calloc((size_t)(g->blocks_on ? held : 1), sizeof *g->acc);
    g->wpk = malloc(sizeof(double) * (size_t)((cols + g->win - 1) / g->win));
    if (!g->acc || !g->wpk) {
        grid_free(g);
        return -1;
    }
    return 0;
}

/* peak^2 of each window of a row: the smaller of the two sides' largest
 * magnitude, so that a doubled block on either side does not raise it. */
static void grid_peaks(dv_grid *g, const float *x, const float *r)
{
    for (int64_t w0 = 0, k = 0; w0 < g->cols; w0 += g->win, k++) {
        const int64_t w1 = w0 + g->win < g->cols ? w0 + g->win : g->cols;
        float ax = 0, ar = 0;
        for (int64_t c = w0; c < w1; c++) { /* not fmaxf: a libm call without -ffast-math */
            const float a = fabsf(x[c]), e = fabsf(r[c]);
            ax = a > ax ? a : ax;
            ar = e > ar ? e : ar;
        }
        const double p = ax < ar ? ax : ar;
        g->wpk[k] = p * p;
    }
}

/* Error and signal energy of n elements, four sums at a time (the additions
 * do not wait on each other). */
static void seg_sums(const float *x, const float *r, int64_t n, double *err, double *sig)
{
    double e[4] = {0}, s[4] = {0};
    int64_t c = 0;
    for (; c + 4 <= n; c += 4)
        for (int k = 0; k < 4; k++) {
            const double b = r[c + k], d = (double)x[c + k] - b;
            e[k] += d * d;
            s[k] += b * b;
        }
    for (; c < n; c++) {
        const double b = r[c], d = (double)x[c] - b;
        e[0] += d * d;
        s[0] += b * b;
    }
    *err = (e[0] + e[1]) + (e[2] + e[3]);
    *sig = (s[0] + s[1]) + (s[2] + s[3]);
}

/* Columns [c0, c1) of one row: their sums, added to a unit (may be NULL) and to the row. */
static void seg_add(dv_unit *u, dv_unit *row, const dv_grid *g, const float *x, const float *r,
                    int64_t c0, int64_t c1)
{
    double e, s, p = 0;
    seg_sums(x + c0, r + c0, c1 - c0, &e, &s);
    for (int64_t c = c0; c < c1;) { /* peaks a window at a time */
        const int64_t k = c / g->win, end = (k + 1) * g->win < c1 ? (k + 1) * g->win : c1;
        p += g->wpk[k] * (double)(end - c);
        c = end;
    }
    row->err += e;
    row->sig += s;
    row->peak += p;
    row->n += (uint32_t)(c1 - c0);
    if (u) {
        u->err += e;
        u->sig += s;
        u->peak += p;
        u->n += (uint32_t)(c1 - c0);
    }
}

/* One row of the reference's coordinates: flat = matrix * mat_rows + row. */
static void grid_row(dv_grid *g, int64_t flat, const float *x, const float *r)
{
    grid_peaks(g, x, r);
    dv_unit row = {.row = flat};
    dv_unit *line = NULL;
    if (g->blocks_on) {
        const int64_t mat = flat / g->mat_rows, brow = (flat % g->mat_rows) / g->br;
        line = g->br > 1 ? g->acc + (mat * g->nbr + brow) * g->nbc : g->acc;
    }
    for (int64_t b = 0; b < g->nbc; b++) {
        const int64_t c0 = b * g->bc, c1 = c0 + g->bc < g->cols ? c0 + g->bc : g->cols;
        if (line && g->br == 1)
            line[b] = (dv_unit){.row = flat, .col = (int32_t)c0};
        seg_add(line ? &line[b] : NULL, &row, g, x, r, c0, c1);
        if (line && g->br == 1)
            dv_units_add(&g->blocks, &line[b]);
    }
    dv_units_add(&g->rows, &row);
}

static void grid_report(dv_unit_report *rep, dv_units *u, const dv_grid *g, int64_t br,
                        int64_t bc, bool experts)
{
    dv_units_finish(u);
    memset(rep, 0, sizeof *rep);
    rep->have = !u->oom && u->count > 0;
    rep->unit_rows = br;
    rep->unit_cols = bc;
    rep->mat_rows = g->mat_rows;
    rep->mat_cols = g->cols;
    rep->experts = experts;
    rep->count = u->count;
    rep->flagged = u->flagged;
    rep->from_first = u->from_first;
    rep->median_snr_db = u->median_snr_db;
    rep->worst = u->worst;
    rep->worst_excess_db = u->worst_excess > 0 ? 10.0 * log10(u->worst_excess) : -INFINITY;
}

/* Score the held grid, fill the result's block and row reports, free the grid. */
static void grid_end(dv_grid *g, dv_ref_result *r, bool experts)
{
    if (!g->acc)
        return;
    if (g->blocks_on && g->br > 1) {
        for (int64_t m = 0; m < g->n_mat; m++)
            for (int64_t br = 0; br < g->nbr; br++)
                for (int64_t b = 0; b < g->nbc; b++) {
                    dv_unit *u = &g->acc[(m * g->nbr + br) * g->nbc + b];
                    u->row = m * g->mat_rows + br * g->br;
                    u->col = (int32_t)(b * g->bc);
                    if (u->n)
                        dv_units_add(&g->blocks, u);
                }
    }
    if (g->blocks_on)
        grid_report(&r->blocks, &g->blocks, g, g->br, g->bc, experts);
    grid_report(&r->rows, &g->rows, g, 1, g->cols, experts);
    grid_free(g);
}

void dv_ref_map_free(dv_ref_map *m)
{
    free(m->experts);
    free(m->buf);
    grid_free(&m->grid);
    memset(m, 0, sizeof *m);
}

void dv_ref_begin(dv_ref_result *r, dv_ref_map *m, const dv_model_info *mi, const gguf_st_set *st,
                  const gguf_tensor *t)
{
    memset(r, 0, sizeof *r);
    memset(m, 0, sizeof *m);
    r->expect_snr_db = dv_expect_snr_db(t->type);
    int is_exps, is_llama_qk;
    if (map_name(mi, t->name, 0, r->hf_name, sizeof r->hf_name, &is_exps, &is_llama_qk) != 0) {
        snprintf(r->status, sizeof r->status, "skipped");
        snprintf(r->note, sizeof r->note, "no HF name known for this tensor");
        return;
    }
    int64_t shape[4];
    const int nd = np_shape(t, shape);
    char want[96], have[96];
    if (is_exps) {
        /* [n_expert, a, b]: one HF tensor [a, b] per expert */
        if (nd != 3 || shape[0] < 1) {
            snprintf(r->status, sizeof r->status, "skipped");
            snprintf(r->note, sizeof r->note, "unexpected expert tensor rank");
            return;
        }
        m->experts = calloc((size_t)shape[0], sizeof *m->experts);
        if (!m->experts) {
            snprintf(r->status, sizeof r->status, "skipped");
            snprintf(r->note, sizeof r->note, "out of memory");
            return;
        }
        m->n_experts = shape[0];
        for (int64_t e = 0; e < shape[0]; e++) {
            char name[256];
            map_name(mi, t->name, e, name, sizeof name, &is_exps, &is_llama_qk);
            if (find_ref(r, st, name, &m->experts[e]) != 0) {
                dv_ref_map_free(m);
                return;
            }
            if (!same_shape(&m->experts[e], shape + 1, 2) || m->experts[e].cols != shape[2]) {
                shape_str(want, sizeof want, shape + 1, 2);
                shape_str(have, sizeof have, m->experts[e].shape, m->experts[e].n_dims);
                snprintf(r->status, sizeof r->status, "shape");
                snprintf(r->note, sizeof r->note, "%s is %s, expected %s", name, have, want);
                dv_ref_map_free(m);
                return;
            }
        }
        m->kind = 3;
        map_name(mi, t->name, -1, r->hf_name, sizeof r->hf_name, &is_exps, &is_llama_qk);
        grid_begin(&m->grid, &m->experts[0], shape[1], shape[0], t->ne[0], t->type);
    } else {
        if (find_ref(r, st, r->hf_name, &m->src) != 0)
            return;
        if (!same_shape(&m->src, shape, nd) ||
            (m->src.cols != t->ne[0] && m->src.format != GGUF_ST_FMT_PLAIN)) {
            shape_str(want, sizeof want, shape, nd);
            shape_str(have, sizeof have, m->src.shape, m->src.n_dims);
            snprintf(r->status, sizeof r->status, "shape");
            snprintf(r->note, sizeof r->note, "reference is %s, GGUF (numpy order) %s", have, want);
            return;
        }
        m->kind = 1;
        const size_t n = strlen(t->name);
        const int q = n > 14 && !strcmp(t->name + n - 14, ".attn_q.weight");
        if (is_llama_qk && nd == 2) {
            const int64_t heads = q ? mi->n_head : mi->n_head_kv;
            if (heads > 0 && shape[0] % heads == 0 && (shape[0] / heads) % 2 == 0) {
                m->kind = 2;
                m->head_dim = shape[0] / heads;
                snprintf(r->note, sizeof r->note,
                         "rows un-permuted per head (llama converter's RoPE permutation)");
            }
        }
        /* a stack of matrices in one reference tensor: each has its own grid */
        const int64_t ne0 = t->ne[0] > 0 ? t->ne[0] : 1, rows = t->n_elements / ne0;
        int64_t per = rows;
        if (m->src.format != GGUF_ST_FMT_PLAIN && m->src.mat_rows > 0 && rows % m->src.mat_rows == 0)
            per = m->src.mat_rows;
        grid_begin(&m->grid, &m->src, per, rows / per, ne0, t->type);
    }
    r->compared = true;
}

/* Reference elements for GGUF rows [row0, row0 + n) (each ne0 wide) into m->buf. */
static int ref_rows(dv_ref_map *m, const gguf_tensor *t, int64_t row0, int64_t n)
{
    const int64_t ne0 = t->ne[0] > 0 ? t->ne[0] : 1;
    const size_t need = (size_t)(n * ne0);
    if (need > m->buf_n) {
        float *b = realloc(m->buf, sizeof(float) * need);
        if (!b)
            return -1;
        m->buf = b;
        m->buf_n = need;
    }
    gguf_error err;
    if (m->kind == 1) {
        if (m->src.cols == ne0)
            return gguf_st_weight_rows(&m->src, row0, n, m->buf, &err);
        /* a plain reference whose last dimension differs only by 1s: element order */
        return gguf_st_tensor_to_f32(m->src.data, row0 * ne0, n * ne0, m->buf, &err);
    }
    for (int64_t i = 0; i < n;) {
        const int64_t row = row0 + i;
        if (m->kind == 2) { /* one row at a time: the permutation scatters them */
            const int64_t hf = gguf_llama_qk_row_to_hf(row, m->head_dim);
            if (gguf_st_weight_rows(&m->src, hf, 1, m->buf + i * ne0, &err) != 0)
                return -1;
            i++;
            continue;
        }
        /* experts: a run of rows inside one expert */
        const int64_t per = t->ne[1];
        const int64_t e = row / per, r = row % per;
        int64_t run = per - r;
        if (run > n - i)
            run = n - i;
        if (e >= m->n_experts ||
            gguf_st_weight_rows(&m->experts[e], r, run, m->buf + i * ne0, &err) != 0)
            return -1;
        i += run;
    }
    return 0;
}

void dv_ref_rows(dv_ref_result *r, dv_ref_map *m, const gguf_tensor *t, const float *x,
                 int64_t row0, int64_t n_rows)
{
    if (!r->compared)
        return;
    if (ref_rows(m, t, row0, n_rows) != 0) {
        r->compared = false;
        snprintf(r->status, sizeof r->status, "skipped");
        snprintf(r->note, sizeof r->note, "cannot read the reference rows (out of memory)");
        return;
    }
    const int64_t ne0 = t->ne[0] > 0 ? t->ne[0] : 1;
    const int64_t n = n_rows * ne0;
    double err = 0, ref = 0;
    for (int64_t i = 0; i < n; i++) {
        const double b = m->buf[i];
        const double d = (double)x[i] - b;
        err += d * d;
        ref += b * b;
    }
    r->err_sq += err;
    r->ref_sq += ref;
    if (!m->grid.acc)
        return;
    for (int64_t i = 0; i < n_rows; i++) { /* units on the reference's rows */
        const int64_t row = row0 + i;
        const int64_t flat = m->kind == 2 ? gguf_llama_qk_row_to_hf(row, m->head_dim) : row;
        grid_row(&m->grid, flat, x + i * ne0, m->buf + i * ne0);
    }
}

/* A block or row far out of line fails a tensor whose SNR passed. */
static void apply_outliers(dv_ref_result *r)
{
    if (strcmp(r->status, "ok") != 0 || (!r->blocks.flagged && !r->rows.flagged))
        return;
    snprintf(r->status, sizeof r->status, "fail");
    r->outlier = true;
}

static void finish(dv_ref_result *r)
{
    r->rel_rms = r->ref_sq > 0 ? sqrt(r->err_sq / r->ref_sq) : (r->err_sq > 0 ? INFINITY : 0.0);
    r->snr_db = r->err_sq > 0 ? 10.0 * log10(r->ref_sq / r->err_sq) : INFINITY;
    if (isnan(r->err_sq))
        r->snr_db = -INFINITY;
    const bool ok = r->err_sq == 0 || r->snr_db >= r->expect_snr_db;
    snprintf(r->status, sizeof r->status, "%s", ok ? "ok" : "fail");
}

void dv_ref_end(dv_ref_result *r, dv_ref_map *m, const gguf_tensor *t)
{
    (void)t;
    if (!r->compared)
        return;
    finish(r);
    grid_end(&m->grid, r, m->kind == 3);
    apply_outliers(r);
}

void dv_kv_b_compare(dv_ref_result *r, const gguf_st_set *st, int64_t layer,
                     const gguf_tensor *kb, const float *k, const gguf_tensor *vb,
                     const float *v)
{
    memset(r, 0, sizeof *r);
    snprintf(r->hf_name, sizeof r->hf_name, "model.layers.%lld.self_attn.kv_b_proj.weight",
             (long long)layer);
    /* the worse of the two types sets the expectation */
    const double ek = dv_expect_snr_db(kb->type), ev = dv_expect_snr_db(vb->type);
    r->expect_snr_db = ek < ev ? ek : ev;
    const int64_t nope = kb->ne[0], lora = kb->ne[1], heads = kb->ne[2];
    const int64_t vh = vb->ne[1];
    if (vb->ne[0] != lora || vb->ne[2] != heads) {
        snprintf(r->status, sizeof r->status, "shape");
        snprintf(r->note, sizeof r->note, "attn_k_b ne [%lld, %lld, %lld] and attn_v_b ne "
                 "[%lld, %lld, %lld] disagree", (long long)nope, (long long)lora,
                 (long long)heads, (long long)vb->ne[0], (long long)vh, (long long)vb->ne[2]);
        return;
    }
    gguf_st_weight ref;
    if (find_ref(r, st, r->hf_name, &ref) != 0)
        return;
    const int64_t rows = heads * (nope + vh);
    const int64_t want[2] = {rows, lora};
    if (!same_shape(&ref, want, 2) || ref.cols != lora) {
        char have[96];
        shape_str(have, sizeof have, ref.shape, ref.n_dims);
        snprintf(r->status, sizeof r->status, "shape");
        snprintf(r->note, sizeof r->note, "reference is %s %s, reassembled [%lld, %lld]",
                 r->ref_dtype, have, (long long)rows, (long long)lora);
        return;
    }
    float *kv = malloc(sizeof(float) * (size_t)(rows * lora));
    float *rf = malloc(sizeof(float) * (size_t)(rows * lora));
    gguf_error err;
    if (!kv || !rf || gguf_st_weight_dequant(&ref, rf, (uint64_t)(rows * lora), &err) != 0) {
        snprintf(r->status, sizeof r->status, "skipped");
        snprintf(r->note, sizeof r->note, "out of memory");
        free(kv);
        free(rf);
        return;
    }
    /* reassemble: per head, nope rows of k (k_b transposed) then vh rows of v */
    gguf_mla_kv_b_join(k, v, heads, lora, nope, vh, kv);
    double e2 = 0, rs = 0;
    for (int64_t i = 0; i < rows * lora; i++) {
        const double b = rf[i], d = (double)kv[i] - b;
        e2 += d * d;
        rs += b * b;
    }
    r->err_sq = e2;
    r->ref_sq = rs;
    r->compared = true;
    snprintf(r->note, sizeof r->note, "reassembled from attn_k_b (transposed per head) and "
             "attn_v_b; reference %s %s", r->ref_dtype, r->ref_format);
    finish(r);
    /* units: peak windows as for the quantized half (or plain when neither is) */
    const gguf_type_info *tk = gguf_type_get(kb->type);
    dv_grid g;
    if (grid_begin(&g, &ref, rows, 1, lora, tk && tk->block_size > 1 ? kb->type : vb->type) == 0) {
        for (int64_t i = 0; i < rows; i++)
            grid_row(&g, i, kv + i * lora, rf + i * lora);
        grid_end(&g, r, false);
        apply_outliers(r);
    }
    free(kv);
    free(rf);
}
