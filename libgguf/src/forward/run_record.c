/* Recording a forward run (gguf/run.h). */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "util/error_lib.h"
#include "gguf/hash.h"
#include "gguf/model.h"
#include "gguf/record.h"
#include "gguf/run.h"

struct gguf_recorder {
    gguf_fwd_ctx *ctx;
    gguf_record_writer *w;
    bool on;
    int64_t pos0;    /* the position the recorded eval starts at */
    int rc;          /* the first capture error */
    gguf_error err;
};

static int on_capture(void *user, const gguf_fwd_capture *cap)
{
    gguf_recorder *r = user;
    if (!r->on || cap->pos0 != r->pos0)
        return 0;
    const int64_t ne[2] = {cap->ne[0], cap->ne[1]};
    int rc = gguf_record_add(r->w, cap->name, cap->rank < 0 ? 0u : (uint32_t)cap->rank, 2, ne,
                             cap->data, &r->err);
    if (rc && !r->rc)
        r->rc = rc;
    return rc;
}

int gguf_recorder_create(gguf_recorder **out, gguf_fwd_ctx *ctx, const gguf_set *set,
                         const int32_t *tokens, int64_t n_tokens, const char *path,
                         const gguf_run_record_opts *opts, gguf_error *err)
{
    *out = NULL;
    if (opts && opts->version > GGUF_RUN_RECORD_OPTS_VERSION)
        return gguf_opts_version_fail(opts->version, GGUF_RUN_RECORD_OPTS_VERSION, "gguf_run_record_opts", err);
    gguf_run_record_opts o = {0};
    if (opts)
        o = *opts;
    char hex[GGUF_DIGEST_HEX] = "", pd[GGUF_PLAN_DIGEST_HEX] = "";
    int rc;
    if (o.model_digest) {
        snprintf(hex, sizeof hex, "%s", o.model_digest);
    } else {
        gguf_digest dg;
        if ((rc = gguf_digest_set(set, NULL, &dg, o.n_threads > 0 ? o.n_threads : 1, NULL, err)))
            return rc;
        gguf_digest_hex(&dg, hex);
    }
    const gguf_model *m = gguf_fwd_ctx_model(ctx);
    const int tp = o.plan ? gguf_shard_plan_ranks(o.plan) : 1;
    const gguf_shard_opts *so = o.plan ? gguf_shard_plan_opts(o.plan) : NULL;
    if (o.plan)
        gguf_shard_plan_digest(o.plan, pd);
    gguf_record_meta rm = {0};
    rm.model_digest = hex;
    rm.tokens = tokens;
    rm.n_tokens = (uint64_t)n_tokens;
    rm.backend = o.backend ? o.backend : gguf_fwd_ctx_backend(ctx);
    rm.precision = o.precision == GGUF_FWD_F64 ? "f64" : "f32";
    rm.tp = rm.ranks = (uint32_t)tp;
    rm.ep = so && so->ep > 1 ? (uint32_t)so->ep : 1;
    rm.plan_digest = pd;
    rm.arch = m ? gguf_model_hparams(m)->arch_name : "";
    rm.fault = o.fault ? o.fault : "";
    gguf_record_opts ro = {0};
    ro.overwrite = true;
    ro.no_sync = o.no_sync;
    ro.zstd = o.zstd;
    gguf_recorder *r = calloc(1, sizeof *r);
    if (!r)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    r->ctx = ctx;
    if ((rc = gguf_record_writer_create(&r->w, path, &rm, &ro, err))) {
        free(r);
        return rc;
    }
    if ((rc = gguf_fwd_ctx_set_capture(ctx, on_capture, r))) {
        gguf_record_writer_free(r->w);
        free(r);
        return gguf_fail(err, rc, GGUF_NO_OFFSET, "%s: the %s backend cannot record", path,
                         gguf_fwd_ctx_backend(ctx));
    }
    r->on = true;
    r->pos0 = gguf_fwd_ctx_n_past(ctx);
    *out = r;
    return 0;
}

void gguf_recorder_stop(gguf_recorder *r)
{
    if (r && r->on) {
        r->on = false;
        gguf_fwd_ctx_set_capture(r->ctx, NULL, NULL);
    }
}

int gguf_recorder_finish(gguf_recorder *r, gguf_error *err)
{
    gguf_recorder_stop(r);
    if (r->rc) {
        if (err)
            *err = r->err;
        return r->rc;
    }
    return gguf_record_writer_finish(r->w, err);
}

void gguf_recorder_free(gguf_recorder *r)
{
    if (!r)
        return;
    gguf_recorder_stop(r);
    gguf_record_writer_free(r->w);
    free(r);
}

int gguf_run_record(gguf_fwd_ctx *ctx, const gguf_set *set, const int32_t *tokens,
                    int64_t n_tokens, const char *path, const gguf_run_record_opts *opts,
                    gguf_error *err)
{
    if (opts && opts->version > GGUF_RUN_RECORD_OPTS_VERSION)
        return gguf_opts_version_fail(opts->version, GGUF_RUN_RECORD_OPTS_VERSION, "gguf_run_record_opts",
                                      err);
    gguf_recorder *r = NULL;
    int rc = gguf_recorder_create(&r, ctx, set, tokens, n_tokens, path, opts, err);
    if (!rc)
        rc = gguf_fwd_eval(ctx, tokens, n_tokens, NULL, err);
    if (!rc)
        rc = gguf_recorder_finish(r, err);
    gguf_recorder_free(r);
    return rc;
}
