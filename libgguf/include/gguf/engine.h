/*
 * gguf/engine.h - talk to a running serving engine (vLLM, SGLang,
 * llama-server, any OpenAI-compatible server) and compare what it says with
 * the reference.
 *
 * Three layers, the first two pure (bytes in, structs or a coded error out,
 * no I/O), so that they can be fuzzed and tested against recorded bodies:
 *
 *   request   gguf_engine_request_build: the JSON body of one request in the
 *             engine's dialect (greedy, log-probabilities of the top K);
 *   reply     gguf_engine_reply_parse and friends: every response shape into
 *             one structure, one entry per token position (token id and/or
 *             text, the log-probability the engine gave it, its top-K
 *             alternatives); gguf_engine_tokens_parse (/tokenize),
 *             gguf_engine_detect (/v1/models, /get_model_info, /props);
 *   compare   gguf_engine_compare: the engine's positions against the
 *             reference's log-softmax over the full vocabulary;
 *
 * The HTTP transport (libcurl: timeouts, extra headers, a Bearer key) is not
 * here: it lives beside the tool that uses it (tools/ref-forward/refwd_http.c),
 * so libgguf needs no network library.
 *
 * Shapes read (docs/check-engine.md cites the source of each):
 *   /v1/completions  legacy   choices[0].logprobs.{tokens, token_logprobs,
 *                             top_logprobs[{text: logprob}], text_offset}
 *                             (vLLM, SGLang, TensorRT-LLM, ref-forward serve)
 *                    chat     choices[0].logprobs.content[{id?, token,
 *                             logprob, top_logprobs[{id?, token, logprob}]}]
 *                             (llama-server's /v1/completions)
 *                    vLLM     choices[0].prompt_logprobs [null | {"ID":
 *                             {logprob, rank, decoded_token}}],
 *                             prompt_token_ids, token_ids; tokens as
 *                             "token_id:N" (return_tokens_as_token_ids)
 *   /v1/chat/completions      choices[0].logprobs.content[] as above,
 *                             message.{content, reasoning_content, reasoning};
 *                             vLLM: top-level prompt_token_ids, prompt_logprobs
 *   /generate (SGLang)        meta_info.{input,output}_token_logprobs
 *                             [[logprob|null, id, text|null]],
 *                             meta_info.{input,output}_top_logprobs
 *                             [null | [[logprob, id, text|null]]]
 *   /completion (llama-server) completion_probabilities (or probs)
 *                             [{id, token, logprob, top_logprobs[{id, token,
 *                             logprob}]}] (or prob/top_probs), tokens
 *
 * A position is a token and the log-probability the engine gave it given
 * every token before it: echoed prompt positions come first (the very first
 * prompt token has none: NAN), then the generated ones.
 *
 * Errors: a reply that is not JSON, or whose fields have the wrong type or
 * inconsistent lengths, is GGUF_E_BAD_VALUE with the JSON path of the field
 * in the message ("choices[0].logprobs.top_logprobs[3]"); replies over the
 * limits below are GGUF_E_LIMIT.
 */
#ifndef GGUF_ENGINE_H
#define GGUF_ENGINE_H

#include "gguf/export.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"

GGUF_BEGIN_DECLS

/* Limits on what a reply may hold (larger ones are GGUF_E_LIMIT). */
#define GGUF_ENGINE_MAX_POSITIONS 1000000 /* positions of one reply */
#define GGUF_ENGINE_MAX_TOP 1024          /* alternatives of one position */
#define GGUF_ENGINE_MAX_BODY (256u << 20) /* bytes of one reply body */
#define GGUF_ENGINE_MAX_VALUES 4000000u   /* JSON values of one reply (~200 MB parsed) */

/* ---- dialects and endpoints ---- */

typedef enum gguf_engine_api {
    GGUF_API_AUTO = 0,         /* probe the server (gguf_engine_detect) */
    GGUF_API_OPENAI = 1,       /* any OpenAI-compatible server, no extensions */
    GGUF_API_VLLM = 2,         /* + prompt_logprobs, return_token_ids,
                                  return_tokens_as_token_ids, /tokenize */
    GGUF_API_SGLANG = 3,       /* native /generate */
    GGUF_API_LLAMA_SERVER = 4, /* native /completion and /tokenize */
} gguf_engine_api;

/* "auto", "openai", "vllm", "sglang", "llama-server". Never NULL. */
const char *gguf_engine_api_name(gguf_engine_api api);
/* The reverse; @return 0 or GGUF_E_INVALID for an unknown name. */
int gguf_engine_api_from_name(const char *name, gguf_engine_api *out);

typedef enum gguf_engine_endpoint {
    GGUF_EP_COMPLETIONS = 0, /* POST /v1/completions */
    GGUF_EP_CHAT = 1,        /* POST /v1/chat/completions */
    GGUF_EP_GENERATE = 2,    /* POST /generate (SGLang) */
    GGUF_EP_COMPLETION = 3,  /* POST /completion (llama-server) */
    GGUF_EP_TOKENIZE = 4,    /* POST /tokenize */
    GGUF_EP_MODELS = 5,      /* GET /v1/models */
    GGUF_EP_MODEL_INFO = 6,  /* GET /get_model_info (SGLang) */
    GGUF_EP_PROPS = 7,       /* GET /props (llama-server) */
    GGUF_EP_COUNT = 8
} gguf_engine_endpoint;

/* "/v1/completions", ...; NULL for a value out of range. */
const char *gguf_engine_endpoint_path(gguf_engine_endpoint ep);
/* "completions", "chat", "generate", "completion", "tokenize", "models",
 * "model_info", "props" (the names of the test data files); NULL out of range. */
const char *gguf_engine_endpoint_name(gguf_engine_endpoint ep);
/* The reverse; @return 0 or GGUF_E_INVALID. */
int gguf_engine_endpoint_from_name(const char *name, gguf_engine_endpoint *out);

/* ---- requests ---- */

typedef struct gguf_engine_request {
    gguf_engine_api api;          /* dialect: which extensions to ask for
                                     (AUTO is read as OPENAI) */
    gguf_engine_endpoint endpoint;
    const char *model;            /* "model" field; NULL: omitted */
    const char *text;             /* prompt text, or NULL */
    const int32_t *tokens;        /* or a token-id prompt (n_tokens > 0) */
    int64_t n_tokens;
    const char *messages;         /* chat and /tokenize: a JSON array of messages */
    const char *chat;             /* or one user message (text) */
    int64_t max_tokens;           /* tokens to generate, >= 1 */
    int top_k;                    /* alternatives per position, 0..GGUF_ENGINE_MAX_TOP */
    bool echo;                    /* ask for prompt log-probabilities too */
    bool add_special;             /* /tokenize: add BOS (as a completion would) */
} gguf_engine_request;

/*
 * The JSON body (NUL-terminated, malloc'd: free()) of a request. Every
 * generating request is greedy (temperature 0; llama-server also gets
 * top_k 1 and neutral penalties) and asks for the log-probabilities of the
 * top top_k tokens of every generated position; with echo, of the prompt
 * positions too, in the dialect's way (OpenAI echo, vLLM prompt_logprobs,
 * SGLang logprob_start_len 0; llama-server has none). vLLM also gets
 * return_token_ids and return_tokens_as_token_ids so that every position
 * comes back with its id.
 * @return 0; GGUF_E_INVALID (no prompt or two of them, a token-id prompt
 *         for chat, messages that are not a JSON array, max_tokens < 1,
 *         top_k out of range, an endpoint that takes no body); GGUF_E_NOMEM.
 */
int gguf_engine_request_build(char **out_body, const gguf_engine_request *rq, gguf_error *err);

/* ---- replies ---- */

typedef struct gguf_engine_alt {
    int32_t id;        /* token id; -1 when the engine gave text only */
    char *text;        /* token text as the engine wrote it; NULL when absent */
    double logprob;    /* -INFINITY for probability 0 */
} gguf_engine_alt;

typedef struct gguf_engine_pos {
    int32_t id;           /* token id; -1 when the engine gave text only */
    char *text;           /* token text; NULL when absent */
    double logprob;       /* NAN when the engine gave none (first prompt token) */
    bool prompt;          /* an input position (echo, prompt_logprobs) */
    bool unscored;        /* the engine gave the token but never scored it
                             (llama-server's accepted draft tokens): in the
                             sequence, not compared */
    int32_t n_top;
    gguf_engine_alt *top; /* the engine's alternatives, logprob descending
                             (ties keep the engine's order) */
} gguf_engine_pos;

/* Bits of gguf_engine_reply.found: what the reply contained. */
enum {
    GGUF_REPLY_LEGACY = 1u << 0,         /* legacy completions logprobs */
    GGUF_REPLY_CONTENT = 1u << 1,        /* logprobs.content[] (chat style) */
    GGUF_REPLY_PROMPT_LOGPROBS = 1u << 2, /* vLLM prompt_logprobs */
    GGUF_REPLY_SGLANG = 1u << 3,         /* meta_info token logprobs */
    GGUF_REPLY_LLAMA = 1u << 4,          /* completion_probabilities / probs */
    GGUF_REPLY_TOKEN_IDS = 1u << 5,      /* tokens as "token_id:N" */
};

typedef struct gguf_engine_reply {
    gguf_engine_pos *pos;    /* n_pos positions: n_prompt prompt ones, then generated */
    int64_t n_pos;
    int64_t n_prompt;
    int32_t *prompt_ids;     /* prompt ids the server reported (vLLM prompt_token_ids,
                                SGLang input logprobs), NULL when none */
    int64_t n_prompt_ids;
    int32_t *gen_ids;        /* generated ids the server reported (vLLM token_ids,
                                SGLang output_ids, llama-server tokens), NULL when none */
    int64_t n_gen_ids;
    char *text;              /* generated text (content; chat: reasoning + content) */
    char *reasoning;         /* chat: reasoning_content / reasoning, NULL when absent */
    char *finish_reason;     /* "length", "stop", ...; NULL when absent */
    char *model;             /* "model" of the reply, NULL when absent */
    int64_t completion_tokens; /* usage.completion_tokens, -1 when absent */
    uint32_t found;          /* GGUF_REPLY_* bits */
} gguf_engine_reply;

/*
 * Parse the body of a reply of endpoint ep (COMPLETIONS, CHAT, GENERATE or
 * COMPLETION). A reply without log-probabilities is valid (n_pos 0). The
 * number of echoed prompt positions comes from usage.completion_tokens
 * (which must then be an integer from 0 to the positions' count: else
 * GGUF_E_BAD_VALUE naming it; absent: no echo is assumed, see
 * completion_tokens)
 * (OpenAI shapes), from the input/output split (SGLang) or from vLLM's
 * prompt_logprobs, which become the leading positions when the reply echoes
 * none itself (their ids from prompt_token_ids, else -1).
 * @return 0 and *out (free with gguf_engine_reply_free); GGUF_E_BAD_VALUE
 *         naming the JSON path of the first bad field; GGUF_E_LIMIT;
 *         GGUF_E_INVALID (another endpoint); GGUF_E_NOMEM.
 */
int gguf_engine_reply_parse(gguf_engine_reply **out, gguf_engine_endpoint ep, const char *body,
                            size_t len, gguf_error *err);

void gguf_engine_reply_free(gguf_engine_reply *r);

/* Drop the positions from n on (text-only tokens that name no token: the
 * rest cannot be teacher-forced). n_prompt shrinks with them. */
void gguf_engine_reply_truncate(gguf_engine_reply *r, int64_t n);

/* One way an engine may write token `id` as text. A token may have several
 * (SentencePiece engines write " friend" inside a text and "friend" for the
 * token alone); several tokens may share one (then it names none). */
typedef struct gguf_engine_text {
    const char *text;
    int32_t id;
} gguf_engine_text;

/*
 * Give ids to positions and alternatives that came as text only, from the
 * texts the engine may write for each token (NULL and "" texts are skipped).
 * A text that several tokens share, and "", stay unresolved (-1): no id is
 * guessed. Prompt positions without an id take prompt_ids (the prompt's last
 * n_prompt ids, from the request or the engine) before any text is looked
 * up, and then their logprob from their alternatives.
 * @return the number of positions still without an id (alternatives without
 *         one are left out of the comparison), or GGUF_E_NOMEM.
 */
int64_t gguf_engine_reply_resolve(gguf_engine_reply *r, const gguf_engine_text *texts,
                                  int64_t n_texts, const int32_t *prompt_ids,
                                  int64_t n_prompt_ids);

/*
 * Parse a /tokenize reply: {"tokens": [ids]} (vLLM, SGLang, llama-server,
 * ref-forward serve), {"tokens": [{"id", "piece"}]} (llama-server
 * with_pieces) or {"input_ids": [ids]}. *ids is malloc'd (free()), non-NULL
 * on success even when *n is 0.
 * @return 0; GGUF_E_BAD_VALUE naming the field; GGUF_E_LIMIT; GGUF_E_NOMEM.
 */
int gguf_engine_tokens_parse(int32_t **ids, int64_t *n, const char *body, size_t len,
                             gguf_error *err);

/*
 * The error message of a refused request: OpenAI's {"error": {"message"}},
 * {"error": "text"}, FastAPI's {"detail": ...}, {"message": ...}; else the
 * start of the body. Writes at most size bytes (NUL-terminated, control
 * characters replaced) to buf and returns buf.
 */
char *gguf_engine_error_message(const char *body, size_t len, char *buf, size_t size);

/* What the probes of a server said (NULL body: the probe failed). */
typedef struct gguf_engine_probe {
    const char *models;      /* GET /v1/models */
    size_t models_len;
    const char *model_info;  /* GET /get_model_info */
    size_t model_info_len;
    const char *props;       /* GET /props */
    size_t props_len;
} gguf_engine_probe;

/*
 * Pick the dialect from the probes: /v1/models' data[0].owned_by "vllm",
 * "sglang" or "llamacpp" names the engine ("ggufkit", ref-forward serve,
 * speaks vLLM's extensions: VLLM); else a /props with
 * default_generation_settings is llama-server, a /get_model_info with
 * model_path is SGLang, any other /v1/models list is OPENAI. model (size
 * bytes, may be NULL) receives data[0].id ("" when unknown).
 * @return 0; GGUF_E_NOT_FOUND (no probe answered in a known way, message
 *         says which answered); GGUF_E_BAD_VALUE (a /v1/models body that is
 *         not a model list).
 */
int gguf_engine_detect(gguf_engine_api *api, char *model, size_t size,
                       const gguf_engine_probe *probe, gguf_error *err);

/* ---- comparison with the reference ---- */

/* Tolerances. A metric is checked when its bound is >= 0. The first four are
 * per position; outliers and median judge the run as a whole, so that a few
 * positions pushed over by a near-tie (an MoE routing flip, a bf16 rounding)
 * do not make a correct engine DIVERGED while a fault, which moves most
 * positions, still does (docs/check-engine.md, "Calibration"). */
typedef struct gguf_engine_tol {
    double dlogprob;   /* max |engine - reference| logprob of the chosen token
                          and of every alternative the engine reported (nats) */
    double kl;         /* max per-position KL over the union of the top-k (nats) */
    double top1;       /* min fraction of counted positions whose top-1 agrees */
    double tie;        /* reference top-1 minus top-2 logprob below which a
                          position is a near-tie: its top-1 is not counted */
    double outliers;   /* max fraction of the compared positions over a
                          per-position bound (off: none may be) */
    double median;     /* max median |dlogprob| of the chosen tokens (nats) */
} gguf_engine_tol;

/*
 * Named presets (docs/check-engine.md gives the measurements behind them):
 *                dlogprob  kl     top1  tie   outliers  median
 *   "default"    0.05      5e-3   0.9   0.02  0.2       0.01
 *              (an engine computing the same model in f32/f16; flags a wrong
 *              model, a fault)
 *   "strict"     1e-3      1e-5   1     1e-3  off       off   (f32 against f32,
 *              dense models: every position within bounds)
 *   "bf16"       0.1       0.05   0.9   0.1   0.2       0.05  (bf16 engines)
 *   "quant"      2.5       0.5    0.9   0.25  0.2       off   (a quantized
 *              deployment against a full-precision reference)
 * @return 0 or GGUF_E_INVALID for an unknown name.
 */
int gguf_engine_tol_preset(gguf_engine_tol *tol, const char *name);

/*
 * Apply "PRESET", "NAME=VALUE[,NAME=VALUE...]" or both ("bf16,kl=0.1") on
 * top of *tol; names dlogprob, kl, top1, tie, outliers, median; VALUE a
 * number >= 0 or "off". A bare number sets dlogprob (the grammar of
 * gguf_tol_parse, whose bare number sets its main bound, rel_l2).
 * @return 0 or GGUF_E_INVALID naming the bad item.
 */
int gguf_engine_tol_parse(gguf_engine_tol *tol, const char *spec, gguf_error *err);

/* Over-tolerance bits of a position. */
enum {
    GGUF_ENG_TOP1 = 1u << 0,     /* the top-1 differs (and it is no near-tie) */
    GGUF_ENG_DLOGPROB = 1u << 1, /* a logprob is off by more than tol.dlogprob */
    GGUF_ENG_KL = 1u << 2,       /* KL over the union above tol.kl */
};

#define GGUF_ENGINE_CMP_TOP 5 /* reference alternatives kept per position */

typedef struct gguf_engine_cmp_pos {
    int64_t index;          /* position in the reply */
    int64_t seq;            /* index of its token in the teacher-forced sequence */
    int32_t token;          /* the token at this position */
    bool prompt;
    bool tie;               /* near-tie in the reference */
    bool top1_agree;
    int32_t engine_top1;    /* -1 when unknown */
    int32_t ref_top1;
    double ref_gap;         /* reference top-1 minus top-2 logprob */
    double engine_logprob;  /* of token (NAN when the engine gave none) */
    double ref_logprob;
    double dlogprob;        /* |engine - ref| of token; NAN when not given */
    double dlogprob_top;    /* max over the engine's alternatives; NAN without */
    double kl;              /* KL over the union of the top-k; NAN without alternatives */
    int32_t ref_top[GGUF_ENGINE_CMP_TOP];     /* reference's best tokens */
    double ref_top_lp[GGUF_ENGINE_CMP_TOP];
    int32_t n_ref_top;
    uint32_t over;          /* GGUF_ENG_* bits */
} gguf_engine_cmp_pos;

typedef struct gguf_engine_cmp {
    gguf_engine_cmp_pos *pos;  /* the positions compared, in reply order */
    int64_t n_pos;
    int64_t n_skipped;         /* positions without a reference row (the first token) */
    int64_t n_unscored;        /* positions the engine never scored (not compared) */
    int64_t first_divergent;   /* index into pos of the first over position when the
                                  comparison disagrees, -1 when it agrees */
    int64_t n_over, n_ties;    /* positions over a per-position bound; near-ties */
    bool engine_nan;           /* the engine wrote null where it owes a number */
    int64_t n_not_greedy;      /* generated tokens below the engine's own top-1 (its
                                  sampler was not greedy); the top-1 compared is the
                                  engine's best, not its choice */
    double median_abs_dlogprob; /* over the chosen tokens (0 when none) */
    int64_t n_counted;         /* positions whose top-1 counts */
    int64_t n_agree;
    double top1_agreement;     /* n_agree / n_counted (1 when none counted) */
    double kl_topk_mean;       /* over positions with alternatives (0 when none) */
    double kl_topk_max;
    double max_abs_dlogprob;   /* over the chosen tokens and alternatives */
    double mean_abs_dlogprob;  /* over the chosen tokens */
    bool agree;                /* gguf_engine_judge over this reply alone */
    gguf_engine_tol tol;
} gguf_engine_cmp;

/*
 * Compare reply r with the reference. The teacher-forced sequence is
 * prompt ids followed by the generated positions' ids: its first
 * n_seq_prompt entries are the prompt, the reply's n_prompt prompt
 * positions are its last n_prompt prompt tokens, generated position j is
 * sequence index n_seq_prompt + j. logits holds n_rows rows of n_vocab
 * floats; row s is the reference's output after sequence token s, so the
 * position of sequence index s is compared with row s - 1 (index 0 has
 * none: skipped). Every compared position must have an id (see
 * gguf_engine_reply_resolve); alternatives without one are left out (and a prompt position with one
 * has no known engine top-1: a reply keyed by text may hide the best).
 * The reference is log-softmax(row) in double; KL(ref || engine) over
 * S = engine's alternatives + the reference's top |alternatives|, with a
 * tail bucket (docs/check-engine.md states the estimator).
 * @return 0 and *out (free with gguf_engine_cmp_free); GGUF_E_INVALID (a
 *         position without an id, or an id outside the vocabulary, naming
 *         the position; a sequence index without a row); GGUF_E_NOMEM.
 */
int gguf_engine_compare(gguf_engine_cmp **out, const gguf_engine_reply *r, int64_t n_seq_prompt,
                        const float *logits, int64_t n_rows, int64_t n_vocab,
                        const gguf_engine_tol *tol, gguf_error *err);

void gguf_engine_cmp_free(gguf_engine_cmp *c);

/*
 * The verdict over one or several comparisons (the prompts of a run, pooled):
 * agree when no engine number was null, the positions over a per-position
 * bound are at most tol.outliers of those compared (none when off), the
 * median |dlogprob| of the chosen tokens is at most tol.median, and the top-1
 * agreement is at least tol.top1. median_out (may be NULL) receives the
 * pooled median. @return true for agree; false also when out of memory.
 */
bool gguf_engine_judge(const gguf_engine_cmp *const *c, int n, const gguf_engine_tol *tol,
                       double *median_out);

GGUF_END_DECLS
#endif /* GGUF_ENGINE_H */
