"""What vLLM's and SGLang's model files build, family by family, where it departs from the parallel layout's plain
rules (kvcalc.costs.parallel): which pipeline stages hold the embedding, final norm and LM head; which FFN blocks
stay whole on every tp rank or are padded; weights held twice (absorbed MLA up-projections) or wider (an fp32 head);
and the layouts an engine cannot run, refused. Each table names the engine files (vLLM 0.34.0, SGLang 0.5.23) it
was read from, in audits of every family kvcalc imports (the README's serving rules). The engines' cache rules (pages,
windows, buffers) are kvcalc.costs.paged's.
"""

from __future__ import annotations

from typing import NamedTuple

from kvcalc.attention import KV_PROJECTIONS, MLA, Heads, Mamba, Weight
from kvcalc.costs.params import ffn_runs
from kvcalc.dtypes import dtype_bits
from kvcalc.errors import KvcalcError
from kvcalc.settings import Settings
from kvcalc.spec import DenseFFN, ExtraWeights, ModelSpec, MoEFFN, NoFFN, ResolvedGroup


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) in integers (a rank's share of a split dimension; kvcalc.costs.parallel uses it too)."""
    return -(-a // b)


# vLLM MTP model files (0.34.0) whose input projection fc (2·d -> d) is a ColumnParallelLinear, split over tp:
# qwen3_next_mtp.py, qwen3_5_mtp.py (DeepSeek's and GLM's eh_proj is a whole nn.Linear)
VLLM_MTP_FC_SPLIT = frozenset({"qwen3_next", "qwen3_5_moe"})

# Families whose MTP drafter SGLang (0.5.23) sizes by rules kvcalc lacks: without a draft model path it leaves the
# draft layer out of the pool's cell (speculative_hook.py lists no default path for them; spec_aux_hidden_state.py)
# and reserves speculative_num_draft_tokens intermediate Mamba states per running request (kv_cache_configurator.py)
SGLANG_MTP_UNMODELLED = frozenset({"qwen3_next", "qwen3_5_moe"})

# vLLM model files (0.34.0) that build shared experts whole under sequence-parallel MoE (their MLP takes
# disable_tp=is_sequence_parallel): deepseek_v2.py (DeepSeek, Kimi K2; and GLM-5, its GlmMoeDsa on the CPU path, as
# DeepseekV32 on CUDA, models/deepseek_v32), llama4.py, qwen3_next.py (and qwen3_5.py, whose MoE block is
# Qwen3NextSparseMoeBlock), nemotron_h.py (NemotronHMoE's shared_experts)
VLLM_SP_SHARED = frozenset({"deepseek", "kimi", "glm", "llama4", "qwen3_next", "qwen3_5_moe", "nemotron_h"})

# ... and with one pipeline stage only: Kimi Linear on CUDA (models/kimi_k3/nvidia/model.py, KimiDecoderLayer
# use_sequence_parallel needs pipeline_parallel_size == 1; KimiMLP replicates unless VLLM_KIMI_K3_SHARD_SP_SHARED_EXPERT),
# whose dense layers are then whole too
VLLM_SP_SHARED_ONE_STAGE = frozenset({"kimi_linear"})

# Kimi Linear on CUDA without expert parallelism pads each routed expert's width to 256 · tp when its tp share would be
# narrower (KimiMoE: min_moe_intermediate_per_partition, default 256; padded_moe_intermediate_size)
KIMI_MOE_PAD = 256

# vLLM model files (0.34.0) that build the embedding, the final norm and the LM head on every pipeline stage (no
# is_first_rank / is_last_rank test in __init__; a tied head is the embedding): gpt_oss.py, gemma3.py, gemma4.py,
# mixtral.py, nemotron_h.py, falcon.py, gpt2.py (its position table too), jamba.py, granitemoehybrid.py, qwen3_moe.py
# (kvcalc's qwen3 family with MoE layers), qwen3_next.py (its final norm on the last stage only), commandr.py (Cohere
# 2; no lm_head: logits from the embedding), minicpm.py (MiniCPM3), gemma2.py (no lm_head either)
VLLM_HEAD_EVERY_STAGE = frozenset({"gpt-oss", "gemma3", "gemma4", "mixtral", "nemotron_h", "falcon", "gpt2", "jamba",
                                   "granitemoehybrid", "qwen3_next", "cohere2", "minicpm3", "gemma2"})

# vLLM model files (0.34.0) that build the embedding on every pipeline stage, the final norm and the head on the last
# only (a tied head is the embedding there): qwen3_5.py and models/qwen3_5/nvidia/model.py (Qwen3_5Model)
VLLM_EMBED_EVERY_STAGE = frozenset({"qwen3_5_moe"})

# Families vLLM (0.34.0) serves without pipeline parallelism (their model classes do not implement SupportsPP)
VLLM_NO_PP = frozenset({"gemma3n"})

# SGLang 0.5.23 model files that build an untied LM head on every pipeline stage (a ParallelLMHead with no
# is_last_rank test): llama.py (Llama, Mistral, Phi-3: LlamaForCausalLM), nemotron_nas.py, glm4_moe.py, mixtral.py,
# gpt_oss.py, granitemoehybrid.py, qwen3_moe.py (Qwen3MoeForCausalLM: kvcalc's qwen3 family with MoE layers; Qwen3-VL's
# MoE builds it on the last stage only)
SGLANG_HEAD_EVERY_STAGE = frozenset({"llama", "llama3", "mistral", "phi3", "nemotron-nas", "glm4_moe", "mixtral",
                                     "gpt-oss", "granitemoehybrid"})

# ... whose tied head is the stage's embedding, which the last stage does not build: llama.py and nemotron_nas.py set
# lm_head = model.embed_tokens, a PPMissingLayer there (no head to compute logits with), granitemoehybrid.py reads its
# .weight (an AttributeError while building): refused with --pp
SGLANG_TIED_NO_PP = frozenset({"llama", "llama3", "mistral", "phi3", "nemotron-nas", "granitemoehybrid"})

# SGLang model files that build the embedding on every stage: minimax_m2.py
SGLANG_EMBED_EVERY_STAGE = frozenset({"minimax-m2"})

# SGLang model files whose input embedding is a plain nn.Embedding, whole on every tp rank and unpadded:
# gemma3_causal.py (Gemma3TextScaledWordEmbedding; Gemma 3 and 3n's, and Gemma 4's in gemma4_causal.py), whisper.py
# (the decoder's embed_tokens)
SGLANG_WHOLE_EMBEDDING = frozenset({"gemma3", "gemma3n", "gemma4", "whisper"})
# ... and vLLM's: whisper.py (WhisperDecoder.embed_tokens, an nn.Embedding; proj_out, a ParallelLMHead, is tied to it:
# tie_weights sets its weight to the embedding's, so the head is that whole table)
VLLM_WHOLE_EMBEDDING = frozenset({"whisper"})
WHOLE_EMBEDDING = {"vllm": VLLM_WHOLE_EMBEDDING, "sglang": SGLANG_WHOLE_EMBEDDING}

# SGLang model files whose FFN layers take no quant_config, so quantized weights leave them in bf16: whisper.py (the
# encoder's and decoder's fc1 and fc2, a ColumnParallelLinear and a RowParallelLinear built without one; vLLM's pass it)
SGLANG_UNQUANTIZED_FFN = frozenset({"whisper"})

# ... and whose LM head is a table of its own even when the config ties it: whisper.py's proj_out, a ParallelLMHead
# filled from the embedding's tensor
SGLANG_OWN_HEAD = frozenset({"whisper"})

# SGLang model files without pipeline parallelism: their forward takes no pp_proxy_tensors, and model_runner.py asserts
# "Pipeline Parallel is not compatible with this model" when pp_size > 1 (commandr.py, falcon_h1.py, gemma2.py,
# gemma3_causal.py / gemma3_mm.py, gemma3n_causal.py / gemma3n_mm.py, gpt2.py, mllama4.py, minicpm3.py, olmo2.py,
# qwen3_next.py, starcoder2.py; OLMo 3 runs on olmo2.py: configs/olmo3.py names it Olmo2ForCausalLM)
SGLANG_NO_PP = frozenset({"cohere2", "falcon_h1", "gemma2", "gemma3", "gemma3n", "gpt2", "llama4", "minicpm3", "olmo2",
                          "olmo3", "qwen3_next", "starcoder2"})

# Families whose engine builds each MoE router (the gate and its e_score_correction_bias) in fp32, whatever the weights'
# dtype: vLLM's mimo_v2.py (moe_router_dtype, float32 by default), glm4_moe.py, minimax_m2.py and step3p5.py
# (GateLinear params_dtype=torch.float32); SGLang's glm4_moe.py (Glm4MoeGate), minimax_m2.py (the gate's params_dtype)
# and mimo_v2.py (MoEGate: moe_router_dtype, float32 by default)
FP32_ROUTER = {"vllm": frozenset({"mimo_v2_flash", "glm4_moe", "minimax-m2", "step3p5"}),
               "sglang": frozenset({"glm4_moe", "minimax-m2", "mimo_v2_flash"})}

# Every family kvcalc's importers write (kvcalc/hf), a bundled spec names or an engine rule names (step3p5: SGLang's
# hybrid-SWA pool, for a hand-written Step-3.5 spec): under --engine a family selects the engines' model-file rules
# above, so one outside this list (a typo in a hand-written spec) is warned of
KNOWN_FAMILIES = frozenset({
    "bart", "cohere2", "deepseek", "falcon", "falcon_h1", "gemma2", "gemma3", "gemma3n", "gemma4", "glm", "glm4_moe",
    "gpt-oss", "gpt2", "granitemoehybrid", "jamba", "kimi", "kimi_linear", "llama", "llama3", "llama4", "mimo_v2_flash",
    "minicpm3", "minimax", "minimax-m2", "ministral3", "mistral", "mixtral", "nemotron-nas", "nemotron_h", "olmo2",
    "olmo3", "openelm", "phi3", "qwen2", "qwen3", "qwen3_5_moe", "qwen3_next", "qwen3_vl", "starcoder2", "step3p5", "t5",
    "whisper",
})

# Weight dtypes an engine stores quantized (with scales), against the float ones it computes in
QUANTIZED_WEIGHTS = frozenset({"fp8", "int8", "int4"})
# Families whose MTP eh_proj (2·d → d) the engines build as an unquantized nn.Linear (or a ReplicatedLinear with no
# quant_config), in bf16 whatever the checkpoint: vLLM deepseek_mtp.py, deepseek_v32/nvidia/mtp.py, glm4_moe_mtp.py,
# mimo_v2_mtp.py, step3p5_mtp.py; SGLang deepseek_nextn.py, glm4_moe_nextn.py, mimo_v2_nextn.py, step3p5_mtp.py
# (Qwen3-Next's fc takes quant_config)
MTP_PROJ_BF16 = frozenset({"deepseek", "kimi", "glm", "glm4_moe", "mimo_v2_flash", "step3p5"})
# DeepSeek Sparse Attention's indexer weights the engines keep in bf16 under quantized weights: vLLM fuses wk and
# weights_proj with quant_config=None (deepseek_v2.py wk_weights_proj; FP8 wk upcast at load); SGLang keeps
# weights_proj in bf16 and fuses wk with it (bf16) only where the indexer's RoPE is interleaved (dsa_indexer.py
# use_dsa_indexer_fusion: not is_neox_style; GLM-5's indexer_rope_interleave), else quantizes wk
INDEXER_BF16 = {"vllm": ("W_IK", "W_IW"), "sglang": ("W_IW",)}
SGLANG_FUSED_INDEXER = frozenset({"glm"})
# Families whose 4-bit checkpoints are MXFP4 of the experts alone: under --weights-dtype int4 their attention stays
# bf16 (vLLM Mxfp4Config.get_quant_method: UnquantizedLinearMethod for every LinearBase; SGLang's on CUDA: None)
MXFP4_EXPERTS_ONLY = frozenset({"gpt-oss"})
# OCP MX: one E8M0 scale, a byte, a block of 32 values along a matrix's input (vLLM and SGLang mxfp4.py create_weights:
# w13_weight_scale and w2_weight_scale, uint8, mxfp4_block = 32)
MXFP4_BLOCK = 32


def mxfp4_scale_bytes(spec: ModelSpec, s: Settings, expert_params: int) -> int:
    """The block scales beside the MXFP4 experts a rank holds (their matrices' parameters `expert_params`): a byte a
    block of 32 under an engine and --weights-dtype int4 for MXFP4_EXPERTS_ONLY's families, else 0. At the
    checkpoint's shapes: the padding some MXFP4 backends add to the experts (to multiples of 64 to 256) is not
    counted (README)."""
    if s.engine not in ("vllm", "sglang") or s.weights_dtype != "int4" or spec.family not in MXFP4_EXPERTS_ONLY:
        return 0
    return ceil_div(expert_params, MXFP4_BLOCK)

# The short convolutions' weights of the recurrent mixers, which both engines build with no quant_config (vLLM 0.34.0
# mamba_mixer.py, mamba_mixer2.py and qwen_gdn_linear_attn.py conv1d; SGLang 0.5.23 mamba1.py, mamba.py, qwen3_next.py,
# qwen3_5.py conv1d: quant_config=None; KDA's are fp32 in both, kimi_gdn_linear_attn.py and kimi_linear.py, whose
# other 16 bits are left out as the small fp32 vectors are)
CONV_WEIGHTS = frozenset({"conv1d", "conv_q", "conv_k", "conv_v"})

VOCAB_PADDING = 64  # vLLM and SGLang vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE


class FfnSplit(NamedTuple):
    """How an engine splits a model's FFN blocks where it departs from tp (ffn_split): the ranks each routed expert
    (without expert parallelism), each shared expert and each dense FFN is split over, and the width a routed expert's
    share is padded up to (0: none)."""

    moe_tp: int
    shared_tp: int
    dense_tp: int
    moe_pad: int = 0


class Widths(NamedTuple):
    """Bits an engine keeps each kind of weight in (engine_extra_bytes's rules): `bits`, --weights-dtype's, for what it
    quantizes; `plain` for what it leaves unquantized (the activations' bf16 under quantized weights, else `bits`), the
    absorbed MLA copies too; `router` for the MoE routers; `head` for the LM head; `table` for the embedding's rows
    (a tied head's width where the head is widened in place)."""

    bits: int
    plain: int
    router: int
    head: int
    table: int


def widths(spec: ModelSpec, s: Settings) -> Widths:
    """The Widths of `spec`'s weights under the settings' engine (all `bits` without one)."""
    bits = dtype_bits(s.weights_dtype, "weights")
    if s.engine not in ("vllm", "sglang"):
        return Widths(bits, bits, bits, bits, bits)
    plain = 16 if s.weights_dtype in QUANTIZED_WEIGHTS else bits  # what is not quantized stays in bf16
    router = 32 if spec.family in FP32_ROUTER.get(s.engine, ()) else plain
    head = 32 if s.engine == "sglang" and spec.family == "falcon_h1" else plain  # falcon_h1.py: lm_head.float()
    return Widths(bits, plain, router, head, head if spec.tie_embeddings else plain)


def engine_extra_bytes(spec: ModelSpec, s: Settings, held: list[tuple[ResolvedGroup, int]],
                       ends: tuple[bool, bool, bool], routers: int = 0, draft_embedding: int = 0,
                       mtp_proj: int = 0, tables: int = 0, plain: int = 0) -> int:
    """Bytes a rank of a stage holds beyond its weights in the weights' dtype: (layer group as the rank holds it, its
    layers here) for `held`, stage_ends for `ends`, the MoE routers' parameters there for `routers`, an MTP drafter's
    own embedding there for `draft_embedding`, the MTP layers' eh_proj for `mtp_proj` and the extra weights' lookup
    tables (Gemma 3n's per-layer embeddings, a VocabParallelEmbedding or nn.Embedding: never quantized) for `tables`,
    and what else the rank's engine builds unquantized for `plain` (unquantized_params) (parameters).

    - Under quantized weights (fp8, int8, int4) the engines quantize only their linear layers and experts (vLLM
      Fp8Config.get_quant_method: LinearBase and RoutedExperts, None otherwise; SGLang's alike): the embedding,
      learned positions and LM head (VocabParallelEmbedding, ParallelLMHead: UnquantizedEmbeddingMethod) and the MoE
      routers (gates built with quant_config=None) stay in the activations' bf16; so do the MTP eh_proj of
      MTP_PROJ_BF16's families, the sparse-attention indexer's INDEXER_BF16 weights, the recurrent mixers'
      CONV_WEIGHTS (a parallel mixer's too: Falcon-H1's MambaMixer2), every matrix of vLLM's Mamba-1 mixer
      (mamba_mixer.py takes no quant_config: Jamba's in_proj, x_proj, dt_proj, out_proj) and the attention of
      MXFP4_EXPERTS_ONLY's families in int4 (their MXFP4 checkpoints, whose experts' block scales mxfp4_scale_bytes
      counts).

    - The absorbed MLA up-projections beside kv_b_proj (W_UK, W_UV), which the MHA prefill still runs: SGLang copies
      them always (deepseek_weight_loader.py post_load_weights: w_kc and w_vc, .contiguous(); minicpm3.py keeps
      them in kv_b_proj's stead, in its dtype: no bytes more), vLLM where kv_b_proj is quantized (MLAAttention.process_weights_after_loading: W_UK_T and W_UV
      dequantized by get_and_maybe_dequant_weights; views of an unquantized weight); a quantized one is dequantized to
      the activations' bf16 (block_quant_dequant), an unquantized one copied in its dtype.
    - Falcon-H1's LM head (or tied, its embedding) in fp32 under SGLang (falcon_h1.py: lm_head.float()).
    - The MoE routers of FP32_ROUTER's families in fp32."""
    if s.engine not in ("vllm", "sglang"):
        return 0
    w = widths(spec, s)
    extra = 0
    if mla_copies(spec, s):
        for rank, n in held:
            if n and isinstance(rank.attention, MLA):
                extra += n * _up_projections(rank) * w.plain
    extra += (_kept_in_bf16(spec, s, held, mtp_proj) + plain) * (w.plain - w.bits)
    extra += routers * (w.router - w.bits)
    table, positions, head = end_params(spec, s, ends)
    extra += head * (w.head - w.bits)
    # a tied head's float() is the embedding's, where the stage has no head of its own
    extra += table * ((w.table if not head else w.plain) - w.bits)
    extra += (positions + draft_embedding + tables) * (w.plain - w.bits)
    return -(-extra // 8)


def mla_copies(spec: ModelSpec, s: Settings) -> bool:
    """Whether the engine keeps the absorbed MLA up-projections W_UK, W_UV as copies beside kv_b_proj
    (engine_extra_bytes): SGLang always, vLLM where kv_b_proj is quantized; not for MiniCPM3, whose SGLang file
    replaces kv_b_proj with them in its own dtype (minicpm3.py post-load: w_kc, w_vc, del kv_b_proj; an fp8 one stays
    fp8 for bmm_fp8), and which vLLM runs without MLAAttention."""
    quantized = s.weights_dtype in QUANTIZED_WEIGHTS
    return spec.family != "minicpm3" and (s.engine == "sglang" or (s.engine == "vllm" and quantized))


def _up_projections(rank: ResolvedGroup) -> int:
    """Parameters of an MLA layer's W_UK and W_UV (kv_b_proj's halves), as `rank` holds them."""
    return sum(w.size for w in rank.attention.weights(rank.layer) if w.name in ("W_UK", "W_UV"))


def engine_read_extra_bits(spec: ModelSpec, s: Settings, held: list[tuple[ResolvedGroup, int]], head: int,
                           lookups: int, routers: int, mtp_proj: int, plain: int, absorbed: bool,
                           both: bool = False) -> int:
    """Bits beyond --weights-dtype's of the weights a pass reads, where the settings' engine keeps them wider
    (engine_extra_bytes's rules, widths): (layer group, its layers the pass runs) for `held`, the LM head's parameters
    (read whole) for `head`, the values looked up in the embedding, learned positions and extra tables for `lookups`,
    and the routers', MTP eh_proj's and unquantized_params' parameters it reads. `absorbed`: the pass reads MLA's
    W_UK, W_UV from the engine's copies (mla_copies; the absorbed decode) rather than from kv_b_proj (the MHA
    prefill, a naive decode); `both`: from both (a prefill some of whose forwards attend absorbed). Besides the widths, what the engine runs beyond the
    checkpoint's use: the V slot a fused qkv_proj holds for a layer whose values are its keys (engine_attention_weights),
    and under SGLang a KV-shared layer's K and V projections (traffic counts neither). 0 without an engine."""
    if s.engine not in ("vllm", "sglang"):
        return 0
    w = widths(spec, s)
    extra = (_kept_in_bf16(spec, s, held, mtp_proj) + plain) * (w.plain - w.bits)
    copies = mla_copies(spec, s) and absorbed
    for rank, n in held:
        if copies and isinstance(rank.attention, MLA):  # in kv_b_proj's stead, or beside it
            extra += n * _up_projections(rank) * (w.plain - (0 if both else w.bits))
        if not rank.layer.kv_shared:
            extra += n * sum(x.size for x in k_as_v(rank)) * w.bits
        elif s.engine == "sglang":  # a KV-shared layer runs its whole fused qkv_proj there, K and V dropped after
            # (gemma3n_causal.py, gemma4_causal.py; vLLM builds q_proj alone): its K and V weights read, k_norm not
            extra += n * sum(x.size for x in engine_attention_weights(rank, s)
                             if x.name in KV_PROJECTIONS and x.name != "k_norm") * w.bits
    extra += routers * (w.router - w.bits) + head * (w.head - w.bits)
    return extra + lookups * (w.table - w.bits)


def _kept_in_bf16(spec: ModelSpec, s: Settings, held: list[tuple[ResolvedGroup, int]], mtp_proj: int) -> int:
    """Parameters of a rank that quantized weights leave in bf16 beyond the embedding, head and routers (see
    engine_extra_bytes): the indexer's INDEXER_BF16 weights, the recurrent mixers' CONV_WEIGHTS (a parallel mixer's
    too), vLLM's Mamba-1 matrices, the attention of MXFP4_EXPERTS_ONLY's families in int4, and the MTP eh_proj of
    MTP_PROJ_BF16's families."""
    index = INDEXER_BF16.get(s.engine or "", ()) + (("W_IK",) if s.engine == "sglang" and spec.family in SGLANG_FUSED_INDEXER
                                                    else ())
    mxfp4 = s.weights_dtype == "int4" and spec.family in MXFP4_EXPERTS_ONLY
    params = mtp_proj if spec.family in MTP_PROJ_BF16 else 0
    for rank, n in held:
        if not n:
            continue
        weights = engine_attention_weights(rank, s)  # as the rank's weights are counted
        if isinstance(rank.attention, MLA) and rank.attention.indexed:
            params += n * sum(w.size for w in weights if w.name in index)
        whole = mxfp4 or (s.engine == "vllm" and isinstance(rank.attention, Mamba))
        params += n * sum(w.size for w in weights if w.role == "matrix" and (whole or w.name in CONV_WEIGHTS))
        if rank.parallel is not None:  # a mixer beside the attention (Falcon-H1's MambaMixer2): its convolution
            params += n * sum(w.size for w in rank.parallel.weights(rank.parallel_layer)
                              if w.role == "matrix" and w.name in CONV_WEIGHTS)
    return params


def unquantized_params(spec: ModelSpec, s: Settings, ffns: list[tuple[DenseFFN | MoEFFN | NoFFN, int]], first: bool) -> int:
    """Parameters of a rank that an engine builds with no quantization outside the layer weights _kept_in_bf16 reads,
    for a stage whose decoder runs (FFN block, its layers here) `ffns`, the first (`first`) holding the encoder: an
    encoder's extra_params (Whisper's convolutions and position table, nn.Conv1d and nn.Embedding in both engines' whisper.py; T5's
    and BART's tables: no linear layer among them) and SGLANG_UNQUANTIZED_FFN's FFN matrices, split over tp."""
    if s.engine not in ("vllm", "sglang"):
        return 0
    e = spec.encoder
    params = e.extra_params if first and e is not None else 0
    if s.engine == "sglang" and spec.family in SGLANG_UNQUANTIZED_FFN:
        for ffn, n in ffns + ([(e.ffn, e.n_layers)] if first and e is not None else []):
            if isinstance(ffn, DenseFFN):  # fc1 (d -> d_ff, split over tp) and fc2 (d_ff -> d); biases left out
                params += n * (3 if ffn.gated else 2) * spec.d_model * ceil_div(ffn.d_ff, s.tp)
    return params


def ffn_split(spec: ModelSpec, s: Settings) -> FfnSplit:
    """How the settings' engine splits `spec`'s FFN blocks (FfnSplit): routed experts over moe_tp(s); shared experts
    over tp, or whole where vLLM runs its MoE sequence-parallel (--ep with tp > 1 and dp > 1:
    ParallelConfig.use_sequence_parallel_moe, the default all2all backend allgather_reducescatter) and the model's file
    builds them whole (VLLM_SP_SHARED; VLLM_SP_SHARED_ONE_STAGE at pp 1); dense FFNs over tp, or whole there for
    Kimi Linear at pp 1 and for the files of DeepSeek Sparse Attention on CUDA at pp 1 (DeepSeek-V3.2, GLM-5:
    models/deepseek_v32/nvidia/model.py builds its dense DeepseekV2MLP with use_sequence_parallel, which needs
    pipeline_parallel_size == 1); Kimi Linear's routed experts padded (KIMI_MOE_PAD); under SGLang with --ep,
    Qwen3-Next's shared expert fused with the routed ones."""
    sequence_parallel = s.engine == "vllm" and s.ep > 1 and s.tp > 1 and s.dp > 1
    one_stage = sequence_parallel and s.pp == 1
    shared = (sequence_parallel and spec.family in VLLM_SP_SHARED) or (one_stage and spec.family in VLLM_SP_SHARED_ONE_STAGE)
    sparse_mla = spec.family in ("deepseek", "glm") and spec.sparse_topk() is not None
    dense = one_stage and (spec.family in VLLM_SP_SHARED_ONE_STAGE or sparse_mla)
    pad = KIMI_MOE_PAD if s.engine == "vllm" and spec.family == "kimi_linear" else 0
    if s.engine == "sglang" and spec.family == "qwen3_next" and s.ep > 1:
        # qwen2_moe.py on CUDA fuses Qwen3-Next's shared expert into FusedMoE, whose every expert-parallel rank holds
        # it at the routed experts' width, split over tp / ep (moe_tp_size)
        return FfnSplit(moe_tp(s), max(1, s.tp // s.ep), s.tp, pad)
    return FfnSplit(moe_tp(s), 1 if shared else s.tp, 1 if dense else s.tp, pad)


def head_every_stage(spec: ModelSpec, s: Settings) -> bool:
    """Whether every pipeline stage holds the embedding and LM head (VLLM_HEAD_EVERY_STAGE, under vLLM; the embedding
    alone: VLLM_EMBED_EVERY_STAGE, read where the stage's weights are summed)."""
    qwen3_moe = spec.family in ("qwen3", "qwen3_vl") and isinstance(spec.ffn, MoEFFN)  # qwen3_moe.py, qwen3_vl_moe.py
    return s.engine == "vllm" and s.pp > 1 and (spec.family in VLLM_HEAD_EVERY_STAGE or qwen3_moe)


def vocab_rows(spec: ModelSpec, s: Settings, split: bool = True) -> int:
    """Rows of the embedding (or LM head) one rank holds: the vocabulary split over tp, ceil(V / tp), or whole; under
    an engine first padded to a multiple of 64 (VocabParallelEmbedding's num_embeddings_padded, vLLM and SGLang), and
    under SGLang, split, to a multiple of 64 · tp where 64 alone does not divide over tp (its padding_size *= tp)."""
    v = spec.vocab_size
    if s.engine in ("vllm", "sglang"):
        v = ceil_div(v, VOCAB_PADDING) * VOCAB_PADDING
        if s.engine == "sglang" and split and v % s.tp:
            v = ceil_div(spec.vocab_size, VOCAB_PADDING * s.tp) * VOCAB_PADDING * s.tp
    return ceil_div(v, s.tp) if split else v


def moe_tp(s: Settings) -> int:
    """The ranks each routed expert is split over without expert parallelism: tp, and under vLLM dp · tp, since its
    MoE layers span the data-parallel ranks (fused_moe/config.py FusedMoEParallelConfig.make: flatten_tp_across_dp)."""
    return s.tp * s.dp if s.engine == "vllm" and s.ep == 1 else s.tp


def expert_ranks(s: Settings) -> int:
    """The ranks one copy of the routed experts spans, G (at least tp): ep where ep > tp, vLLM's dp · tp without --ep
    (moe_tp), else tp (a replica holds them all)."""
    return max(s.ep, moe_tp(s))


def expert_tokens(s: Settings, sequences: int) -> int:
    """The prefill tokens a rank's experts serve: those of the G / tp replicas its expert group spans (`sequences` a
    replica; G / tp need not be whole: --tp 4 --dp 3 --ep 6 spans 1.5), at most the batch's, rounded up."""
    return min(s.batch * s.ctx, -(-sequences * s.ctx * expert_ranks(s) // s.tp))


def rope_table_bytes(spec: ModelSpec, engine: str) -> int:
    """Bytes of the RoPE cos/sin table the engine keeps on every GPU, at most: max_position_embeddings rows of the
    rotary width (vLLM's and SGLang's get_rope: RotaryEmbedding.cos_sin_cache over torch.arange(max_position), one per
    rope configuration), in bf16 under vLLM (cast to the model's dtype) and fp32 under SGLang on CUDA: a table for each
    distinct head width (d_h, or MLA's d_R; Gemma 4's sliding 256 and global 512), all of a head taken to rotate (an
    upper bound where only part does: Qwen3-Next's quarter)."""
    widths = {getattr(g.attention, "qk_rope_head_dim", None) or g.head_dim or 0 for g in spec.groups}
    return spec.max_context * sum(widths) * (2 if engine == "vllm" else 4)


def engine_attention_weights(rank: ResolvedGroup, s: Settings) -> tuple[Weight, ...]:
    """A layer's attention weights as one rank holds them under the engine: a layer whose values come from its key
    projection (Gemma 4's attention_k_eq_v) still has a V slot in vLLM's and SGLang's fused qkv_proj, loaded with the
    key's weights (vLLM gemma4.py, SGLang gemma4_causal.py: should_dup_k_to_v); vLLM builds no K or V projection, nor
    k_norm, in a layer that reads an earlier layer's cache (gemma3n.py: KV-shared layers build q_proj only)."""
    weights = rank.attention.weights(rank.layer)
    if s.engine not in ("vllm", "sglang") or not isinstance(rank.attention, Heads):
        return weights
    weights += k_as_v(rank)
    if s.engine == "vllm" and rank.layer.kv_shared:
        weights = tuple(w for w in weights if w.name not in KV_PROJECTIONS)
    return weights


def k_as_v(rank: ResolvedGroup) -> tuple[Weight, ...]:
    """The V slot both engines' fused qkv_proj keeps, loaded with the key's weights, for a layer whose values are its
    keys (Gemma 4's attention_k_eq_v: vLLM gemma4.py, SGLang gemma4_causal.py should_dup_k_to_v); none otherwise."""
    att, layer = rank.attention, rank.layer
    if isinstance(att, Heads) and att.k_eq_v:
        return (Weight("W_V", "attn/v", (layer.d_model, att.n_kv * att.d_v(layer))),)
    return ()


def extra_per_rank(x: ExtraWeights, s: Settings) -> int:
    """One tp rank's part of a block of extra weights: split by tp, but for its `replicated` weights (replicated
    linears and norms, whole on every rank as the plain layout keeps norms, and as vLLM and SGLang hold them) and,
    under SGLang, its lookup table (an nn.Embedding: Gemma 3n's per-layer embeddings)."""
    whole = x.replicated + (x.table if s.engine == "sglang" else 0)
    return ceil_div(x.params - whole, s.tp) + whole


def extra_table_per_rank(x: ExtraWeights, s: Settings) -> int:
    """One tp rank's part of a block's lookup table, as extra_per_rank splits it: whole under SGLang, else by tp."""
    return x.table if s.engine == "sglang" else ceil_div(x.table, s.tp)


def stage_ends(spec: ModelSpec, s: Settings, stage: int, stages: int) -> tuple[bool, bool, bool]:
    """Whether a stage's GPU holds the embedding, the final norm and an LM head of its own (a tied head elsewhere is
    the embedding): the first stage the embedding, the last the norm and head (its own copy when tied, once pp > 1),
    except where the engine's model file builds them elsewhere (the tables above)."""
    first, last, tied = stage == 0, stage == stages - 1, spec.tie_embeddings
    if s.engine == "vllm":
        if head_every_stage(spec, s):  # a tied head is the embedding already there
            return True, last or spec.family != "qwen3_next", not tied
        if spec.family in VLLM_EMBED_EVERY_STAGE:
            return True, last, last and not tied
    if s.engine == "sglang":
        embedding = first or spec.family in SGLANG_EMBED_EVERY_STAGE
        text_moe = spec.family == "qwen3" and isinstance(spec.ffn, MoEFFN)  # qwen3_moe.py (not qwen3_vl_moe.py)
        every = s.pp > 1 and not tied and (spec.family in SGLANG_HEAD_EVERY_STAGE or text_moe)
        own = spec.family in SGLANG_OWN_HEAD  # a head of its own even when tied
        return embedding, last, every or (last and (not tied or stages > 1 or own))
    return first, last, last and (not tied or stages > 1)


def end_params(spec: ModelSpec, s: Settings, ends: tuple[bool, bool, bool]) -> tuple[int, int, int]:
    """Parameters one rank of a stage with stage_ends `ends` holds in its embedding table, learned positions and LM
    head (0 where it holds none): embedding_rows and vocab_rows times d_model, and ModelSpec.position_params. The final
    norm is counted with the other norms."""
    embedding, _, head = ends
    d = spec.d_model
    return (embedding_rows(spec, s) * d if embedding else 0, spec.position_params if embedding else 0,
            vocab_rows(spec, s) * d if head else 0)


def embedding_rows(spec: ModelSpec, s: Settings) -> int:
    """Rows of the input embedding one rank holds: vocab_rows, whole under SGLang's DP attention
    (VocabParallelEmbedding enable_tp=False), and whole and unpadded where SGLang's model file builds a plain
    nn.Embedding (WHOLE_EMBEDDING)."""
    if spec.family in WHOLE_EMBEDDING.get(s.engine or "", frozenset()):
        return spec.vocab_size
    return vocab_rows(spec, s, split=not s.dp_attention)


def _check_vllm_tp(spec: ModelSpec, tp: int) -> None:
    """A KvcalcError for a tp vLLM (0.34.0) cannot build: one that does not divide the vocabulary padded to 64
    (VocabParallelEmbedding asserts; SGLang pads to 64 · tp instead), and gpt-oss above its KV heads (gpt_oss.py divides
    them by tp with no floor of one: a ZeroDivisionError)."""
    padded = ceil_div(spec.vocab_size, VOCAB_PADDING) * VOCAB_PADDING
    if padded % tp:
        raise KvcalcError(f"--tp {tp} --engine vllm: vLLM splits {spec.name}'s vocabulary of {spec.vocab_size:,} rows, "
                          f"padded to {padded:,} (a multiple of 64), evenly over the tp ranks, and {tp} does not divide it")
    if spec.family == "gpt-oss":
        n_kv = min(g.attention.n_kv for g in spec.groups if isinstance(g.attention, Heads))
        if tp > n_kv:
            raise KvcalcError(f"--tp {tp} --engine vllm: vLLM's gpt-oss file divides {spec.name}'s {n_kv} KV heads by "
                              f"tp with no floor of one, so it runs at tp {n_kv} at most")


def _check_vllm_ffn(spec: ModelSpec, s: Settings) -> None:
    """A KvcalcError where vLLM cannot split a dense FFN's width (a dense layer's, a leading dense layer's, or the
    shared experts', which deepseek_v2.py builds as one MLP n_shared · d_ff wide) evenly over the ranks ffn_split gives it: its MergedColumnParallelLinear asserts every output size divides
    by tp, and ColumnParallelLinear and RowParallelLinear divide() (vllm/model_executor/layers/linear.py)."""
    split = ffn_split(spec, s)
    for run in ffn_runs(spec):
        ffn = run.ffn
        widths = ([("FFN", ffn.d_ff, split.dense_tp)] if isinstance(ffn, DenseFFN) else
                  [("shared experts", ffn.n_shared_experts * (ffn.shared_d_ff or ffn.moe_d_ff), split.shared_tp)]
                  if isinstance(ffn, MoEFFN) and ffn.n_shared_experts else [])
        for what, width, ranks in widths:
            if width % ranks:
                raise KvcalcError(f"--tp {s.tp} --engine vllm: vLLM splits {spec.name}'s {what} of width {width:,} "
                                  f"evenly over {ranks} ranks, and {ranks} does not divide it (its linear layers "
                                  "assert it)")


def _check_sglang(spec: ModelSpec, s: Settings) -> None:
    """A KvcalcError where SGLang (0.5.23) cannot run the layout, or builds it by rules kvcalc lacks."""
    if s.pp > 1 and spec.family in SGLANG_NO_PP:
        raise KvcalcError(f"--pp {s.pp} --engine sglang: SGLang runs {spec.name} without pipeline parallelism (its "
                          "model file takes no pipeline proxy tensors; give --pp 1, or no --engine)")
    if s.pp > 1 and s.mtp and spec.mtp_layers and s.dp_attention:
        # arg_groups/validation_hook.py check_pipeline_parallel_compat: pp with speculative decoding needs a prefill
        # node, or SGLANG_ENABLE_PP_SPEC, which refuses attention DP
        raise KvcalcError(f"--pp {s.pp} --mtp --dp-attention --engine sglang: SGLang serves pipeline parallelism with "
                          "speculative decoding only under SGLANG_ENABLE_PP_SPEC, which refuses attention DP "
                          "(check_pipeline_parallel_compat; give --pp 1, or leave out --mtp or --dp-attention)")
    if s.pp > 1 and spec.tie_embeddings and spec.family in SGLANG_TIED_NO_PP:
        raise KvcalcError(f"--pp {s.pp} --engine sglang: SGLang ties {spec.name}'s head to the embedding, which its "
                          "last pipeline stage does not build (give --pp 1, or no --engine)")
    if s.tp > 1 and spec.family == "gpt2":
        # gpt2.py: RadixAttention(num_kv_heads=total_num_heads) over a pool of its heads / tp a rank
        raise KvcalcError(f"--tp {s.tp} --engine sglang: SGLang's GPT-2 file declares all {spec.name}'s heads to each "
                          "rank's attention while its pool holds a tp-th of them, so it runs at tp 1 only")


def _check_mtp(spec: ModelSpec, s: Settings) -> None:
    """A KvcalcError where the engine runs `spec`'s MTP layers by rules kvcalc does not follow."""
    if s.engine == "sglang" and spec.family in SGLANG_MTP_UNMODELLED:
        raise KvcalcError(f"--mtp --engine sglang: SGLang sizes {spec.name}'s MTP drafter outside the pool rules kvcalc "
                          "follows (its draft layer left out of the pool budget, speculative Mamba states reserved per "
                          "request): give --engine vllm, or no --engine")
    if s.engine == "vllm" and s.pp > 1 and spec.family == "qwen3_next":
        # qwen3_next_mtp.py forward: the input branch runs on the first pipeline rank only, while the drafter sits on
        # the last, where it asserts intermediate tensors it is not given (qwen3_5_mtp.py branches on the inputs)
        raise KvcalcError(f"--mtp --pp {s.pp} --engine vllm: vLLM's Qwen3-Next drafter reads its input on the first "
                          "pipeline stage only but runs on the last, so it does not run with pipeline stages (give --pp 1)")


def check_engine(spec: ModelSpec, s: Settings) -> None:
    """A KvcalcError where the engine's model file cannot run the settings' layout, or runs it by rules kvcalc lacks
    (kvcalc.costs.parallel.check_layout asks it)."""
    if s.dp_attention and spec.family in ("minicpm3", "kimi_linear"):  # SGLang's DP attention, with an engine or not
        # minicpm3.py and kimi_linear.py split their attention (and embedding) over the whole tp group: no attention
        # tp group of their own, as DeepseekV2's MLA has
        raise KvcalcError(f"--dp-attention: SGLang has no DP attention for {spec.name}'s model file (it splits the "
                          "attention over every tp rank); DeepSeek's, Kimi K2's and GLM-5's MLA have it")
    if s.engine == "sglang":
        _check_sglang(spec, s)
    if s.engine == "vllm" and s.tp > 1:
        _check_vllm_tp(spec, s.tp)
        _check_vllm_ffn(spec, s)
    if s.pp > 1 and s.engine == "vllm" and spec.family in VLLM_NO_PP:
        # config/model.py verify_with_parallel_config: "Pipeline parallelism is not supported for this model" unless
        # the class implements SupportsPP, which Gemma3nForCausalLM and Gemma3nForConditionalGeneration do not
        raise KvcalcError(f"--pp {s.pp} --engine vllm: vLLM runs {spec.name} without pipeline parallelism (its model "
                          "classes do not support it; give --pp 1, or no --engine)")
    if s.engine == "vllm" and spec.family == "minicpm3":
        # minicpm3.py: MiniCPM3Attention expands kv_b_proj's keys and values and runs Attention(num_kv_heads = its
        # heads, head_size qk_head_dim), the values padded to the key's width: no latent cache
        raise KvcalcError(f"--engine vllm: vLLM caches {spec.name}'s expanded keys and values, the values padded to the "
                          "keys' width (its MiniCPM3 file runs no MLA), a cache kvcalc does not model; SGLang caches "
                          "the latent (--engine sglang, or no --engine)")
    if s.pp > 1 and s.engine == "vllm" and spec.family == "falcon_h1" and spec.tie_embeddings:
        # falcon_h1.py: the last stage ties lm_head to embed_tokens, a PPMissingLayer there (built on the first only)
        raise KvcalcError(f"--pp {s.pp} --engine vllm: vLLM ties {spec.name}'s head to an embedding its last stage "
                          "does not build, so a tied Falcon-H1 does not load with pipeline stages (give --pp 1)")
    if s.mtp and spec.mtp_layers:
        _check_mtp(spec, s)
