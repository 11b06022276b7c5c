/* ref-forward check-engine: ask a running serving engine (vLLM, SGLang,
 * llama-server, any OpenAI-compatible server) for a greedy continuation with
 * log-probabilities, teacher-force the engine's own tokens through the
 * reference, and say whether and where they disagree. docs/check-engine.md. */
#include <errno.h>
#include <math.h>
#include <getopt.h>
#include <signal.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "gguf/engine.h"
#include "gguf/forward.h"
#include "gguf/model.h"
#include "gguf/output.h"
#include "refwd_backend.h"
#include "refwd_compare.h"
#include "refwd_engine.h"
#include "ref_forward.h"

#define MAX_PROMPTS 1000
#define MAX_HEADERS 32

enum {
    OPT_URL = 256,
    OPT_API,
    OPT_SERVED,
    OPT_PROMPT,
    OPT_CHAT,
    OPT_MESSAGES,
    OPT_TOKENS,
    OPT_PROMPTS,
    OPT_TOPK,
    OPT_TOL,
    OPT_JSON,
    OPT_HTML,
    OPT_TIMEOUT,
    OPT_HEADER,
    OPT_API_KEY,
    OPT_BACKEND,
    OPT_THREADS,
    OPT_SHOW,
    OPT_NO_ECHO,
    OPT_VOCAB,
    OPT_MAX_POSITIONS,
    OPT_DEADLINE,
    OPT_DIAGNOSE,
    OPT_TP,
    OPT_EP,
    OPT_ENGINE,
    OPT_JOBS,
    OPT_MAX_RUNS,
    OPT_PROMPT_BY_PREFIX,
};

static const cli_opt options[] = {
    {OPT_URL, "url", 1, "URL", "the engine's base URL, e.g. http://127.0.0.1:8000 (required)"},
    {OPT_API, "api", 1, "API", "auto (default: probe /v1/models, /get_model_info, /props), "
     "openai, vllm, sglang or llama-server"},
    {OPT_SERVED, "served-model", 1, "NAME", "the model name of the requests (default: the "
     "first of /v1/models)"},
    {OPT_PROMPT, "prompt", 1, "TEXT", "a text prompt, tokenized by the engine"},
    {OPT_CHAT, "chat", 1, "TEXT", "one user message through /v1/chat/completions (the engine's "
     "chat template)"},
    {OPT_MESSAGES, "messages", 1, "FILE.json", "a JSON array of chat messages"},
    {OPT_TOKENS, "tokens", 1, "IDS", "a token-id prompt, comma-separated"},
    {OPT_PROMPTS, "prompts", 1, "FILE.jsonl", "one prompt per line: {\"prompt\"|\"chat\"|"
     "\"messages\"|\"tokens\": ...} or a JSON string"},
    {'n', "n-predict", 1, "K", "tokens the engine generates (default 16)"},
    {OPT_TOPK, "top-k", 1, "K", "log-probabilities of the top K tokens per position (default 5)"},
    {OPT_TOL, "tol", 1, "SPEC", "tolerances: a preset (default, strict, bf16, quant) and/or "
     "dlogprob=, kl=, top1=, tie= (docs/check-engine.md)"},
    {OPT_JSON, "json", 0, NULL, "one JSON object (schema: docs/check-engine.md)"},
    {OPT_HTML, "html", 1, "REPORT.html", "also write a page with a per-position plot"},
    {OPT_TIMEOUT, "timeout", 1, "S", "seconds per HTTP request (default 600)"},
    {OPT_HEADER, "header", 1, "'NAME: VALUE'", "an extra HTTP header (repeatable)"},
    {OPT_API_KEY, "api-key", 1, "KEY", "sent as 'Authorization: Bearer KEY'"},
    {OPT_BACKEND, "backend", 1, "cpu|cuda", "where the reference runs (default cpu)"},
    {OPT_THREADS, "threads", 1, "N", "reference matmul threads (default 1)"},
    {OPT_NO_ECHO, "no-echo", 0, NULL, "compare the generated positions only (ask for no prompt "
     "log-probabilities)"},
    {OPT_PROMPT_BY_PREFIX, "prompt-by-prefix", 0, NULL, "llama-server: score each prompt "
     "position as the next token of its prefix (one n_predict 1 request per prompt token), as "
     "it returns no prompt log-probabilities"},
    {OPT_SHOW, "show", 1, "N", "table rows from the first divergence (default 8; -v: every "
     "position; -q: the result line only)"},
    {OPT_VOCAB, "vocab", 1, "FILE.gguf", "the vocabulary of an HF checkpoint MODEL (a GGUF of the "
     "same model): text-only replies and the tokenization check need one"},
    {OPT_MAX_POSITIONS, "max-positions", 1, "N", "refuse an engine sequence longer than N tokens "
     "(default: the model's context length)"},
    {OPT_DEADLINE, "deadline", 1, "S", "seconds for the whole run (requests and reference; "
     "default none; --timeout is per request)"},
    {OPT_DIAGNOSE, "diagnose", 0, NULL, "after DIVERGED, name the fault of the catalog that "
     "reproduces the engine's outputs (docs/check-engine.md, \"After DIVERGED\")"},
    {OPT_TP, "tp", 1, "N[,N...]", "with --diagnose: the engine's tensor-parallel size(s) "
     "(default: 1, 2, 4, 8 where the model splits evenly)"},
    {OPT_EP, "ep", 1, "M", "with --diagnose: the engine's expert-parallel size"},
    {OPT_ENGINE, "engine", 1, "vllm|sglang", "with --diagnose: whose sharding rules (default: "
     "sglang for an SGLang server, else vllm)"},
    {OPT_JOBS, "jobs", 1, "J", "with --diagnose: reference runs at once (default: CPUs / "
     "--threads)"},
    {OPT_MAX_RUNS, "max-runs", 1, "N", "with --diagnose: refuse more reference runs than N "
     "(default 2000; one layer at a time is skipped past it)"},
    {0, NULL, 0, NULL, NULL},
};

static const cli_spec spec = {
    REF_FORWARD_TOOL " check-engine",
    "MODEL.gguf|HF-DIR --url URL [--prompt TEXT | --chat TEXT | --messages FILE.json |\n"
    "       --tokens IDS | --prompts FILE.jsonl] [OPTIONS]",
    "Check a running serving engine against the reference: ask it for a greedy continuation\n"
    "with log-probabilities, run the same tokens (the engine's own) through the reference\n"
    "and compare position by position. Exit 0 agree, 1 diverged, 2 bad usage or a malformed\n"
    "reply, 3 the engine unreachable, timed out or failing (HTTP 5xx).",
    options,
    "  ref-forward check-engine model.gguf --url http://127.0.0.1:8000 --prompt 'The capital "
    "of France is'\n"
    "  ref-forward check-engine model.gguf --url http://gpu-node:8000 --chat 'What is 2+2?' -n 8\n"
    "  ref-forward check-engine model.gguf --url http://127.0.0.1:8080 --api llama-server "
    "--tokens 1,415,2217\n"
    "  ref-forward check-engine f32.gguf --url http://127.0.0.1:30000 --prompts p.jsonl "
    "--tol quant --json\n"
    "  ref-forward check-engine model.gguf --url http://gpu-node:8000 --prompts p.jsonl "
    "--diagnose --tp 8\n",
};

typedef struct ce_opts {
    const char *model, *url, *tol, *html, *served, *api_key, *vocab;
    int64_t max_positions;
    double deadline;
    gguf_engine_api api;
    ce_prompt *prompts;
    int n_prompts;
    int64_t n_predict;
    int top_k, show, threads;
    double timeout;
    bool json, no_echo, diagnose, prompt_by_prefix;
    gguf_diag_opts diag;
    bool engine_given;
    const char *diag_option;      /* a --diagnose option given (needs --diagnose) */
    char *command;                /* the command line, for the report */
    const char *headers[MAX_HEADERS + 1];
    int n_headers;
    refwd_backend backend;
} ce_opts;

/* --tp 8 or --tp 4,8 */
static int parse_tp_list(const char *s, gguf_diag_opts *d)
{
    d->n_tp = 0;
    for (const char *p = s;;) {
        char *end;
        errno = 0;
        const long v = strtol(p, &end, 10);
        if (end == p || errno || v < 1 || v > 4096 || d->n_tp == GGUF_DIAG_MAX_TP ||
            (*end && *end != ','))
            return -1;
        d->tp[d->n_tp++] = (int)v;
        if (!*end)
            return 0;
        p = end + 1;
    }
}

/* A prompts or messages file whole (gguf_read_small_file); NULL with errno set. */
static char *read_file(const char *path, size_t *len)
{
    char *text;
    gguf_error err = {0};
    if (gguf_read_small_file(path, (size_t)1 << 30, &text, len, &err) != 0) {
        errno = err.sys_errno ? err.sys_errno : err.code == GGUF_E_LIMIT ? EFBIG : EIO;
        return NULL;
    }
    return text;
}

static ce_prompt *add_prompt(ce_opts *o)
{
    if (o->n_prompts >= MAX_PROMPTS)
        return NULL;
    ce_prompt *p = realloc(o->prompts, (size_t)(o->n_prompts + 1) * sizeof *p);
    if (!p)
        return NULL;
    o->prompts = p;
    memset(&p[o->n_prompts], 0, sizeof *p);
    return &p[o->n_prompts++];
}

/* One line of --prompts: a JSON string, or an object with one prompt field. */
static int prompt_from_json(ce_prompt *p, json_t *v, char *why, size_t size)
{
    if (json_is_string(v)) {
        p->text = strdup(json_string_value(v));
        return p->text ? 0 : -1;
    }
    if (!json_is_object(v)) {
        snprintf(why, size, "expected a string or an object");
        return -1;
    }
    json_t *t = json_object_get(v, "prompt"), *c = json_object_get(v, "chat"),
           *m = json_object_get(v, "messages"), *k = json_object_get(v, "tokens");
    if ((t != NULL) + (c != NULL) + (m != NULL) + (k != NULL) != 1) {
        snprintf(why, size, "needs exactly one of prompt, chat, messages, tokens");
        return -1;
    }
    if (t || c) {
        if (!json_is_string(t ? t : c)) {
            snprintf(why, size, "%s: expected a string", t ? "prompt" : "chat");
            return -1;
        }
        char *s = strdup(json_string_value(t ? t : c));
        *(t ? &p->text : &p->chat) = s;
        return s ? 0 : -1;
    }
    if (m) {
        if (!json_is_array(m)) {
            snprintf(why, size, "messages: expected an array");
            return -1;
        }
        p->messages = json_dumps(m, JSON_COMPACT);
        return p->messages ? 0 : -1;
    }
    const size_t n = json_array_size(k);
    if (!json_is_array(k) || n == 0) {
        snprintf(why, size, "tokens: expected a non-empty array of ids");
        return -1;
    }
    p->tokens = malloc(n * sizeof *p->tokens);
    if (!p->tokens)
        return -1;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(k, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 ||
            json_integer_value(e) > INT32_MAX) {
            snprintf(why, size, "tokens[%zu]: expected a token id", i);
            return -1;
        }
        p->tokens[i] = (int32_t)json_integer_value(e);
    }
    p->n_tokens = (int64_t)n;
    return 0;
}

static int load_prompts(ce_opts *o, const char *path)
{
    size_t len;
    char *text = read_file(path, &len);
    if (!text) {
        cli_errorf(spec.tool, "%s: cannot read: %s", path, strerror(errno));
        return CLI_EXIT_USAGE;
    }
    int ret = 0, line = 0;
    char *save = NULL;
    for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        line++;
        while (*l == ' ' || *l == '\t' || *l == '\r')
            l++;
        if (!*l)
            continue;
        json_error_t je;
        json_t *v = json_loads(l, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
        char why[160] = "";
        ce_prompt *p = v ? add_prompt(o) : NULL;
        if (!v)
            ce_fmt(why, sizeof why, "not JSON: %s", je.text);
        else if (!p)
            snprintf(why, sizeof why, "more than %d prompts", MAX_PROMPTS);
        if (!p || prompt_from_json(p, v, why, sizeof why)) {
            cli_errorf(spec.tool, "%s: line %d: %s", path, line, why[0] ? why : "out of memory");
            ret = CLI_EXIT_USAGE;
        }
        json_decref(v);
        if (ret)
            break;
    }
    free(text);
    if (!ret && o->n_prompts == 0) {
        cli_errorf(spec.tool, "%s: no prompts", path);
        ret = CLI_EXIT_USAGE;
    }
    return ret;
}

static void free_prompts(ce_opts *o)
{
    for (int i = 0; i < o->n_prompts; i++) {
        free(o->prompts[i].text);
        free(o->prompts[i].chat);
        free(o->prompts[i].messages);
        free(o->prompts[i].tokens);
    }
    free(o->prompts);
}

/* The reference on the engine's sequence: rows for every compared position. */
static int reference(const ce_opts *o, const gguf_model *m, ce_result *r,
                     const gguf_engine_tol *tol, gguf_error *err)
{
    const int64_t V = gguf_model_hparams(m)->n_vocab;
    const int64_t n_eval = r->n_seq - 1; /* the last token predicts nothing compared */
    if (r->n_seq_prompt < 1)
        return gguf_error_setf(err, GGUF_E_BAD_VALUE, 0, "the engine's prompt has no tokens");
    float *logits = malloc((size_t)(n_eval * V) * sizeof(float) + 1);
    if (!logits)
        return gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory for %lld rows of logits",
                               (long long)n_eval);
    gguf_fwd_opts fo = {0};
    fo.n_threads = o->threads;
    fo.drop_pages = true;
    gguf_fwd_ctx *ctx = NULL;
    int rc = refwd_ctx_create(&ctx, o->backend, m, &fo, NULL, err);
    if (!rc)
        rc = gguf_fwd_eval(ctx, r->seq, n_eval, logits, err);
    gguf_fwd_ctx_free(ctx);
    if (!rc)
        rc = gguf_engine_compare(&r->cmp, r->reply, r->n_seq_prompt, logits, n_eval, V, tol, err);
    free(logits);
    if (!rc && r->cmp->n_unscored > 0)
        ce_note(r, "%lld generated positions came without log-probabilities (accepted draft "
                   "tokens of speculative decoding): in the sequence, not compared",
                (long long)r->cmp->n_unscored);
    if (!rc && r->cmp->n_not_greedy > 0)
        ce_note(r, "%lld generated tokens are not the engine's own most probable: its sampler "
                   "is not greedy (a default repetition penalty?); its distributions are "
                   "compared, and the text it wrote is not what the reference would write",
                (long long)r->cmp->n_not_greedy);
    /* a verdict needs one number compared: a reply whose every token names
     * nothing (text-only, unresolvable) gives none, and that is no agreement */
    bool measured = false;
    for (int64_t k = 0; !rc && k < r->cmp->n_pos && !measured; k++)
        measured = !isnan(r->cmp->pos[k].dlogprob) || !isnan(r->cmp->pos[k].dlogprob_top);
    if (!rc && !measured)
        rc = gguf_error_setf(err, GGUF_E_UNSUPPORTED, 0,
                             "nothing to compare: no token of the reply names one of the "
                             "vocabulary (text-only replies; ask for ids: --api vllm)");
    return rc;
}

/* --deadline: the whole run, requests and the reference alike (which has no
 * cancel point), ends when the alarm rings: exit 3, as for a timed-out engine. */
static void deadline_passed(int sig)
{
    (void)sig;
    static const char msg[] = REF_FORWARD_TOOL " check-engine: error: --deadline passed\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    _exit(CLI_EXIT_ENV);
}

static void arm_deadline(double seconds)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = deadline_passed;
    sigaction(SIGALRM, &sa, NULL);
    alarm((unsigned)(seconds + 0.999));
}

static int run(ce_opts *o)
{
    gguf_error err = {0};
    gguf_set *set = NULL, *vocab = NULL;
    gguf_model *m = NULL;
    gguf_tokenizer *tok = NULL;
    ce_ctx ctx = {0};
    ce_result **res = NULL;
    gguf_diagnosis *diag = NULL;
    int ret = CLI_EXIT_USAGE, rc;
    char detected[256] = "";
    gguf_engine_tol tol;
    gguf_engine_tol_preset(&tol, "default");
    if ((rc = gguf_engine_tol_parse(&tol, o->tol, &err))) {
        cli_error(spec.tool, &err);
        return CLI_EXIT_USAGE;
    }
    refwd_http_opts ho = {0};
    ho.timeout = o->timeout;
    ho.api_key = o->api_key;
    ho.headers = o->headers;
    const bool hf = gguf_model_path_is_hf(o->model);
    rc = hf ? gguf_model_open_hf(&m, o->model, &err) : gguf_set_open(&set, o->model, NULL, &err);
    if (!rc && !hf)
        rc = gguf_model_open(&m, set, &err);
    if (!rc && o->vocab)
        rc = gguf_set_open(&vocab, o->vocab, NULL, &err);
    if (!rc && hf && o->backend == REFWD_CUDA)
        rc = gguf_error_setf(&err, GGUF_E_UNSUPPORTED, 0,
                             "--backend cuda: an HF checkpoint runs on the CPU reference only");
    if (!rc)
        rc = refwd_backend_probe(o->backend, &err);
    if (!rc)
        rc = refwd_http_create(&ctx.http, o->url, &ho, &err);
    if (rc) {
        cli_error(spec.tool, &err);
        ret = cli_exit_code(rc);
        goto done;
    }
    ctx.api = o->api;
    ctx.n_predict = o->n_predict;
    ctx.top_k = o->top_k;
    ctx.no_echo = o->no_echo;
    ctx.prompt_by_prefix = o->prompt_by_prefix;
    const gguf_set *vset = vocab ? vocab : set;
    ctx.meta = vset ? gguf_set_meta(vset) : NULL;
    ctx.n_vocab = gguf_model_hparams(m)->n_vocab;
    if (vset) {
        gguf_error te = {0};
        if (gguf_tokenizer_create(&tok, vset, &te) == 0)
            ctx.tok = tok; /* else: text-only replies and the tokenization check say why */
    }
    /* the reference runs what the engine says it ran: bounded by the model's
     * context (an engine claiming 100k ids would cost minutes and GBs) */
    const int64_t n_ctx = gguf_model_hparams(m)->n_ctx_train;
    ctx.max_positions = o->max_positions ? o->max_positions : n_ctx > 0 ? n_ctx : 0;
    if (o->top_k > 20 && (ctx.api == GGUF_API_VLLM || ctx.api == GGUF_API_AUTO))
        /* vLLM refuses more than max_logprobs (20 unless the server raised it) */
        fprintf(stderr, "%s: note: --top-k %d: vLLM answers at most 20 unless started with "
                        "--max-logprobs %d or more\n", spec.tool, o->top_k, o->top_k);
    if (ctx.api == GGUF_API_AUTO || !o->served) {
        if ((rc = ce_detect(&ctx, detected, sizeof detected, &err))) {
            cli_error(spec.tool, &err);
            ret = rc == GGUF_E_IO ? CLI_EXIT_ENV : CLI_EXIT_USAGE;
            goto done;
        }
    }
    ctx.served_model = o->served ? o->served : (detected[0] ? detected : NULL);
    if (o->prompt_by_prefix && (ctx.api != GGUF_API_LLAMA_SERVER || o->no_echo)) {
        /* the prefixes go to llama-server's /completion as token ids; the
         * other dialects return prompt log-probabilities themselves */
        cli_errorf(spec.tool, "--prompt-by-prefix: %s", o->no_echo
                   ? "compares prompt positions, --no-echo leaves them out"
                   : "only with llama-server (its /completion takes token-id prefixes; the other "
                     "dialects return prompt log-probabilities themselves)");
        ret = CLI_EXIT_USAGE;
        goto done;
    }
    res = calloc((size_t)o->n_prompts, sizeof *res);
    if (!res) {
        ret = CLI_EXIT_ENV;
        goto done;
    }
    for (int i = 0; i < o->n_prompts; i++) {
        res[i] = calloc(1, sizeof **res);
        if (!res[i]) {
            ret = CLI_EXIT_ENV;
            goto done;
        }
        res[i]->index = i;
        rc = ce_query(&ctx, &o->prompts[i], res[i], &err);
        if (!rc)
            rc = reference(o, m, res[i], &tol, &err);
        if (rc) {
            if (o->n_prompts > 1) {
                char msg[sizeof err.message];
                snprintf(msg, sizeof msg, "%s", err.message);
                ce_fmt(err.message, sizeof err.message, "prompt %d: %s", i, msg);
            }
            cli_error(spec.tool, &err);
            /* the engine failed (unreachable, timeout, 5xx): 3; a malformed or
             * refused reply, a token outside the vocabulary: 2 */
            ret = rc == GGUF_E_IO || rc == GGUF_E_NOMEM ? CLI_EXIT_ENV : CLI_EXIT_USAGE;
            goto done;
        }
    }
    ce_totals t;
    ce_totals_compute(&t, res, o->n_prompts);
    int diag_rc = 0;
    gguf_error diag_err = {0};
    if (o->diagnose && !t.agree) {
        if (!o->engine_given)
            o->diag.engine = ctx.api == GGUF_API_SGLANG ? GGUF_ENGINE_SGLANG : GGUF_ENGINE_VLLM;
        diag_rc = ce_diagnose(&diag, m, res, o->n_prompts, &tol, &o->diag, &diag_err);
    }
    const gguf_hparams *hp = gguf_model_hparams(m);
    ce_report rep = {.model_path = o->model,
                     .arch = hp->arch_name,
                     .backend = refwd_backend_name(o->backend),
                     .url = refwd_http_url(ctx.http),
                     .api = gguf_engine_api_name(ctx.api),
                     .served_model = ctx.served_model,
                     .meta = ctx.meta,
                     .tol = &tol,
                     .show = o->show,
                     .diagnosis = diag,
                     .command = o->command};
    if (!o->json) {
        ce_print_text(stdout, &rep, res, o->n_prompts, &t);
    } else if (ce_print_json(stdout, &rep, res, o->n_prompts, &t) != 0) {
        cli_errorf(spec.tool, "cannot write the JSON report");
        ret = CLI_EXIT_ENV;
        goto done;
    }
    if (!o->json && diag)
        ce_print_diagnosis(stdout, diag, o->show);
    else if (!o->json && o->diagnose && t.agree)
        printf("\ndiagnose:  the engine agrees with the reference: nothing to diagnose\n");
    fflush(stdout);
    if (diag_rc) {
        cli_error(spec.tool, &diag_err);
        ret = cli_exit_code(diag_rc);
        goto done;
    }
    if (o->html && (rc = ce_write_html(o->html, &rep, res, o->n_prompts, &t, &err))) {
        cli_error(spec.tool, &err);
        ret = cli_exit_code(rc);
        goto done;
    }
    ret = t.agree ? CLI_EXIT_OK : CLI_EXIT_DIFF;
done:
    gguf_diagnosis_free(diag);
    for (int i = 0; res && i < o->n_prompts; i++) {
        if (res[i])
            ce_result_clear(res[i]);
        free(res[i]);
    }
    free(res);
    for (int64_t i = 0; i < ctx.n_texts; i++)
        free((char *)ctx.texts[i].text);
    free(ctx.texts);
    refwd_http_free(ctx.http);
    gguf_tokenizer_free(tok);
    gguf_model_free(m);
    gguf_set_free(set);
    gguf_set_free(vocab);
    return ret;
}

/* The command line for the report, secrets left out: the values of --api-key
 * and --header (a header may carry a key) become "...". */
static char *report_command(int argc, char **argv)
{
    char **shown = malloc((size_t)(argc + 1) * sizeof *shown);
    if (!shown)
        return NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const bool joined = strncmp(a, "--api-key=", 10) == 0 || strncmp(a, "--header=", 9) == 0;
        if (i > 0 && (strcmp(argv[i - 1], "--api-key") == 0 ||
                      strcmp(argv[i - 1], "--header") == 0))
            shown[i] = "...";
        else if (joined)
            shown[i] = a[2] == 'a' ? "--api-key=..." : "--header=...";
        else
            shown[i] = argv[i];
    }
    shown[argc] = NULL;
    char *s = refwd_command_line(argc, shown);
    free(shown);
    return s;
}

int refwd_check_engine_main(int argc, char **argv)
{
    ce_opts o = {0};
    o.diag = (gguf_diag_opts)GGUF_DIAG_OPTS_INIT;
    o.n_predict = 16;
    o.top_k = 5;
    o.show = -1; /* not given: 8, every position with -v */
    o.timeout = 600;
    int c, optind_ = 1, ret = CLI_EXIT_USAGE;
    const char *arg;
    const char *messages_file = NULL, *prompts_file = NULL;
    int n_sources = 0;
    o.command = report_command(argc, argv); /* before getopt permutes argv */
    for (;;) {
        c = cli_next(&spec, argc, argv, &arg, &optind_);
        if (c == -1) {
            if (optind_ >= argc)
                break;
            if (o.model) {
                cli_errorf(spec.tool, "unexpected argument '%s' (see --help)", argv[optind_]);
                goto done;
            }
            o.model = argv[optind_];
            optind = optind_ + 1;
            continue;
        }
        uint64_t v;
        ce_prompt *p;
        switch (c) {
        case OPT_URL: o.url = arg; break;
        case OPT_API:
            if (gguf_engine_api_from_name(arg, &o.api)) {
                cli_errorf(spec.tool, "--api: '%s' is not auto, openai, vllm, sglang or "
                                      "llama-server", arg);
                goto done;
            }
            break;
        case OPT_SERVED: o.served = arg; break;
        case OPT_PROMPT:
        case OPT_CHAT:
            n_sources++;
            if (!(p = add_prompt(&o)) || !(*(c == OPT_PROMPT ? &p->text : &p->chat) = strdup(arg))) {
                ret = CLI_EXIT_ENV;
                goto done;
            }
            break;
        case OPT_TOKENS:
            n_sources++;
            if (!(p = add_prompt(&o))) {
                ret = CLI_EXIT_ENV;
                goto done;
            }
            if (cli_parse_ids(arg, &p->tokens, &p->n_tokens)) {
                cli_errorf(spec.tool, "--tokens: '%s' is not a comma-separated list of ids", arg);
                goto done;
            }
            break;
        case OPT_MESSAGES: n_sources++; messages_file = arg; break;
        case OPT_PROMPTS: n_sources++; prompts_file = arg; break;
        case 'n':
            if (cli_parse_u64(arg, &v) || v < 1 || v > 100000) {
                cli_errorf(spec.tool, "-n: '%s' is not a count from 1 to 100000", arg);
                goto done;
            }
            o.n_predict = (int64_t)v;
            break;
        case OPT_TOPK:
            if (cli_parse_u64(arg, &v) || v < 1 || v > GGUF_ENGINE_MAX_TOP) {
                cli_errorf(spec.tool, "--top-k: '%s' is not a count from 1 to %d", arg,
                           GGUF_ENGINE_MAX_TOP);
                goto done;
            }
            o.top_k = (int)v;
            break;
        case OPT_TOL: o.tol = arg; break;
        case OPT_JSON: o.json = true; break;
        case OPT_NO_ECHO: o.no_echo = true; break;
        case OPT_PROMPT_BY_PREFIX: o.prompt_by_prefix = true; break;
        case OPT_HTML: o.html = arg; break;
        case OPT_TIMEOUT: {
            char *end;
            o.timeout = strtod(arg, &end);
            if (end == arg || *end || !(o.timeout > 0) || o.timeout > 86400) {
                cli_errorf(spec.tool, "--timeout: '%s' is not a number of seconds", arg);
                goto done;
            }
            break;
        }
        case OPT_HEADER:
            if (o.n_headers >= MAX_HEADERS || !strchr(arg, ':')) {
                cli_errorf(spec.tool, "--header: '%s' is not 'NAME: VALUE'%s", arg,
                           o.n_headers >= MAX_HEADERS ? " (too many headers)" : "");
                goto done;
            }
            o.headers[o.n_headers++] = arg;
            break;
        case OPT_API_KEY: o.api_key = arg; break;
        case OPT_VOCAB: o.vocab = arg; break;
        case OPT_MAX_POSITIONS:
            if (cli_parse_u64(arg, &v) || v < 2 || v > 10000000) {
                cli_errorf(spec.tool, "--max-positions: '%s' is not a count from 2 to 10000000",
                           arg);
                goto done;
            }
            o.max_positions = (int64_t)v;
            break;
        case OPT_DEADLINE: {
            char *end;
            o.deadline = strtod(arg, &end);
            if (end == arg || *end || !(o.deadline > 0) || o.deadline > 86400 * 7) {
                cli_errorf(spec.tool, "--deadline: '%s' is not a number of seconds", arg);
                goto done;
            }
            break;
        }
        case OPT_DIAGNOSE: o.diagnose = true; break;
        case OPT_TP:
            o.diag_option = "--tp";
            if (parse_tp_list(arg, &o.diag)) {
                cli_errorf(spec.tool, "--tp: '%s' is not a list of sizes from 1 to 4096 (at "
                                      "most %d)", arg, GGUF_DIAG_MAX_TP);
                goto done;
            }
            break;
        case OPT_EP:
            o.diag_option = "--ep";
            if (cli_parse_u64(arg, &v) || v < 1 || v > 4096) {
                cli_errorf(spec.tool, "--ep: '%s' is not a size from 1 to 4096", arg);
                goto done;
            }
            o.diag.ep = (int)v;
            break;
        case OPT_ENGINE:
            o.diag_option = "--engine";
            if (gguf_engine_from_name(arg, &o.diag.engine)) {
                cli_errorf(spec.tool, "--engine: '%s' is not vllm or sglang", arg);
                goto done;
            }
            o.engine_given = true;
            break;
        case OPT_JOBS:
            o.diag_option = "--jobs";
            if (cli_parse_u64(arg, &v) || v < 1 || v > 64) {
                cli_errorf(spec.tool, "--jobs: '%s' is not a number from 1 to 64", arg);
                goto done;
            }
            o.diag.n_jobs = (int)v;
            break;
        case OPT_MAX_RUNS:
            o.diag_option = "--max-runs";
            if (cli_parse_u64(arg, &v) || v < 1 || v > 100000000) {
                cli_errorf(spec.tool, "--max-runs: '%s' is not a count", arg);
                goto done;
            }
            o.diag.max_runs = (int64_t)v;
            break;
        case OPT_BACKEND:
            if (refwd_backend_parse(arg, &o.backend)) {
                cli_errorf(spec.tool, "--backend: '%s' is not cpu or cuda", arg);
                goto done;
            }
            break;
        case OPT_THREADS:
            if (cli_parse_u64(arg, &v) || v < 1 || v > 64) {
                cli_errorf(spec.tool, "--threads: '%s' is not a number from 1 to 64", arg);
                goto done;
            }
            o.threads = (int)v;
            break;
        case OPT_SHOW:
            if (cli_parse_u64(arg, &v) || v > 100000) {
                cli_errorf(spec.tool, "--show: '%s' is not a count", arg);
                goto done;
            }
            o.show = (int)v;
            break;
        }
    }
    if (o.show < 0)
        o.show = cli_verbosity > 1 ? INT32_MAX : 8;
    if (!o.model || !o.url) {
        cli_errorf(spec.tool, "expected MODEL (a GGUF or an HF checkpoint folder) and --url URL "
                              "(see --help)");
        goto done;
    }
    if (o.diag_option && !o.diagnose) {
        cli_errorf(spec.tool, "%s needs --diagnose", o.diag_option);
        goto done;
    }
    o.diag.layers = true;
    o.diag.n_threads = o.threads;
    o.diag.drop_pages = !gguf_model_path_is_hf(o.model ? o.model : "");
    if (!o.diag.n_jobs) {
        const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        const int per = o.threads > 0 ? o.threads : 1;
        o.diag.n_jobs = cpus > per ? (int)(cpus / per) : 1;
        if (o.diag.n_jobs > 64)
            o.diag.n_jobs = 64;
    }
    if (!o.diag.max_runs)
        o.diag.max_runs = 2000;
    if (n_sources != 1) {
        cli_errorf(spec.tool, "give exactly one of --prompt, --chat, --messages, --tokens, "
                              "--prompts (%d given)", n_sources);
        goto done;
    }
    if (messages_file) {
        ce_prompt *p = add_prompt(&o);
        if (!p || !(p->messages = read_file(messages_file, NULL))) {
            cli_errorf(spec.tool, "%s: cannot read: %s", messages_file, strerror(errno));
            goto done;
        }
        json_error_t je;
        json_t *mv = json_loads(p->messages, 0, &je);
        const bool ok = json_is_array(mv);
        json_decref(mv);
        if (!ok) {
            cli_errorf(spec.tool, "%s: not a JSON array of messages%s%s", messages_file,
                       mv ? "" : ": ", mv ? "" : je.text);
            goto done;
        }
    }
    if (prompts_file && (ret = load_prompts(&o, prompts_file)))
        goto done;
    if (o.deadline > 0)
        arm_deadline(o.deadline);
    ret = run(&o);
    alarm(0);
done:
    free(o.command);
    free_prompts(&o);
    return ret;
}
