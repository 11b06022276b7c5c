/*
 * libFuzzer target for Hugging Face config.json: the hyper-parameters a
 * checkpoint's configuration gives (gguf_hparams_from_hf_config), and on
 * success the invariants the forward relies on. Corpus:
 * tests/fuzz/corpus/hf_config (tests/fuzz/make_hf_config_corpus.py),
 * malformed inputs named after their error.
 */
#include <stddef.h>
#include <stdint.h>

#include "gguf/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_hparams hp;
    gguf_error err;
    if (gguf_hparams_from_hf_config(&hp, (const char *)data, size, "fuzz/config.json", &err))
        return 0;
    if (hp.arch <= GGUF_ARCH_UNKNOWN || hp.arch >= GGUF_ARCH_COUNT || hp.n_layer < 1 ||
        hp.n_layer_main != hp.n_layer || hp.n_embd < 1 || hp.n_head < 1 || hp.n_vocab < 1 ||
        hp.n_rot % 2 || hp.n_rot > hp.n_embd_head_k || hp.n_expert_used > hp.n_expert ||
        !(hp.rms_eps > 0 && hp.rms_eps < 1) || (hp.is_mla && hp.n_head_kv != 1))
        __builtin_trap();
    return 0;
}
