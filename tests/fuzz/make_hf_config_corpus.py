#!/usr/bin/env python3
"""Writes the config.json seed corpus: valid configurations of every architecture and one
malformed configuration per error class.

Malformed inputs are named after the error they must produce, GGUF_E_<CODE>--what.json;
tests/unit/test_model_hf.c (corpus_named_errors) parses each and checks the code, and
fuzz_hf_config replays them all. Valid seeds start with ok--.
Run from anywhere: python3 tests/fuzz/make_hf_config_corpus.py (rewrites tests/fuzz/corpus/hf_config).
"""
import json
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "hf_config")

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
         "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 32, "rms_norm_eps": 1e-05, "vocab_size": 1024,
         "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": 1,
         "eos_token_id": 0, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}
DSV3 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
        "vocab_size": 1024, "q_lora_rank": 256, "kv_lora_rank": 256, "qk_nope_head_dim": 64,
        "qk_rope_head_dim": 32, "v_head_dim": 64, "n_routed_experts": 8, "n_shared_experts": 1,
        "num_experts_per_tok": 2, "moe_intermediate_size": 64, "first_k_dense_replace": 1,
        "n_group": 2, "topk_group": 1, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid", "topk_method": "noaux_tc", "rope_interleave": True,
        "rope_parameters": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 40.0, "mscale": 1.0,
                            "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                            "rope_theta": 10000.0, "rope_type": "yarn"}}
QWEN2 = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
         "rms_norm_eps": 1e-6, "vocab_size": 300, "rope_theta": 1000000.0,
         "use_sliding_window": False, "tie_word_embeddings": True}
QWEN3 = dict(QWEN2, architectures=["Qwen3ForCausalLM"], head_dim=32,
             rope_scaling={"rope_type": "yarn", "factor": 4.0,
                           "original_max_position_embeddings": 32768})
QWEN3MOE = dict(QWEN3, architectures=["Qwen3MoeForCausalLM"], num_experts=8,
                num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
                decoder_sparse_step=1, mlp_only_layers=[], rope_scaling=None)
GLM4MOE = {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "hidden_size": 128,
           "intermediate_size": 256, "num_hidden_layers": 3, "num_attention_heads": 8,
           "num_key_value_heads": 2, "head_dim": 32, "partial_rotary_factor": 0.5,
           "attention_bias": True, "use_qk_norm": True, "rms_norm_eps": 1e-5,
           "vocab_size": 512, "n_routed_experts": 8, "n_shared_experts": 1,
           "num_experts_per_tok": 2, "moe_intermediate_size": 32, "first_k_dense_replace": 1,
           "routed_scaling_factor": 2.5, "norm_topk_prob": True, "n_group": 1, "topk_group": 1,
           "num_nextn_predict_layers": 1, "rope_theta": 1000000}
GLMDSA = dict(DSV3, architectures=["GlmMoeDsaForCausalLM"], model_type="glm_moe_dsa",
              index_n_heads=4, index_head_dim=64, index_topk=16,
              mlp_layer_types=["dense", "sparse"], rope_parameters={"rope_theta": 1e6})
del GLMDSA["first_k_dense_replace"]
DSV2 = dict(DSV3, architectures=["DeepseekV2ForCausalLM"], model_type="deepseek_v2",
            q_lora_rank=None, scoring_func="softmax", topk_method="greedy", norm_topk_prob=False)
LLAMA3 = dict(LLAMA, rope_parameters=None, rope_theta=500000.0,
              rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})


def drop(c, *keys):
    return {k: v for k, v in c.items() if k not in keys}


def j(c):
    return json.dumps(c, indent=1).encode()


# The spellings transformers reads besides the ones above (tests/interop/
# test_hf_config_transformers.py checks them against transformers itself).
QWEN3MOE5 = dict(drop(QWEN3MOE, "num_experts", "rope_theta"), num_local_experts=8,
                 rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
GLM4MOE5 = dict(drop(GLM4MOE, "partial_rotary_factor", "rope_theta", "n_routed_experts"),
                num_local_experts=8, rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                                      "partial_rotary_factor": 0.25})
GLMDSA4 = dict(GLMDSA, num_hidden_layers=4, mlp_layer_types=["dense", "sparse", "sparse",
                                                              "sparse"])

CASES = {
    "ok--llama": j(LLAMA),
    "ok--llama3-rope": j(LLAMA3),
    "ok--deepseek-v3": j(DSV3),
    "ok--deepseek-v2": j(DSV2),
    "ok--kimi-k2": j(dict(DSV3, model_type="kimi_k2", n_group=1, topk_group=1)),
    "ok--qwen2": j(QWEN2),
    "ok--qwen3-yarn": j(QWEN3),
    "ok--qwen3moe": j(QWEN3MOE),
    "ok--glm4moe": j(GLM4MOE),
    "ok--glm-dsa": j(GLMDSA),
    "ok--model-type-only": j(drop(LLAMA, "architectures")),
    "ok--qwen3moe-num-local-experts": j(QWEN3MOE5),
    "ok--qwen3moe-both-expert-names": j(dict(QWEN3MOE5, num_experts=8)),
    "ok--deepseek-v2-num-experts": j(dict(drop(DSV2, "n_routed_experts"), num_experts=8)),
    "ok--deepseek-v3-num-local-experts": j(dict(drop(DSV3, "n_routed_experts"),
                                                num_local_experts=8, head_dim=32)),
    "ok--glm4moe-rope-parameters": j(GLM4MOE5),
    "ok--glm-dsa-num-experts": j(dict(drop(GLMDSA, "n_routed_experts"), num_experts=8,
                                      first_k_dense_replace=1, indexer_types=["full", "full"],
                                      layer_types=["indexed_attention"] * 2)),
    "ok--glm-dsa-first-k-clipped": j(dict(drop(GLMDSA, "mlp_layer_types"),
                                          first_k_dense_replace=3)),
    "ok--qwen2-sliding-unused": j(dict(QWEN2, use_sliding_window=True, sliding_window=4096,
                                       max_window_layers=1)),
    "ok--qwen3-rope-scaling-wins": j(dict(QWEN3, rope_parameters={"rope_type": "default",
                                                                  "rope_theta": 5.0})),
    "ok--qwen3-orig-ctx-top-level": j(dict(QWEN3, original_max_position_embeddings=8192)),
    "ok--llama-swish": j(dict(LLAMA, hidden_act="swish")),
    "GGUF_E_BAD_VALUE--not-json": b'{"hidden_size": 128,',
    "GGUF_E_BAD_VALUE--not-object": b"[1, 2]",
    "GGUF_E_DUPLICATE--duplicate-key": b'{"hidden_size": 1, "hidden_size": 2}',
    "GGUF_E_BAD_UTF8--invalid-utf8": b'{"model_type": "ll\xffama"}',
    "GGUF_E_LIMIT--deep": b'{"a":' * 40 + b"1" + b"}" * 40,
    "GGUF_E_NOT_FOUND--no-architecture": j(drop(LLAMA, "architectures", "model_type")),
    "GGUF_E_NOT_FOUND--missing-keys": j(drop(LLAMA, "hidden_size", "vocab_size")),
    "GGUF_E_NOT_FOUND--mla-missing-rank": j(drop(DSV3, "kv_lora_rank")),
    "GGUF_E_NOT_FOUND--llama3-missing": j(dict(LLAMA3, rope_scaling={"rope_type": "llama3",
                                                                     "factor": 8.0})),
    "GGUF_E_UNSUPPORTED--architecture": j(dict(LLAMA, architectures=["GPT2LMHeadModel"])),
    "GGUF_E_UNSUPPORTED--model-type": j(dict(drop(LLAMA, "architectures"), model_type="gpt2")),
    "GGUF_E_UNSUPPORTED--activation": j(dict(LLAMA, hidden_act="gelu")),
    "GGUF_E_UNSUPPORTED--sliding-window": j(dict(QWEN2, use_sliding_window=True,
                                                 max_window_layers=0)),
    "GGUF_E_UNSUPPORTED--sliding-layer-types": j(dict(QWEN3, use_sliding_window=True,
                                                      layer_types=["sliding_attention"])),
    "GGUF_E_UNSUPPORTED--rope-per-layer-type": j(dict(QWEN2, rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 1e6}})),
    "GGUF_E_UNSUPPORTED--yarn-no-truncate": j(dict(QWEN3, rope_scaling=dict(
        QWEN3["rope_scaling"], truncate=False))),
    "GGUF_E_UNSUPPORTED--dsa-shared-indexer": j(dict(GLMDSA, indexer_types=["full", "shared"])),
    "GGUF_E_UNSUPPORTED--dsa-topk-pattern": j(dict(GLMDSA, index_topk_pattern="FS")),
    "GGUF_E_UNSUPPORTED--dsa-topk-freq": j(dict(GLMDSA4, index_topk_freq=2)),
    "GGUF_E_UNSUPPORTED--v2-norm-topk": j(dict(DSV2, norm_topk_prob=True)),
    "GGUF_E_UNSUPPORTED--v2-sigmoid": j(dict(DSV2, scoring_func="sigmoid")),
    "GGUF_E_UNSUPPORTED--v2-group-limited": j(dict(DSV2, topk_method="group_limited_greedy")),
    "GGUF_E_UNSUPPORTED--v3-softmax": j(dict(DSV3, scoring_func="softmax")),
    "GGUF_E_UNSUPPORTED--v3-greedy-groups": j(dict(DSV3, topk_method="greedy")),
    "GGUF_E_UNSUPPORTED--attention-bias": j(dict(LLAMA, attention_bias=True)),
    "GGUF_E_UNSUPPORTED--mlp-bias": j(dict(LLAMA, mlp_bias=True)),
    "GGUF_E_UNSUPPORTED--rope-dynamic": j(dict(LLAMA, rope_parameters={"rope_type": "dynamic",
                                                                       "factor": 2.0})),
    "GGUF_E_UNSUPPORTED--mla-yarn-mscale": j(dict(DSV3, rope_parameters=dict(
        DSV3["rope_parameters"], mscale=0.707))),
    "GGUF_E_UNSUPPORTED--yarn-mscale-gqa": j(dict(QWEN3, rope_scaling={
        "rope_type": "yarn", "factor": 4.0, "mscale": 1.0})),
    "GGUF_E_UNSUPPORTED--rope-not-interleaved": j(dict(DSV3, rope_interleave=False)),
    "GGUF_E_UNSUPPORTED--sparse-step": j(dict(QWEN3MOE, decoder_sparse_step=2)),
    "GGUF_E_UNSUPPORTED--mlp-only-layers": j(dict(QWEN3MOE, mlp_only_layers=[0])),
    "GGUF_E_UNSUPPORTED--mlp-layer-types": j(dict(GLMDSA, mlp_layer_types=["sparse", "dense"])),
    "GGUF_E_UNSUPPORTED--moe-layer-freq": j(dict(DSV3, moe_layer_freq=2)),
    "GGUF_E_UNSUPPORTED--topk-method": j(dict(DSV3, topk_method="sinkhorn")),
    "GGUF_E_UNSUPPORTED--scoring-func": j(dict(DSV3, scoring_func="sqrtsoftplus")),
    "GGUF_E_WRONG_TYPE--string-int": j(dict(LLAMA, hidden_size="128")),
    "GGUF_E_WRONG_TYPE--fraction": j(dict(LLAMA, hidden_size=127.5)),
    "GGUF_E_WRONG_TYPE--architectures": j(dict(LLAMA, architectures="LlamaForCausalLM")),
    "GGUF_E_WRONG_TYPE--rope-scaling": j(dict(LLAMA, rope_parameters=None, rope_scaling="yarn")),
    "GGUF_E_WRONG_TYPE--bool": j(dict(LLAMA, tie_word_embeddings="yes")),
    "GGUF_E_WRONG_TYPE--eps": j(dict(LLAMA, rms_norm_eps="1e-5")),
    "GGUF_E_BAD_VALUE--negative": j(dict(LLAMA, num_hidden_layers=-2)),
    "GGUF_E_BAD_VALUE--over-cap": j(dict(LLAMA, hidden_size=1 << 30)),
    "GGUF_E_BAD_VALUE--zero-layers": j(dict(LLAMA, num_hidden_layers=0)),
    "GGUF_E_BAD_VALUE--zero-vocab": j(dict(QWEN2, vocab_size=0)),
    "GGUF_E_BAD_VALUE--heads-kv": j(dict(LLAMA, num_key_value_heads=3)),
    "GGUF_E_BAD_VALUE--eps": j(dict(LLAMA, rms_norm_eps=0)),
    "GGUF_E_BAD_VALUE--llama-partial-rope": j(dict(LLAMA, partial_rotary_factor=0.5)),
    "GGUF_E_BAD_VALUE--qwen3-partial-rope": j(dict(QWEN3, rope_scaling=None, rope_parameters={
        "rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5})),
    "GGUF_E_BAD_VALUE--experts-disagree": j(dict(QWEN3MOE5, num_experts=16)),
    "GGUF_E_BAD_VALUE--experts-unread-name": j(dict(drop(DSV3, "n_routed_experts"),
                                                    num_experts=8)),
    "GGUF_E_BAD_VALUE--mla-kv-heads": j(dict(DSV3, num_key_value_heads=1)),
    "GGUF_E_BAD_VALUE--v3-head-dim": j(dict(DSV3, head_dim=64)),
    "GGUF_E_BAD_VALUE--dense-layers-disagree": j(dict(GLMDSA, first_k_dense_replace=0)),
    "GGUF_E_BAD_VALUE--mla-nope": j(dict(DSV3, qk_nope_head_dim=0)),
    "GGUF_E_BAD_VALUE--expert-groups": j(dict(DSV3, n_group=3)),
    "GGUF_E_BAD_VALUE--experts-used": j(dict(DSV3, num_experts_per_tok=9)),
    "GGUF_E_BAD_VALUE--llama3-factors": j(dict(LLAMA3, rope_scaling=dict(
        LLAMA3["rope_scaling"], high_freq_factor=0.5))),
    "GGUF_E_BAD_VALUE--token-id": j(dict(LLAMA, eos_token_id=-3)),
    "GGUF_E_BAD_VALUE--rope-factor": j(dict(LLAMA, rope_parameters={"rope_type": "linear",
                                                                    "factor": 0})),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    for name, data in CASES.items():
        with open(os.path.join(OUT, name + ".json"), "wb") as f:
            f.write(data)
    print(f"{len(CASES)} files in {OUT}")


if __name__ == "__main__":
    main()
