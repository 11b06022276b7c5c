/* Engine module: request bodies of every dialect. Each generating request is
 * greedy and asks for the top-K log-probabilities of every position; the
 * fields are the engines' own (docs/check-engine.md cites where each is
 * documented). */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "util/error_lib.h"

/* The prompt as a JSON value: the text, or an array of token ids. */
static json_t *prompt_value(const gguf_engine_request *rq)
{
    if (rq->text)
        return json_string(rq->text);
    json_t *a = json_array();
    for (int64_t i = 0; a && i < rq->n_tokens; i++)
        if (json_array_append_new(a, json_integer(rq->tokens[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* The chat messages: the caller's JSON array, or one user message. */
static int messages_value(json_t **out, const gguf_engine_request *rq, gguf_error *err)
{
    if (rq->messages) {
        json_error_t je;
        json_t *m = json_loads(rq->messages, JSON_REJECT_DUPLICATES, &je);
        if (!json_is_array(m)) {
            json_decref(m);
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                             "messages: %s", m ? "not a JSON array" : je.text);
        }
        *out = m;
        return 0;
    }
    *out = json_pack("[{s:s, s:s}]", "role", "user", "content", rq->chat);
    return *out ? 0 : gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory for messages");
}

static int set(json_t *obj, const char *key, json_t *v)
{
    return v ? json_object_set_new(obj, key, v) : -1;
}

/* Every sampling field an engine would otherwise take from the model's
 * generation_config.json (vLLM; SGLang with model sampling defaults), at its
 * neutral value: a Qwen model's repetition_penalty 1.05 makes the engine's
 * greedy choice a penalized one. The OpenAI dialect gets only OpenAI's own
 * fields (a strict server refuses others); vLLM and SGLang take top_k -1 as
 * "every token" (vLLM's sampling_params.py, SGLang's sampling_params.py). */
static int set_neutral_sampling(json_t *o, gguf_engine_api api)
{
    int bad = set(o, "top_p", json_real(1));
    bad |= set(o, "presence_penalty", json_real(0));
    bad |= set(o, "frequency_penalty", json_real(0));
    if (api == GGUF_API_VLLM || api == GGUF_API_SGLANG) {
        bad |= set(o, "top_k", json_integer(-1));
        bad |= set(o, "min_p", json_real(0));
        bad |= set(o, "repetition_penalty", json_real(1));
    }
    return bad;
}

int gguf_engine_request_build(char **out_body, const gguf_engine_request *rq, gguf_error *err)
{
    *out_body = NULL;
    const gguf_engine_api api = rq->api == GGUF_API_AUTO ? GGUF_API_OPENAI : rq->api;
    const gguf_engine_endpoint ep = rq->endpoint;
    const bool chatty = ep == GGUF_EP_CHAT || (ep == GGUF_EP_TOKENIZE && (rq->messages || rq->chat));
    const int n_prompts = (rq->text != NULL) + (rq->n_tokens > 0) + (rq->messages != NULL) +
                          (rq->chat != NULL);
    if (ep >= GGUF_EP_MODELS || (unsigned)ep >= GGUF_EP_COUNT)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "%s takes no request body",
                         gguf_engine_endpoint_path(ep) ? gguf_engine_endpoint_path(ep) : "?");
    if (n_prompts != 1)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "a request needs exactly one of text, tokens, messages, chat (%d given)",
                         n_prompts);
    if (chatty != (rq->messages || rq->chat))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "%s takes %s", gguf_engine_endpoint_path(ep),
                         chatty ? "messages" : "a text or token-id prompt, not messages");
    if (ep == GGUF_EP_TOKENIZE && rq->n_tokens > 0)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "/tokenize takes text");
    if (ep != GGUF_EP_TOKENIZE && (rq->max_tokens < 1 || rq->max_tokens > 1000000))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "max_tokens %lld is not from 1 to 1000000", (long long)rq->max_tokens);
    if (rq->top_k < 0 || rq->top_k > GGUF_ENGINE_MAX_TOP)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "top_k %d is not from 0 to %d",
                         rq->top_k, GGUF_ENGINE_MAX_TOP);
    json_t *o = json_object();
    json_t *msgs = NULL;
    int rc = 0, bad = 0;
    if (!o)
        goto nomem;
    if (chatty && (rc = messages_value(&msgs, rq, err)))
        goto done;
    const bool vllm = api == GGUF_API_VLLM;
    switch (ep) {
    case GGUF_EP_COMPLETIONS:
        /* OpenAI legacy completions; vLLM: the Completions API docs and
         * vllm/entrypoints/openai/completion/protocol.py */
        if (rq->model)
            bad |= set(o, "model", json_string(rq->model));
        bad |= set(o, "prompt", prompt_value(rq));
        bad |= set(o, "max_tokens", json_integer(rq->max_tokens));
        bad |= set(o, "temperature", json_real(0));
        bad |= set_neutral_sampling(o, api);
        bad |= set(o, "logprobs", json_integer(rq->top_k));
        if (rq->echo)
            bad |= set(o, "echo", json_true());
        if (vllm) {
            if (rq->echo)
                bad |= set(o, "prompt_logprobs", json_integer(rq->top_k));
            bad |= set(o, "return_tokens_as_token_ids", json_true());
            bad |= set(o, "return_token_ids", json_true());
        } else if (api == GGUF_API_SGLANG) {
            /* SGLang >= 0.5.13 (ChatCompletionRequest in protocol.py): the
             * templated prompt's ids and /generate's meta_info per choice */
            bad |= set(o, "return_prompt_token_ids", json_true());
            bad |= set(o, "return_meta_info", json_true());
        }
        bad |= set(o, "stream", json_false());
        break;
    case GGUF_EP_CHAT:
        if (rq->model)
            bad |= set(o, "model", json_string(rq->model));
        bad |= set(o, "messages", json_incref(msgs));
        bad |= set(o, "max_tokens", json_integer(rq->max_tokens));
        bad |= set(o, "temperature", json_real(0));
        bad |= set_neutral_sampling(o, api);
        bad |= set(o, "logprobs", json_true());
        bad |= set(o, "top_logprobs", json_integer(rq->top_k));
        if (vllm) {
            if (rq->echo)
                bad |= set(o, "prompt_logprobs", json_integer(rq->top_k));
            bad |= set(o, "return_tokens_as_token_ids", json_true());
            bad |= set(o, "return_token_ids", json_true());
        } else if (api == GGUF_API_SGLANG) {
            /* SGLang >= 0.5.13 (ChatCompletionRequest in protocol.py): the
             * templated prompt's ids and /generate's meta_info per choice */
            bad |= set(o, "return_prompt_token_ids", json_true());
            bad |= set(o, "return_meta_info", json_true());
        }
        bad |= set(o, "stream", json_false());
        break;
    case GGUF_EP_GENERATE:
        /* SGLang's GenerateReqInput (io_struct.py) and sampling_params.md */
        bad |= set(o, rq->text ? "text" : "input_ids", prompt_value(rq));
        bad |= set(o, "sampling_params",
                   json_pack("{s:f, s:I, s:f, s:i, s:f, s:f, s:f, s:f}", "temperature", 0.0,
                             "max_new_tokens", (json_int_t)rq->max_tokens, "top_p", 1.0, "top_k",
                             -1, "min_p", 0.0, "repetition_penalty", 1.0, "presence_penalty",
                             0.0, "frequency_penalty", 0.0));
        bad |= set(o, "return_logprob", json_true());
        bad |= set(o, "logprob_start_len", json_integer(rq->echo ? 0 : -1));
        bad |= set(o, "top_logprobs_num", json_integer(rq->top_k));
        bad |= set(o, "return_text_in_logprobs", json_true());
        bad |= set(o, "stream", json_false());
        break;
    case GGUF_EP_COMPLETION:
        /* llama-server's /completion (tools/server/README.md): temperature <= 0
         * keeps only the most likely token; n_probs are taken from the full
         * softmax before sampling; no prompt cache reuse (batch sizes change
         * the logits) */
        bad |= set(o, "prompt", prompt_value(rq));
        bad |= set(o, "n_predict", json_integer(rq->max_tokens));
        bad |= set(o, "temperature", json_real(0));
        bad |= set(o, "top_k", json_integer(1));
        bad |= set(o, "repeat_penalty", json_real(1));
        bad |= set(o, "presence_penalty", json_real(0));
        bad |= set(o, "frequency_penalty", json_real(0));
        bad |= set(o, "dry_multiplier", json_real(0));
        bad |= set(o, "n_probs", json_integer(rq->top_k));
        bad |= set(o, "return_tokens", json_true());
        bad |= set(o, "cache_prompt", json_false());
        bad |= set(o, "stream", json_false());
        break;
    case GGUF_EP_TOKENIZE:
        if (api == GGUF_API_LLAMA_SERVER) {
            /* llama-server: content, add_special (BOS as /completion adds it) */
            if (chatty) {
                rc = gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                               "llama-server's /tokenize takes text, not messages");
                goto done;
            }
            bad |= set(o, "content", json_string(rq->text));
            bad |= set(o, "add_special", json_boolean(rq->add_special));
            bad |= set(o, "parse_special", json_true());
        } else {
            /* vLLM (and SGLang): prompt or messages, add_special_tokens */
            if (rq->model)
                bad |= set(o, "model", json_string(rq->model));
            if (chatty) {
                bad |= set(o, "messages", json_incref(msgs));
                bad |= set(o, "add_generation_prompt", json_true());
            } else {
                bad |= set(o, "prompt", json_string(rq->text));
                bad |= set(o, "add_special_tokens", json_boolean(rq->add_special));
            }
        }
        break;
    default:
        break;
    }
    if (bad)
        goto nomem;
    *out_body = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!*out_body)
        goto nomem;
    goto done;
nomem:
    rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory for a request body");
done:
    json_decref(msgs);
    json_decref(o);
    return rc;
}
