"""SGLang 0.5.23's attention backend and page size for a model on a GPU, as its server arguments resolve them.

SGLang's page_size defaults to 1 token (arg_groups/overrides.py _page_size_default), but its post-processing changes
it for the backend it picks (arg_groups/overrides.py _mla_backend_page_constraints, _fa4_page_constraint): TensorRT-LLM
MHA (trtllm_mha) takes pages of 16, 32, 64 or 128 tokens and TensorRT-LLM MLA (trtllm_mla) of 32 or 64, else 64; FA4
on an MHA model pages of 128 whatever was asked. Those are the defaults on compute capability 10.x (B200, GB200,
B300: SGLang's is_sm100, CUDA 12.8 or later): get_default_attn_backend (arg_groups/model_override_base.py) gives an
MHA model trtllm_mha, or fa4 where K and V rows differ in width (ModelConfig.has_asymmetric_kv), and an MLA model
flashinfer, and under speculative decoding with its default top-k (not yet filled in when the backend is picked)
an MHA model FlashInfer too (Triton with attention sinks); the model overrides (arg_groups/model_overrides/) give
DeepseekV3ForCausalLM trtllm_mla (deepseek_v2.py), Falcon-H1 Triton (falcon_h1.py), a Granite 4.0-H with Mamba
layers FlashInfer (granitemoehybrid.py), MiMo-V2 fa4 (mimo_v2.py), Qwen3-Next and Qwen3.5 Triton with pages of 1
whatever is asked (qwen3_5.py: it runs before SGLang settles their radix cache's extra buffer, so it takes the
no-buffer case), Whisper FlashInfer (model_override_base.py), and Llama 4, gpt-oss, Gemma 4, OLMo 2 and Nemotron-H
trtllm_mha. DeepSeek Sparse Attention models page by 64 on CUDA whatever the GPU and the page asked
(deepseek_v2.py), and on AMD GPUs by 1 unless SGLANG_USE_AITER=1 with Triton 3.5 or later (its ROCm images set the
variable), then by 64: kvcalc takes 1 there, or the --block-size given for that case. Elsewhere
(Hopper, Ampere, Ada, RTX 50 series: compute capability 12.x is not is_sm100; AMD) the page is the one asked, or 1.
Checked against SGLang 0.5.23's own resolution (ServerArgs.resolve_once on a fake GPU) for 41 models on B200, GB200,
B300, RTX 5090 and H100 (a review of 2026-12-06).
"""

from __future__ import annotations

from kvcalc.attention import MLA, Heads
from kvcalc.settings import Settings
from kvcalc.spec import ModelSpec

# SGLang 0.5.23 on CUDA sets page_size to 64 · index_kpool (1 unless the config says) for DeepSeek DSA models, over
# any --page-size (arg_groups/model_overrides/deepseek_v2.py: "Setting page size to {page_size} for DeepSeek DSA")
SGLANG_DSA_PAGE = 64
SGLANG_DEFAULT_PAGE = 1  # arg_groups/overrides.py _page_size_default (CUDA and AMD)
TRTLLM_MHA_PAGES = (16, 32, 64, 128)  # _mla_backend_page_constraints: any other page_size becomes 64
TRTLLM_MLA_PAGES = (32, 64)  # likewise for trtllm_mla
TRTLLM_FORCED_PAGE = 64
FA4_PAGE = 128  # _fa4_page_constraint: an MHA model under fa4 on is_sm100, whatever the page asked
# Qwen3-Next and Qwen3.5 (model_overrides/qwen3_5.py): Triton and page_size 1 together, over any page asked
QWEN3_5_FAMILIES = frozenset({"qwen3_next", "qwen3_5_moe"})
# The families whose SGLang model override names their backend on is_sm100 (arg_groups/model_overrides/: falcon_h1.py,
# mimo_v2.py, qwen3_5.py; Whisper in get_default_attn_backend; llama4.py, gpt_oss.py, gemma4.py, olmo2.py and
# nemotron_h.py name trtllm_mha, with or without speculative decoding)
SM100_OVERRIDES = {"falcon_h1": "triton", "mimo_v2_flash": "fa4", "whisper": "flashinfer",
                   **dict.fromkeys(QWEN3_5_FAMILIES, "triton"),
                   **dict.fromkeys(("llama4", "gpt-oss", "gemma4", "olmo2", "nemotron_h"), "trtllm_mha")}


def is_sm100(s: Settings) -> bool:
    """Whether the settings' GPU is SGLang's is_sm100: an NVIDIA GPU of compute capability 10.x (B200, GB200, B300;
    SGLang also needs CUDA 12.8 or later there, which Blackwell needs anyway). Without --hardware, Hopper's."""
    hw = s.hardware
    return hw is not None and hw.platform == "cuda" and hw.capability is not None and hw.capability[0] == 10


def asymmetric_kv(spec: ModelSpec) -> bool:
    """Whether an MHA-style layer's key and value rows differ in width (SGLang's ModelConfig.has_asymmetric_kv:
    head_dim != v_head_dim; MiMo-V2-Flash's 192 and 128)."""
    return any(isinstance(g.attention, Heads) and g.attention.d_v(g.layer) != g.attention.d_h(g.layer) for g in spec.groups)


def sglang_backend(spec: ModelSpec, s: Settings) -> str:
    """SGLang 0.5.23's default attention backend for `spec` where it decides the page size: on is_sm100 'trtllm_mha',
    'trtllm_mla', 'fa4', 'flashinfer' or 'triton' (see the module's rules); 'dsa' for DeepSeek Sparse Attention
    anywhere; 'other' on other GPUs, whose backends page as asked."""
    from kvcalc.costs.prefill_form import sglang_mla_backend

    if spec.sparse_topk() is not None:
        return "dsa"
    if not is_sm100(s):
        return "other"
    if spec.family in SM100_OVERRIDES:
        return SM100_OVERRIDES[spec.family]
    if spec.family == "granitemoehybrid" and spec.has_states():  # only with Mamba layers (granitemoehybrid.py)
        return "flashinfer"
    if any(isinstance(g.attention, MLA) for g in spec.groups):  # SGLang's AttentionArch.MLA: trtllm_mla or flashinfer
        return sglang_mla_backend(spec, s)
    if s.mtp and spec.mtp_layers:  # speculative, its top-k still unset when picked: FlashInfer, which has no sinks
        return "triton" if any(getattr(g.attention, "sinks", False) for g in spec.groups) else "flashinfer"
    return "fa4" if asymmetric_kv(spec) else "trtllm_mha"


def engine_page(spec: ModelSpec, s: Settings) -> int | None:
    """The one page size the settings' engine gives every layer of `spec`: SGLang's (sglang_page); None under vLLM and
    ideal, whose pages are each layer's own (kvcalc.costs.paged.block_tokens, then vLLM's pool)."""
    return sglang_page(spec, s) if s.engine == "sglang" else None


def validated_page(spec: ModelSpec, s: Settings) -> int | None:
    """The page SGLang's extra-buffer check sees (arg_groups/mamba_hook.py validate_mamba_extra_buffer): the one asked,
    before a backend changes it, but Qwen3-Next's and Qwen3.5's on is_sm100, which their override has set to 1."""
    return SGLANG_DEFAULT_PAGE if is_sm100(s) and spec.family in QWEN3_5_FAMILIES else s.block_size


def sglang_page(spec: ModelSpec, s: Settings) -> int:
    """The page size in tokens SGLang 0.5.23 runs `spec` with at settings `s`: --block-size (its --page-size) or its
    default 1, as its backend on the settings' GPU changes it (sglang_backend; see the module's rules)."""
    asked = s.block_size
    backend = sglang_backend(spec, s)
    if backend == "dsa":  # on AMD: aiter_can_use_preshuffle_paged_mqa is false under SGLang's default environment
        rocm = s.hardware is not None and s.hardware.platform == "rocm"
        return (asked or SGLANG_DEFAULT_PAGE) if rocm else SGLANG_DSA_PAGE
    if backend == "fa4":
        return FA4_PAGE
    if backend == "triton" and spec.family in QWEN3_5_FAMILIES:
        return SGLANG_DEFAULT_PAGE
    if backend == "trtllm_mha":
        return asked if asked in TRTLLM_MHA_PAGES else TRTLLM_FORCED_PAGE
    if backend == "trtllm_mla":
        return asked if asked in TRTLLM_MLA_PAGES else TRTLLM_FORCED_PAGE
    return asked or SGLANG_DEFAULT_PAGE
