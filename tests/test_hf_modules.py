"""Imported configs follow what each family's modules build (transformers 5.25 modeling_<family>.py; vLLM 0.34.0
agrees where it has the model): a bias switch the modules do not read is ignored with a note, not counted; a
bidirectional Gemma is refused; a multimodal tie_word_embeddings is read at either level; a field is read under either
of its config class's names (attribute_map), and the forms transformers 5 re-saves (T5's scale_decoder_outputs,
Granite's layer names, Gemma 4's per_layer_config) give the published figures. Each count is written out from a small
config's numbers or compared with the same config in its other form."""

from __future__ import annotations

import json
import re

import pytest

from conftest import ConfigFolder
from kvcalc.costs.params import param_totals
from kvcalc.errors import SpecError
from kvcalc.hf import spec_from_config

CONFIGS = ConfigFolder("configs-extra-6")
REFERENCE_2026 = ConfigFolder("models-2026")
D, N_H, N_KV, D_H, D_FF, LAYERS, VOCAB = 512, 8, 2, 64, 1024, 6, 1000

BASE = {"hidden_size": D, "num_attention_heads": N_H, "num_key_value_heads": N_KV, "head_dim": D_H,
        "intermediate_size": D_FF, "num_hidden_layers": LAYERS, "vocab_size": VOCAB,
        "max_position_embeddings": 65536, "tie_word_embeddings": False, "sliding_window": None}
QKV_BIAS = N_H * D_H + 2 * N_KV * D_H  # b_Q, b_K, b_V of one layer
O_BIAS = D  # b_O
MLP_BIAS = 2 * D_FF + D  # gate and up (d_ff each), down (d)


def imported(**cfg):
    spec, imp = spec_from_config(cfg, "config.json", "m")
    return param_totals(spec)[0], imp.data.get("notes", "")


def total(model_type: str, **switches) -> tuple[int, str]:
    return imported(**BASE, model_type=model_type, **switches)


def test_llama_reads_both_switches():
    # LlamaAttention: q/k/v/o bias=attention_bias; LlamaMLP: gate/up/down bias=mlp_bias
    plain, _ = total("llama")
    assert total("llama", attention_bias=True)[0] - plain == LAYERS * (QKV_BIAS + O_BIAS)
    assert total("llama", mlp_bias=True)[0] - plain == LAYERS * MLP_BIAS


@pytest.mark.parametrize("model_type", ["mistral", "ministral3"])
@pytest.mark.parametrize("switch", ["attention_bias", "mlp_bias"])
def test_mistral_has_no_bias_whatever_the_config_says(model_type, switch):
    # MistralAttention, MistralMLP (and Ministral3's): bias=False on every projection
    plain, _ = total(model_type)
    count, notes = total(model_type, **{switch: True})
    assert count == plain
    assert f"{switch} true ignored: the {model_type} modules do not read it" in notes


def test_mixtral_attention_has_no_bias():
    cfg = {"num_local_experts": 4, "num_experts_per_tok": 2}
    plain, _ = total("mixtral", **cfg)
    count, notes = total("mixtral", attention_bias=True, **cfg)
    assert count == plain and "attention_bias true ignored" in notes


def test_qwen2_biases_are_q_k_v_only_whatever_the_switches():
    # Qwen2Attention: q/k/v bias=True, o_proj bias=False; Qwen2MLP: no bias. attention_bias used to add b_O (d per
    # layer) and mlp_bias the MLP's biases
    plain, _ = total("qwen2")
    llama, _ = total("llama")
    assert plain - llama == LAYERS * QKV_BIAS
    assert total("qwen2", attention_bias=True)[0] == total("qwen2", mlp_bias=True)[0] == plain


@pytest.mark.parametrize("model_type", ["qwen3", "gemma2", "gemma3_text", "olmo2", "cohere2"])
def test_families_reading_attention_bias_only(model_type):
    # q/k/v/o bias=config.attention_bias, MLP bias=False (modeling_qwen3, _gemma2, _gemma3, _olmo2, _cohere2)
    plain, _ = total(model_type)
    assert total(model_type, attention_bias=True)[0] - plain == LAYERS * (QKV_BIAS + O_BIAS)
    count, notes = total(model_type, mlp_bias=True)
    assert count == plain and "mlp_bias true ignored" in notes


def test_a_switch_the_family_ignores_is_still_checked_to_be_a_boolean():
    with pytest.raises(SpecError, match="mlp_bias: must be true or false, got 'yes'"):
        total("mistral", mlp_bias="yes")


def test_an_unknown_model_type_follows_llamas_rule():
    plain, _ = total("acme")
    assert total("acme", mlp_bias=True)[0] - plain == LAYERS * MLP_BIAS


def test_qwen3_next_attention_bias_covers_the_gate_half_of_q_proj():
    # Qwen3NextAttention: q_proj is d × 2·n_h·d_h with bias=attention_bias, so its bias is 2·n_h·d_h (query and
    # output gate); k, v (n_kv·d_h each) and o (d) as usual. One full-attention layer of four here.
    cfg = {**BASE, "model_type": "qwen3_next", "num_hidden_layers": 4, "full_attention_interval": 4,
           "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 32, "linear_value_head_dim": 32,
           "linear_conv_kernel_dim": 4, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
           "shared_expert_intermediate_size": 128, "decoder_sparse_step": 1}
    plain, _ = imported(**cfg)
    with_bias, _ = imported(**{**cfg, "attention_bias": True})
    assert with_bias - plain == 2 * N_H * D_H + 2 * N_KV * D_H + D


NEMOTRON_H = {"model_type": "nemotron_h", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 8,
              "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 1000, "max_position_embeddings": 65536,
              "hybrid_override_pattern": "M-M*-", "mamba_num_heads": 8, "mamba_head_dim": 32, "ssm_state_size": 16,
              "n_groups": 2, "conv_kernel": 4}


def test_nemotron_h_attention_has_no_bias():
    # NemotronHAttention: q/k/v/o bias=False (transformers 5.25; vLLM 0.34.0's nemotron_h.py likewise)
    plain, _ = imported(**NEMOTRON_H)
    count, notes = imported(**{**NEMOTRON_H, "attention_bias": True})
    assert count == plain and "attention_bias true ignored" in notes


def test_nemotron_h_mlp_bias_counts_on_mlp_blocks_and_is_refused_with_moe_blocks():
    # NemotronHMLP: up and down bias=mlp_bias (d_ff + d per MLP block, two blocks here); an MoE block's shared expert
    # is a NemotronHMLP too, whose biases kvcalc has no field for: refused rather than left out
    plain, _ = imported(**NEMOTRON_H)
    assert imported(**{**NEMOTRON_H, "mlp_bias": True})[0] - plain == 2 * (512 + 256)
    moe = {**NEMOTRON_H, "hybrid_override_pattern": "M-M*-E", "n_routed_experts": 4, "num_experts_per_tok": 2,
           "moe_intermediate_size": 128, "moe_shared_expert_intermediate_size": 256, "mlp_bias": True}
    with pytest.raises(SpecError, match="mlp_bias: biases on an MoE block's shared expert are not supported"):
        imported(**moe)


@pytest.mark.parametrize("model_type", ["gemma2", "gemma3_text"])
def test_a_bidirectional_gemma_is_refused(model_type):
    # EmbeddingGemma (gemma3_text, use_bidirectional_attention true): Gemma3Attention.is_causal is false and
    # Gemma3TextConfig halves the window: an encoder without a KV cache, which used to be read as a causal decoder
    with pytest.raises(SpecError, match="use_bidirectional_attention: true makes a bidirectional encoder"):
        total(model_type, use_bidirectional_attention=True)
    assert total(model_type, use_bidirectional_attention=False)[0] == total(model_type)[0]


GEMMA3_MM = {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", "hidden_size": 640,
                                                     "intermediate_size": 2048, "num_hidden_layers": 8}}
GEMMA3_VOCAB, GEMMA3_D = 262208, 640  # Gemma3TextConfig's vocab_size default; the config's hidden_size


def gemma3_mm(top=None, inner=None) -> int:
    cfg = json.loads(json.dumps(GEMMA3_MM))
    if top is not None:
        cfg["tie_word_embeddings"] = top
    if inner is not None:
        cfg["text_config"]["tie_word_embeddings"] = inner
    return imported(**cfg)[0]


def test_a_multimodal_tie_is_read_at_either_level():
    # transformers 4.x ties by text_config's tie_word_embeddings, 5.x by the top level's: the one a file gives is meant.
    # The top-level false of a 5.x re-save used to be passed over (tied: one vocab × d table short)
    tied = gemma3_mm()
    untied = tied + GEMMA3_VOCAB * GEMMA3_D
    assert gemma3_mm(top=False) == gemma3_mm(inner=False) == gemma3_mm(top=False, inner=False) == untied
    assert gemma3_mm(top=True) == gemma3_mm(inner=True) == tied


@pytest.mark.parametrize("model_type, text_type", [("gemma3", "gemma3_text"), ("mistral3", "mistral"),
                                                   ("qwen3_vl", "qwen3_vl_text"), ("llama4", "llama4_text")])
def test_a_multimodal_tie_that_differs_between_levels_is_refused(model_type, text_type):
    cfg = {"model_type": model_type, "tie_word_embeddings": True,
           "text_config": {**BASE, "model_type": text_type, "tie_word_embeddings": False}}
    with pytest.raises(SpecError, match="tie_word_embeddings: true at the top level but false in text_config"):
        imported(**cfg)


GPT2 = {"model_type": "gpt2", "n_embd": 256, "n_layer": 3, "n_head": 4, "vocab_size": 1000, "n_positions": 1024}


def test_gpt2_reads_its_fields_under_their_standard_names_too():
    # GPT2Config.attribute_map: hidden_size is n_embd, num_hidden_layers n_layer, num_attention_heads n_head,
    # max_position_embeddings n_positions. 3 layers of 4·256² + 4·256 (attention) + 8·256² + 4·256 + 256 (FFN) +
    # 4·256 (two LayerNorms); token and position tables (tied head); the final LayerNorm
    d = 256
    layer = 4 * d * d + 4 * d + 8 * d * d + 5 * d + 4 * d
    expected = 3 * layer + 1000 * d + 1024 * d + 2 * d
    standard = {"model_type": "gpt2", "hidden_size": 256, "num_hidden_layers": 3, "num_attention_heads": 4,
                "vocab_size": 1000, "max_position_embeddings": 1024}
    assert imported(**GPT2)[0] == imported(**standard)[0] == expected


@pytest.mark.parametrize("cfg, message", [
    ({**GPT2, "hidden_size": 512}, "hidden_size: 512, but n_embd is 256 (two names of one field)"),
    ({**GPT2, "num_hidden_layers": 3}, None),  # alike: accepted
    ({"model_type": "falcon", "hidden_size": 256, "n_embed": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
      "vocab_size": 1000}, "n_embed: 512, but hidden_size is 256"),
    ({"model_type": "t5", "d_model": 64, "hidden_size": 128, "num_heads": 2, "d_kv": 32, "num_layers": 1, "d_ff": 128,
      "vocab_size": 100, "relative_attention_num_buckets": 32}, "hidden_size: 128, but d_model is 64"),
])
def test_two_names_of_one_field_must_agree(cfg, message):
    # transformers 5.25 read gpt2's hidden_size 512 over n_embd 256 (attribute_map), FalconConfig the legacy n_embed
    # over hidden_size: kvcalc read the other one of each. Two values for one field are refused, not picked between.
    if message is None:
        assert imported(**cfg)[0] == imported(**GPT2)[0]
        return
    with pytest.raises(SpecError, match=re.escape(message)):
        imported(**cfg)


def test_granite_hybrid_layer_types_under_transformers_5_names():
    # transformers 5.25's GraniteMoeHybridConfig names the layers linear_attention (Mamba-2) and full_attention; the
    # published granite-4.0-h-small (4.x) names them mamba and attention (4 attention layers of 40): the same model
    cfg = CONFIGS.config("granite-4.0-h-small")
    renamed = {**cfg, "layer_types": [{"mamba": "linear_attention", "attention": "full_attention"}[t]
                                      for t in cfg["layer_types"]]}
    old, new = spec_from_config(cfg, "c", "m")[0], spec_from_config(renamed, "c", "m")[0]
    assert param_totals(new) == param_totals(old)
    assert [(g.layers, g.attention.kind) for g in new.layer_groups] == [(g.layers, g.attention.kind) for g in old.layer_groups]
    assert cfg["layer_types"].count("attention") == 4


def test_deepseek_v32_mlp_layer_types_must_match_the_dense_layers():
    # transformers 5.25's DeepseekV32Config/GlmMoeDsaConfig pick each layer's MLP by mlp_layer_types (derived from
    # first_k_dense_replace when absent); DeepSeek's code and vLLM read first_k_dense_replace (3 on V3.2). One that
    # agrees changes nothing; one that differs used to be passed over and is refused
    cfg = REFERENCE_2026.config("deepseek-v3.2")
    n = cfg["num_hidden_layers"]
    agreeing = {**cfg, "mlp_layer_types": ["dense"] * 3 + ["sparse"] * (n - 3)}
    assert param_totals(spec_from_config(agreeing, "c", "m")[0]) == param_totals(spec_from_config(cfg, "c", "m")[0])
    with pytest.raises(SpecError, match=re.escape("mlp_layer_types[3]: 'dense', but first_k_dense_replace 3 and "
                                                  "moe_layer_freq 1 make layer 3 'sparse'")):
        spec_from_config({**cfg, "mlp_layer_types": ["dense"] * 4 + ["sparse"] * (n - 4)}, "c", "m")
    with pytest.raises(SpecError, match="mlp_layer_types: must list 'dense' or 'sparse' for each of the 61 layers"):
        spec_from_config({**cfg, "mlp_layer_types": ["dense"] * 3}, "c", "m")


def test_t5_re_saved_by_transformers_5_keeps_its_untied_head():
    # transformers 5.25's T5Config turns the file's tie_word_embeddings into scale_decoder_outputs (not false: true)
    # and writes tie_word_embeddings true; a re-saved T5 v1.1 (untied: lm_head is vocab × d of its own) read the
    # written true and lost a table
    cfg = ConfigFolder("configs-extra-4").config("t5-v1_1-small")
    assert cfg["tie_word_embeddings"] is False
    resaved = {**cfg, "tie_word_embeddings": True, "scale_decoder_outputs": False, "is_decoder": False}
    original, again = spec_from_config(cfg, "c", "m")[0], spec_from_config(resaved, "c", "m")[0]
    assert param_totals(again) == param_totals(original) and not again.tie_embeddings
    t5_10 = {**cfg, "tie_word_embeddings": True, "scale_decoder_outputs": True}  # T5 1.0 re-saved: tied as before
    assert spec_from_config(t5_10, "c", "m")[0].tie_embeddings
    assert param_totals(original)[0] - param_totals(spec_from_config(t5_10, "c", "m")[0])[0] == cfg["vocab_size"] * cfg["d_model"]


def test_a_bad_value_under_the_second_name_is_named_as_written():
    standard = {"model_type": "gpt2", "hidden_size": "wide", "n_layer": 3, "n_head": 4, "vocab_size": 1000,
                "n_positions": 1024}
    with pytest.raises(SpecError, match="hidden_size: must be a whole number, got 'wide'"):
        imported(**standard)
    assert imported(**{**GPT2, "hidden_size": 256.0})[0] == imported(**GPT2)[0]  # JSON 256.0 is 256


@pytest.mark.parametrize("folder, name, key, alias", [
    ("configs-extra", "qwen3-vl-30b-a3b-instruct", "num_experts", "num_local_experts"),  # transformers 5.x re-save
    ("models", "mixtral-8x7b-v0.1", "num_local_experts", "num_experts"),
    ("models-2026", "gpt-oss-20b", "num_local_experts", "num_experts"),
    ("models-2026", "jamba-v0.1", "num_experts", "num_local_experts"),
    ("models-2026", "deepseek-v3.2", "n_routed_experts", "num_local_experts"),
])
def test_an_expert_count_under_its_other_name(folder, name, key, alias):
    # each config class's attribute_map names the expert count twice; a file (a transformers 5.x re-save writes the
    # class's own name) may use either: the same spec, and two different counts are refused
    cfg = ConfigFolder(folder).config(name)
    inner = cfg.get("text_config", cfg)
    assert key in inner
    moved = json.loads(json.dumps(cfg))
    target = moved.get("text_config", moved)
    target[alias] = target.pop(key)
    assert param_totals(spec_from_config(moved, "c", "m")[0]) == param_totals(spec_from_config(cfg, "c", "m")[0])
    target[key] = inner[key] + 1
    with pytest.raises(SpecError, match=re.escape(f"{alias}: {inner[key]}, but {key} is {inner[key] + 1}")):
        spec_from_config(moved, "c", "m")


def test_nemotron_h_expert_count_under_its_other_name():
    moe = {**NEMOTRON_H, "hybrid_override_pattern": "M-M*-E", "n_routed_experts": 4, "num_experts_per_tok": 2,
           "moe_intermediate_size": 128, "moe_shared_expert_intermediate_size": 256}
    renamed = {**{k: v for k, v in moe.items() if k != "n_routed_experts"}, "num_local_experts": 4}
    assert imported(**renamed)[0] == imported(**moe)[0]


def test_a_zero_count_under_the_second_name_is_read():
    # KimiLinearConfig.attribute_map: n_shared_experts is num_shared_experts; DeepseekV3Config: num_mtp_layers is
    # num_nextn_predict_layers. 0 is a count there (no shared expert, no MTP layer), not refused as a size
    cfg = REFERENCE_2026.config("deepseek-v3.2")
    moved = {**{k: v for k, v in cfg.items() if k != "num_nextn_predict_layers"}, "num_mtp_layers": 0}
    spec = spec_from_config(moved, "c", "m")[0]
    assert spec.mtp_layers == 0 and param_totals(spec) == param_totals(spec_from_config(cfg, "c", "m")[0])


def test_gemma4_per_layer_config_form_reads_as_published():
    # transformers 5.25 saves Gemma 4 with per_layer_config ({full layer: head_dim, num_key_value_heads}) in place of
    # global_head_dim and num_global_key_value_heads (vLLM 0.34.0's gemma4.py reads it); it was refused, and before
    # that read with the 512 default. gemma-4-26b-a4b re-saved that way is the same model: full layers of 2 KV heads
    # of 512, sliding ones of 8 of 256
    cfg = REFERENCE_2026.config("gemma-4-26b-a4b")
    text = {k: v for k, v in cfg["text_config"].items() if k not in ("global_head_dim", "num_global_key_value_heads")}
    full = [i for i, t in enumerate(text["layer_types"]) if t == "full_attention"]
    resaved = {**cfg, "text_config": {**text, "per_layer_config": {f"{i:02d}": {"head_dim": 512, "num_key_value_heads": 2}
                                                                   for i in full}}}
    original, again = spec_from_config(cfg, "c", "m")[0], spec_from_config(resaved, "c", "m")[0]
    assert param_totals(again) == param_totals(original)
    assert again.model_dump(exclude={"notes", "source"}) == original.model_dump(exclude={"notes", "source"})
    # both forms given alike: read; unlike, or a per-layer shape kvcalc has no field for: refused
    both = json.loads(json.dumps(resaved))
    both["text_config"].update(global_head_dim=512, num_global_key_value_heads=2)
    assert param_totals(spec_from_config(both, "c", "m")[0]) == param_totals(original)
    both["text_config"]["global_head_dim"] = 256
    with pytest.raises(SpecError, match="global_head_dim: 256, but per_layer_config gives the full layers 512"):
        spec_from_config(both, "c", "m")
    odd = json.loads(json.dumps(resaved))
    odd["text_config"]["per_layer_config"]["00"] = {"head_dim": 512}
    with pytest.raises(SpecError, match="per_layer_config: only one head_dim and num_key_value_heads for exactly the"):
        spec_from_config(odd, "c", "m")
