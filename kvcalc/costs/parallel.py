"""What one GPU holds when a model is served with tensor, pipeline, data and expert parallelism.

Rules (also in the README), with the engine behaviour they follow:
- Tensor parallelism (tp): tp must split every attention block's query heads evenly, and its K/V heads must divide tp
  or be divided by it (vLLM ModelConfig.verify_with_parallel_config, QKVParallelLinear); each attention kind says what
  one rank holds (`AttentionKind.per_rank`): query heads split;
  K/V heads split with each rank holding ceil(n_kv / tp), at least one (replicated when n_kv < tp; vLLM
  QKVParallelLinear); MLA's latent and RoPE key replicated on every rank; constant states split by heads (Gated
  DeltaNet, Mamba-2, lightning, KDA). Dense FFNs and shared experts split their hidden size (ceil(d_ff / tp)); each
  routed expert too, unless expert parallelism holds experts whole. Embedding and LM head are split by vocabulary
  (vLLM VocabParallelEmbedding / ParallelLMHead: ceil(V / tp) rows, V first padded to a multiple of 64 under
  --engine vllm|sglang, as both pad it); norms and routers whole.
- Expert parallelism (ep): each rank holds ceil(E / ep) routed experts, whole (vLLM FusedMoE with expert parallel);
  with ep below tp (SGLang: ep divides tp), each of them split over the tp / ep ranks that share it, its width
  ceil(d_ff / (tp / ep)) (FusedMoE: num_local_experts = E / moe_ep_size, intermediate_size / moe_tp_size).
- Pipeline parallelism (pp): layers split as vLLM's get_pp_indices does (vllm/distributed/utils.py): n // pp layers
  each, the remainder given one at a time to the stages before the last, from the second-last backwards (under
  SGLang as its get_pp_indices does: one more to each of the last n % pp stages); the first stage holds the
  embedding (and the encoder of an encoder–decoder model), the last the final norm and LM head (its own copy even when
  tied, once pp > 1), except where vLLM's model file builds embedding, norm and head on every stage
  (VLLM_HEAD_EVERY_STAGE) or the embedding alone (VLLM_EMBED_EVERY_STAGE); vLLM runs some models with one stage
  only (VLLM_NO_PP: refused); SGLang's files place them by their own rules (SGLANG_* tables; stage_ends,
  embedding_rows). The largest stage is reported.
- Engines hold some weights twice or wider (engine_extra_bytes): the absorbed MLA up-projections beside kv_b_proj
  (SGLang; vLLM when quantized), Falcon-H1's fp32 head (SGLang).
- Data parallelism (dp): dp replicas each serve ceil(batch / dp) sequences. With `dp_attention` (SGLang's DP
  attention for MLA models) the tp ranks of a replica split its sequences: each holds ceil(ceil(batch / dp) / tp)
  sequences' latent cache and runs their attention with the whole attention weights (SGLang's attention tp size is
  tp / dp_size, 1 here: DeepseekV2AttentionMLA splits its heads over attn_tp_size) and the whole input embedding
  (VocabParallelEmbedding(enable_tp=not is_dp_attention_enabled())); FFNs, experts and the LM head (enable_dp_lm_head
  off by default) stay split over tp.
- Expert parallelism spreads a stage's experts over its tp · dp GPUs (vLLM: ep = tp · dp; SGLang: ep divides tp), so
  ep must divide tp · dp. Without it, vLLM still spans the data-parallel ranks with its MoE layers: each routed expert
  is split over dp · tp ranks (fused_moe/config.py FusedMoEParallelConfig.make, flatten_tp_across_dp), so under
  --engine vllm a rank holds ceil(d_ff / (dp · tp)) of each; otherwise (SGLang, or no engine) a dp replica is a
  whole copy split over its tp ranks. Shared experts and dense FFNs stay split over tp, except under vLLM's
  sequence-parallel MoE (--ep, tp > 1, dp > 1), where some model files build the shared experts, and at pp 1 some
  the dense FFNs, whole (ffn_split); vLLM pads Kimi Linear's routed experts to 256 a tp rank (KIMI_MOE_PAD).
- With --engine the KV cache is counted in the engine's whole pages (kvcalc.costs.paged).
- Extra weights (blocks the schema has no type for, e.g. Gemma 3n's per-layer embeddings) sit on the first stage,
  split by tp (ceil(params / tp)).
- With --mtp the multi-token-prediction layers sit on the last stage, where the drafter reads the last layer's hidden
  states and shares the output head (vLLM DeepSeekMTP); they split by tp like the last layer, their eh_proj and
  norms whole on every rank (nn.Linear and RMSNorm there; under vLLM, Qwen3-Next's and Qwen3.5's fc is split over tp,
  VLLM_MTP_FC_SPLIT). Embedding and head are shared, as in the parameter count,
  except that under vLLM and SGLang with pp > 1 the drafter holds its own embedding (vLLM maybe_share_target_embed;
  SGLang pp_draft_embedding.py), split as the target's. SGLang sizes every stage's token pool with the MTP layers'
  cell added, though only the last stage holds them (Stage.sized, sglang_pools).
- GPUs = tp · pp · dp.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

from kvcalc.attention import MLA, Formula, Heads, Weight
from kvcalc.costs.cache import GroupTerm, group_cache, group_term
from kvcalc.costs.paged import PoolLayout, engine_groups, keeps_every_token, lookahead, sglang_buffers, vllm_layout
from kvcalc.costs.state import parts_bytes
from kvcalc.dtypes import dtype_bits
from kvcalc.errors import KvcalcError
from kvcalc.settings import Settings
from kvcalc.spec import DenseFFN, ExtraWeights, ModelSpec, MoEFFN, NoFFN, ResolvedGroup


def pp_stages(n_layers: int, pp: int, engine: str | None = None) -> list[range]:
    """The layers of each pipeline stage, as vLLM's get_pp_indices splits them (the remainder one at a time to the
    stages before the last, backwards), or under SGLang as its own get_pp_indices does (sglang/srt/distributed/utils.py:
    one more to each of the last n_layers % pp stages)."""
    sizes = [n_layers // pp] * pp
    extra = range(1, n_layers % pp + 1) if engine == "sglang" else range(2, n_layers % pp + 2)
    for i in extra:
        sizes[-i] += 1
    starts = [sum(sizes[:i]) for i in range(pp)]
    return [range(a, a + n) for a, n in zip(starts, sizes)]


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _rank_group(group: ResolvedGroup, tp: int) -> ResolvedGroup:
    """A layer group as one tensor-parallel rank holds it."""
    return dataclasses.replace(group, attention=group.attention.per_rank(group.layer, tp),
                               cross=group.cross.per_rank(group.cross_layer, tp) if group.cross else None,
                               parallel=group.parallel.per_rank(group.parallel_layer, tp) if group.parallel else None)


class FfnSplit(NamedTuple):
    """How an engine splits a model's FFN blocks where it departs from tp (ffn_split): the ranks each routed expert
    (without expert parallelism), each shared expert and each dense FFN is split over, and the width a routed expert's
    share is padded up to (0: none)."""

    moe_tp: int
    shared_tp: int
    dense_tp: int
    moe_pad: int = 0


def ffn_params_per_rank(ffn: DenseFFN | MoEFFN | NoFFN, d: int, tp: int, ep: int, split: FfnSplit | None = None) -> int:
    """Weights of one FFN layer on one rank (see the module's rules); `split`: the engine's departures from tp
    (ffn_split), None for none."""
    if isinstance(ffn, NoFFN):
        return 0
    split = split or FfnSplit(tp, tp, tp)
    mats = 3 if ffn.gated else 2
    up = 2 if ffn.gated else 1
    if isinstance(ffn, DenseFFN):
        ff = _ceil(ffn.d_ff, split.dense_tp)
        return mats * d * ff + ((up * ff + d) if ffn.bias else 0)
    if ep > 1:  # ceil(E / ep) experts; below tp each split over the tp / ep ranks sharing them (SGLang moe_tp_size)
        experts, ff = _ceil(ffn.n_routed_experts, ep), (_ceil(ffn.moe_d_ff, tp // ep) if ep < tp else ffn.moe_d_ff)
    else:
        width = ffn.moe_d_ff
        if tp > 1 and width // tp < split.moe_pad:  # padded so each tp rank's share is moe_pad wide (KIMI_MOE_PAD)
            width = split.moe_pad * tp
        experts, ff = ffn.n_routed_experts, _ceil(width, split.moe_tp)
    routed = experts * (mats * d * ff + ((up * ff + d) if ffn.expert_bias else 0))
    shared = ffn.n_shared_experts * mats * d * _ceil(ffn.shared_d_ff or ffn.moe_d_ff, split.shared_tp) + (d if ffn.shared_gate else 0)
    router = d * ffn.n_routed_experts + (ffn.n_routed_experts if ffn.router_bias else 0)
    return routed + shared + router


class PerGpu(NamedTuple):
    """What the busiest GPU holds: its stage, KV cache, constant states and weights, in bytes (a named tuple: a row of
    a sweep makes one)."""

    gpus: int
    stage: int
    layers: range
    kv_cache_bytes: int
    state_bytes: int
    weights_bytes: int


@dataclass(frozen=True)
class _StageGroup:
    """A layer group's part of a stage: `n` of its layers, as one rank holds them (their cache at ctx 1, one sequence)."""

    label: str  # the layer group's
    n: int
    term: GroupTerm
    state_elements: int  # one layer's constant state, one sequence
    state_parts: tuple[tuple[int, str], ...]  # the same by storage dtype: (elements, dtype) pairs
    engine_state_bytes: int | None  # one layer's state as the engine stores it, one sequence (--engine)
    latent_split: bool  # SGLang's DP attention splits this group's sequences over the tp ranks
    pad: int = 0  # vLLM's padding slots of its attention spec on this stage, in layers (PoolLayout.pads)
    pad_state: int = 0  # the same for its constant state's spec


@dataclass(frozen=True)
class Stage:
    """A pipeline stage apart from the context and batch: its groups and the bytes of its weights."""

    stage: int
    layers: range
    groups: tuple[_StageGroup, ...]
    weights_bytes: int
    held_back: int = 0  # bytes of the pool no sequence gets (vLLM: BlockPool's null block, one block of the pool)
    sized: tuple[_StageGroup, ...] = ()  # layers the engine's pool sizing counts here but no pool holds (sglang_pools)


def mtp_layers_on(spec: ModelSpec, s: Settings, stage: int) -> tuple[int, ...]:
    """The multi-token-prediction layers `stage` holds: under --mtp all of them on the last stage (the module's rules),
    none elsewhere; PerGpu.layers is the stage's decoder layers alone."""
    group = spec.mtp_group() if s.mtp else None
    last = len(pp_stages(spec.n_layers, s.pp, s.engine)) - 1
    return group.layers if group is not None and stage == last else ()


def held_layers_text(layers: Sequence[int], mtp: Sequence[int]) -> str:
    """'layers 31-60 and the MTP layer 61': a stage's layers for a reader, its multi-token-prediction layers named."""
    from kvcalc.spec import layer_text

    whole = isinstance(layers, range) and len(layers) > 1  # a stage's range: its ends, not 10⁶ indices walked
    text = f"layers {layers[0]}-{layers[-1]}" if whole else f"layers {layer_text(list(layers))}"
    return text + (f" and the MTP layer{'s' if len(mtp) > 1 else ''} {layer_text(list(mtp))}" if mtp else "")


def stages(spec: ModelSpec, s: Settings) -> tuple[Stage, ...]:
    """Every stage of the settings' layout apart from the context and batch, once per spec and layout (see the module's
    rules)."""
    key = ("stages", s.tp, s.pp, s.ep, s.dp_attention, s.weights_dtype, s.kv_dtype, s.mla_cache, s.kv_quant, s.engine,
           s.block_size, s.state_dtype, s.enc_ctx, s.mtp, ffn_split(spec, s))
    return spec.memo(key, _plan_stages, spec, s)


def _plan_stages(spec: ModelSpec, s: Settings) -> tuple[Stage, ...]:
    from kvcalc.costs.params import weights_bytes

    enc = s.encoder_tokens(spec.encoder.source_len if spec.encoder else None)
    mtp = spec.mtp_group() if s.mtp else None
    everyone = engine_groups(spec, s) + ((mtp,) if mtp is not None else ())  # --mtp: as kv_cache counts them
    ranks = [_rank_group(g, s.tp) for g in everyone]
    # SGLang's DP attention: a rank runs its sequences' MLA attention with every head (attention tp size 1), so it
    # holds their whole cache, not a tp-th of the heads' (the same for the latent, which every rank holds anyway)
    held = [g if s.dp_attention and isinstance(g.attention, MLA) else rank for g, rank in zip(everyone, ranks)]
    layout = vllm_layout(held, s, spec.mtp_layers if s.mtp else 0)  # each rank sizes its own pages
    one = dataclasses.replace(s, ctx=1, batch=1, tp=1, pp=1, dp=1, ep=1)
    every = keeps_every_token(spec.family, s.engine)
    ahead = lookahead(spec.mtp_layers, s)
    caches = [group_cache(g, one, enc, every, layout, j, {}, ahead) for j, g in enumerate(held)]  # padding: by stage, below
    ranges = pp_stages(spec.n_layers, s.pp, s.engine)
    out = []
    for i, layers in enumerate(ranges):
        last = i == len(ranges) - 1
        # vLLM groups the whole model's layers and projects the groups on each stage (get_kv_cache_configs)
        here = frozenset(layers) | (frozenset(mtp.layers) if mtp is not None and last else frozenset())
        pads = (layout.pads(here) if layout is not None
                else sglang_buffers(everyone, s, spec.encoder.n_layers if spec.encoder and i == 0 else 0, layers,
                                    spec.family))
        groups, sized = [], []
        for j, (group, gc) in enumerate(zip(everyone, caches)):
            n = len(group.layers) if group is mtp else bisect_left(group.layers, layers.stop) - bisect_left(group.layers, layers.start)
            if group is mtp and not last:  # the MTP layers on the last stage
                if s.engine == "sglang":  # SGLang sizes every stage's pool for them (sglang_pools)
                    sized.append(_StageGroup(group.label, n, group_term(gc, one, enc, ahead), state_elements=0,
                                             state_parts=(), engine_state_bytes=None, latent_split=False))
                n = 0
            pad, pad_state = pads.get((j, "kv"), 0), pads.get((j, "state"), 0)
            if n or pad or pad_state:  # its layers here, or vLLM's padding slots of their spec
                groups.append(_StageGroup(group.label, n, group_term(gc, one, enc, ahead), gc.state_elements_per_layer, gc.state_parts,
                                          gc.engine_state_bytes_per_layer,
                                          s.dp_attention and isinstance(group.attention, MLA), pad, pad_state))
        # SGLang's DP attention runs attention at attention-tp size 1: every rank holds the whole attention weights
        weighed = list(everyone) if s.dp_attention else ranks
        params = _stage_params(spec, s, i, layers, len(ranges), weighed[:len(spec.groups)])
        if last and mtp is not None:
            params += _mtp_params_per_rank(spec, s, weighed[-1])
        counted = [(rank, len(group.layers) if group is mtp else
                   bisect_left(group.layers, layers.stop) - bisect_left(group.layers, layers.start))
                   for group, rank in zip(everyone, weighed) if group is not mtp or last]
        extra = engine_extra_bytes(spec, s, counted, stage_ends(spec, s, i, len(ranges)))
        out.append(Stage(i, layers, tuple(groups), weights_bytes(params, s.weights_dtype) + extra,
                         null_block_bytes(s, layout, here, groups), tuple(sized)))
    return tuple(out)


def engine_extra_bytes(spec: ModelSpec, s: Settings, held: list[tuple[ResolvedGroup, int]],
                       ends: tuple[bool, bool, bool]) -> int:
    """Bytes a rank of a stage holds beyond its weights in the weights' dtype: (layer group as the rank holds it, its
    layers here) for `held`, stage_ends for `ends`.

    - The absorbed MLA up-projections beside kv_b_proj (W_UK, W_UV), which the MHA prefill still runs: SGLang copies
      them always (deepseek_weight_loader.py post_load_weights: w_kc and w_vc, .contiguous(); minicpm3.py deletes
      kv_b_proj after), vLLM where kv_b_proj is quantized (MLAAttention.process_weights_after_loading: W_UK_T and W_UV
      dequantized by get_and_maybe_dequant_weights; views of an unquantized weight); a quantized one is dequantized to
      the activations' bf16 (block_quant_dequant), an unquantized one copied in its dtype.
    - Falcon-H1's LM head (or tied, its embedding) in fp32 under SGLang (falcon_h1.py: lm_head.float())."""
    if s.engine not in ("vllm", "sglang"):
        return 0
    bits = dtype_bits(s.weights_dtype, "weights")
    quantized = s.weights_dtype in QUANTIZED_WEIGHTS
    copy_bits = 16 if quantized else bits
    extra = 0
    if s.engine == "sglang" or (quantized and spec.family != "minicpm3"):  # vLLM runs MiniCPM3 without MLAAttention
        for rank, n in held:
            if n and isinstance(rank.attention, MLA):
                up = sum(w.size for w in rank.attention.weights(rank.layer) if w.name in ("W_UK", "W_UV"))
                kept = bits if spec.family == "minicpm3" else 0  # the copies replace kv_b_proj there
                extra += n * up * (copy_bits - kept)
    embedding, _, head = ends
    if s.engine == "sglang" and spec.family == "falcon_h1" and (head or (embedding and spec.tie_embeddings)):
        rows = vocab_rows(spec, s) if head else embedding_rows(spec, s)
        extra += rows * spec.d_model * (32 - bits)
    return -(-extra // 8)


def null_block_bytes(s: Settings, layout: PoolLayout | None, here: frozenset[int], groups: list[_StageGroup]) -> int:
    """Bytes of the one block vLLM's pool holds back on a stage's GPU: BlockPool.__init__ takes block 0 out of its free
    queue as the null block (vllm/v1/core/block_pool.py, 0.34.0), so num_blocks − 1 blocks hold sequences. A block is
    one page in each of the pool's tensors: the hybrid pool's slots of its unified page, or else one page of every
    layer (kv_cache_planning: bytes_per_block, the group's page sizes summed). 0 under other engines."""
    if s.engine != "vllm":
        return 0
    if layout is not None:
        return layout.slots(here) * layout.page
    kv = sum((g.n + g.pad) * g.term.page_bytes for g in groups if g.term.block is not None)
    return kv + sum((g.n + g.pad_state) * (g.engine_state_bytes or 0) for g in groups)


def _mtp_params_per_rank(spec: ModelSpec, s: Settings, rank: ResolvedGroup) -> int:
    """The multi-token-prediction layers' weights on one rank of the last stage: each a block like the last layer,
    split as it is, and eh_proj (2·d × d) with enorm, hnorm and the shared head's norm, whole (kvcalc.costs.params
    mtp_params is the same at tp 1)."""
    from kvcalc.costs.params import ffn_of_layer, mtp_proj_and_norms

    attention = sum(w.size for w in rank.attention.weights(rank.layer))
    ffn = ffn_params_per_rank(ffn_of_layer(spec, spec.n_layers - 1), spec.d_model, s.tp, s.ep, ffn_split(spec, s))
    # under pipeline stages the drafter keeps an embedding of its own, the head stays shared: vLLM's
    # (spec_decode eagle utils maybe_share_target_embed returns early when pp > 1) and SGLang's, whose last stage has
    # no target embedding to share (speculative/pp_draft_embedding.py resolve_draft_embed_and_head loads the draft's
    # own VocabParallelEmbedding, split as the target's: whole under DP attention)
    engine = s.engine in ("vllm", "sglang")
    own_embedding = vocab_rows(spec, s, split=not s.dp_attention) * spec.d_model if engine and s.pp > 1 else 0
    proj, norms = mtp_proj_and_norms(spec)
    if s.engine == "vllm" and spec.family in VLLM_MTP_FC_SPLIT:  # fc's d outputs split over tp (2·d inputs each)
        proj = 2 * spec.d_model * _ceil(spec.d_model, s.tp)
    return spec.mtp_layers * (attention + ffn + proj + norms) + own_embedding


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
# ... and whose LM head is a table of its own even when the config ties it: whisper.py's proj_out, a ParallelLMHead
# filled from the embedding's tensor
SGLANG_OWN_HEAD = frozenset({"whisper"})
# SGLang model files without pipeline parallelism: their forward takes no pp_proxy_tensors, and model_runner.py asserts
# "Pipeline Parallel is not compatible with this model" when pp_size > 1 (commandr.py, falcon_h1.py, gemma2.py,
# gemma3_causal.py / gemma3_mm.py, gemma3n_causal.py / gemma3n_mm.py, gpt2.py, mllama4.py, minicpm3.py, olmo2.py,
# qwen3_next.py, starcoder2.py)
# Weight dtypes an engine stores quantized (with scales), against the float ones it computes in
QUANTIZED_WEIGHTS = frozenset({"fp8", "int8", "int4"})
SGLANG_NO_PP = frozenset({"cohere2", "falcon_h1", "gemma2", "gemma3", "gemma3n", "gpt2", "llama4", "minicpm3", "olmo2",
                          "qwen3_next", "starcoder2"})
VOCAB_PADDING = 64  # vLLM and SGLang vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE


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
    sparse_mla = spec.family in ("deepseek", "glm") and any(isinstance(g.attention, MLA) and g.attention.indexed
                                                           for g in spec.groups)
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
        v = _ceil(v, VOCAB_PADDING) * VOCAB_PADDING
        if s.engine == "sglang" and split and v % s.tp:
            v = _ceil(spec.vocab_size, VOCAB_PADDING * s.tp) * VOCAB_PADDING * s.tp
    return _ceil(v, s.tp) if split else v


def moe_tp(s: Settings) -> int:
    """The ranks each routed expert is split over without expert parallelism: tp, and under vLLM dp · tp, since its
    MoE layers span the data-parallel ranks (fused_moe/config.py FusedMoEParallelConfig.make: flatten_tp_across_dp)."""
    return s.tp * s.dp if s.engine == "vllm" and s.ep == 1 else s.tp


def _stage_params(spec: ModelSpec, s: Settings, stage: int, layers: range, stages: int, ranks: list[ResolvedGroup]) -> int:
    """Weights of one rank of a stage (see the module's rules)."""
    from kvcalc.costs.params import encoder_params, ffn_runs

    tp, d = s.tp, spec.d_model
    norm = 2 * d if spec.norm == "layernorm" else d
    params = 0
    for group, rank in zip(spec.groups, ranks):
        n = bisect_left(group.layers, layers.stop) - bisect_left(group.layers, layers.start)
        if not n:
            continue
        weights = engine_attention_weights(rank, s)
        weights += rank.cross.weights(rank.cross_layer) if rank.cross else ()
        weights += rank.parallel.weights(rank.parallel_layer) if rank.parallel else ()
        norms = spec.layer_groups[group.index].norms_per_layer or spec.norms_per_layer
        params += n * (sum(w.size for w in weights) + norms * norm)
    split = ffn_split(spec, s)
    params += sum(run.count_in(layers.start, layers.stop) * ffn_params_per_rank(run.ffn, d, tp, s.ep, split)
                  for run in ffn_runs(spec))
    embedding, final_norm, head = stage_ends(spec, s, stage, stages)
    if embedding:
        params += embedding_rows(spec, s) * d
        params += spec.max_context * d if spec.learned_positions else 0
    if stage == 0:
        params += _encoder_per_rank(spec, tp) if spec.encoder else sum(encoder_params(spec).values())
        params += sum(extra_per_rank(x, s) for x in spec.extra_weights.values())
    params += norm if final_norm else 0
    params += vocab_rows(spec, s) * d if head else 0
    return params


def engine_attention_weights(rank: ResolvedGroup, s: Settings) -> tuple[Weight, ...]:
    """A layer's attention weights as one rank holds them under the engine: a layer whose values come from its key
    projection (Gemma 4's attention_k_eq_v) still has a V slot in vLLM's and SGLang's fused qkv_proj, loaded with the
    key's weights (vLLM gemma4.py, SGLang gemma4_causal.py: should_dup_k_to_v); vLLM builds no K or V projection, nor
    k_norm, in a layer that reads an earlier layer's cache (gemma3n.py: KV-shared layers build q_proj only)."""
    weights = rank.attention.weights(rank.layer)
    if s.engine not in ("vllm", "sglang") or not isinstance(rank.attention, Heads):
        return weights
    att, layer = rank.attention, rank.layer
    if att.k_eq_v:
        weights += (Weight("W_V", "attn/v", (layer.d_model, att.n_kv * att.d_v(layer))),)
    if s.engine == "vllm" and layer.kv_shared:
        weights = tuple(w for w in weights if w.name not in ("W_K", "W_V", "b_K", "b_V", "k_norm"))
    return weights


def extra_per_rank(x: ExtraWeights, s: Settings) -> int:
    """One tp rank's part of a block of extra weights: split by tp, but for what vLLM and SGLang replicate (its
    `replicated` weights) and, under SGLang, its lookup table (an nn.Embedding: Gemma 3n's per-layer embeddings)."""
    whole = x.replicated + (x.table if s.engine == "sglang" else 0) if s.engine in ("vllm", "sglang") else 0
    return _ceil(x.params - whole, s.tp) + whole


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


def embedding_rows(spec: ModelSpec, s: Settings) -> int:
    """Rows of the input embedding one rank holds: vocab_rows, whole under SGLang's DP attention
    (VocabParallelEmbedding enable_tp=False), and whole and unpadded where SGLang's model file builds a plain
    nn.Embedding (SGLANG_WHOLE_EMBEDDING)."""
    if s.engine == "sglang" and spec.family in SGLANG_WHOLE_EMBEDDING:
        return spec.vocab_size
    return vocab_rows(spec, s, split=not s.dp_attention)


def stage_gpu(s: Settings, plan: Stage) -> PerGpu:
    """One stage's GPU at the settings' context and batch: the cache and states of its share of the sequences."""
    kv = state = 0
    for g in plan.groups:
        kv += (g.n + g.pad) * _layer_kv(s, g)
        state += _group_state(s, g)
    return _new(PerGpu, (s.tp * s.pp * s.dp, plan.stage, plan.layers, kv, state, plan.weights_bytes))


def _layer_kv(s: Settings, g: _StageGroup) -> int:
    """One layer's cache of a stage group on one GPU, its share of the sequences (--engine: in whole pages)."""
    return g.term.layer_bytes(s.ctx, _sequences(s, g), s)


def _group_state(s: Settings, g: _StageGroup) -> int:
    """The constant states of a stage group's layers on one GPU, its share of the sequences (--engine: its pages)."""
    if g.engine_state_bytes is not None:  # the engine's state pages, with vLLM's padding slots
        return (g.n + g.pad_state) * _sequences(s, g) * g.engine_state_bytes
    return g.n * parts_bytes(g.state_parts, _sequences(s, g)) if g.state_elements else 0


class SGLangPools(NamedTuple):
    """One stage's GPU as SGLang's static pools divide it (fit): the cache its full-attention layers and its sliding
    (or chunked) layers hold at the settings, the bytes one token takes in each (a token in every such layer), the page
    size, one sequence's constant states with the sequences that hold them, and the bytes a token takes in layers the
    sizing counts here but no pool holds (full, sliding: Stage.sized)."""

    full_bytes: int
    swa_bytes: int
    full_rate: Fraction
    swa_rate: Fraction
    block: int
    state_per_sequence: int
    sequences: int
    sized_full_rate: Fraction = Fraction(0)
    sized_swa_rate: Fraction = Fraction(0)


def sglang_pools(s: Settings, plan: Stage) -> SGLangPools:
    """SGLang's view of one stage's GPU under --engine sglang: a windowed or chunked layer that the engine frees
    (its hybrid-SWA models, kvcalc.costs.paged.keeps_every_token) draws on the SWA pool, every other layer on the full
    pool (memory_pool.SWAKVPool), and constant states on the mamba pool (MambaPool). Under --mtp the token pool of a
    stage before the last is sized as if it held the draft's layers too (model_executor/pool_configurator.py adds
    the draft's cell to the cell size of every target worker), though only the last stage runs the draft (Stage.sized)."""
    full = swa = state = sequences = 0
    full_rate = swa_rate = sized_full = sized_swa = Fraction(0)
    block = 1
    for g in plan.groups:
        layers = g.n + g.pad
        kv = layers * _layer_kv(s, g)
        rate = _token_rate(g, layers)
        block = g.term.block or block
        if _swa_pool(g):
            swa, swa_rate = swa + kv, swa_rate + rate
        else:
            full, full_rate = full + kv, full_rate + rate
        if g.engine_state_bytes is not None:
            state += (g.n + g.pad_state) * g.engine_state_bytes
        elif g.state_elements:
            state += g.n * parts_bytes(g.state_parts, 1)
        sequences = max(sequences, _sequences(s, g))
    for g in plan.sized:
        if _swa_pool(g):
            sized_swa += _token_rate(g, g.n)
        else:
            sized_full += _token_rate(g, g.n)
    return SGLangPools(full, swa, full_rate, swa_rate, block, state, sequences, sized_full, sized_swa)


def _token_rate(g: _StageGroup, layers: int) -> Fraction:
    """Bytes one token takes in `layers` layers of a stage group, in its pages."""
    return layers * Fraction(g.term.page_bytes, g.term.block) if g.term.block else Fraction(0)


def _swa_pool(g: _StageGroup) -> bool:
    """Whether SGLang keeps a stage group's tokens in its SWA pool: a windowed or chunked layer it frees."""
    return g.term.layer.span is not None and not g.term.every_token


class GroupOnGpu(NamedTuple):
    """A layer group's part of the busiest GPU, for --explain: its layers there, the cache of one layer as one tp rank
    holds it (`formula`: the rank's share), the sequences it holds, and the bytes (those _stage sums)."""

    label: str
    layers_here: int
    formula: Formula
    tokens_held: int
    sequences: int
    split_over_tp: bool  # SGLang's DP attention: the replica's sequences split over its tp ranks
    kv_bytes_per_layer: int
    kv_bytes: int
    state_bytes: int
    padding_layers: int = 0  # vLLM's padding slots of the group's spec on this stage (PoolLayout.pads)
    pages: int | None = None  # --engine: pages one layer holds for one sequence
    block: int | None = None  # --engine: tokens a page of this group on one rank


def gpu_groups(s: Settings, plan: Stage) -> list[GroupOnGpu]:
    """Each layer group's part of one stage's GPU at the settings' context and batch: what `_stage` adds up."""
    out = []
    for g in plan.groups:
        per_layer = _layer_kv(s, g)
        out.append(GroupOnGpu(g.label, g.n, g.term.formula, g.term.attention.tokens_held(g.term.layer, s.ctx),
                              _sequences(s, g), g.latent_split, per_layer, (g.n + g.pad) * per_layer, _group_state(s, g),
                              g.pad, g.term.pages_at(s.ctx, s), g.term.block))
    return out


_new = tuple.__new__  # a PerGpu past its generated __new__ (a row of a sweep makes one)


def stage_read_bytes(s: Settings, plan: Stage) -> int:
    """What one GPU of a stage reads of its cache and states in a decode step at the settings' context (its share of
    the sequences), as on one GPU (kvcalc.costs.traffic): the keys each layer's query attends, by token
    (GroupTerm.read_bytes), and every state read and written back; not the engine's whole or padded pages."""
    total = 0
    for g in plan.groups:
        batch = _sequences(s, g)
        total += g.n * (g.term.read_bytes(s.ctx, batch, s) + 2 * parts_bytes(g.state_parts, batch))
    return total


def _sequences(s: Settings, g: _StageGroup) -> int:
    """Sequences whose cache of group `g` one GPU holds: its replica's ceil(batch / dp), split over the tp ranks under
    SGLang's DP attention."""
    replica = _ceil(s.batch, s.dp)
    return _ceil(replica, s.tp) if g.latent_split else replica


def _encoder_per_rank(spec: ModelSpec, tp: int) -> int:
    """The encoder's weights on one rank of the first stage: its layers split as the decoder's are."""
    from kvcalc.attention import Layer

    e = spec.encoder
    if e is None:
        return 0
    d = spec.d_model
    norm = 2 * d if spec.norm == "layernorm" else d
    layer = Layer(d, None, "encoder.attention")
    attn = sum(w.size for w in e.attention.per_rank(layer, tp).weights(layer))
    return e.n_layers * (attn + ffn_params_per_rank(e.ffn, d, tp, 1) + e.norms_per_layer * norm) + e.extra_params


def check_layout(spec: ModelSpec, s: Settings) -> None:
    """A KvcalcError where the settings' parallel layout does not apply to `spec`."""
    if s.pp > spec.n_layers:
        raise KvcalcError(f"--pp {s.pp}: {spec.name} has only {spec.n_layers} layers to split into stages")
    if s.pp > 1 and spec.encoder is not None and s.engine in ("vllm", "sglang"):
        # vLLM 0.34.0: WhisperForConditionalGeneration does not implement SupportsPP, and
        # ModelConfig.verify_with_parallel_config raises "Pipeline parallelism is not supported for this model";
        # SGLang's whisper.py builds every layer on every rank, with no pipeline stages
        raise KvcalcError(f"--pp {s.pp} --engine {s.engine}: {spec.name} is an encoder–decoder model, and "
                          f"{s.engine} runs none with pipeline parallelism (give --pp 1, or no --engine)")
    if s.pp > 1 and s.engine == "vllm" and spec.family in VLLM_NO_PP:
        # config/model.py verify_with_parallel_config: "Pipeline parallelism is not supported for this model" unless
        # the class implements SupportsPP, which Gemma3nForCausalLM and Gemma3nForConditionalGeneration do not
        raise KvcalcError(f"--pp {s.pp} --engine vllm: vLLM runs {spec.name} without pipeline parallelism (its model "
                          "classes do not support it; give --pp 1, or no --engine)")
    if s.engine == "sglang":
        _check_sglang(spec, s)
    if s.engine == "vllm" and s.tp > 1:
        _check_vllm_tp(spec, s.tp)
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
    if s.dp_attention and not spec.has_layouts():
        raise KvcalcError(f"--dp-attention: {spec.name} has no MLA layer (SGLang's DP attention splits a latent cache)")
    if s.dp_attention and s.engine == "vllm":
        # vLLM has no such flag: its attention runs data-parallel across --data-parallel-size ranks, each a replica
        # of the attention, with the experts shared by expert parallelism, which kvcalc computes as --dp N --ep M
        raise KvcalcError("--dp-attention --engine vllm: DP attention is SGLang's (--enable-dp-attention); vLLM runs "
                          "attention data-parallel as replicas with shared experts, --dp N --ep M here")
    if s.mtp and spec.mtp_layers:
        _check_mtp(spec, s)
    if s.tp > 1:
        _check_heads_split(spec, s.tp)


def _check_vllm_tp(spec: ModelSpec, tp: int) -> None:
    """A KvcalcError for a tp vLLM (0.34.0) cannot build: one that does not divide the vocabulary padded to 64
    (VocabParallelEmbedding asserts; SGLang pads to 64 · tp instead), and gpt-oss above its KV heads (gpt_oss.py divides
    them by tp with no floor of one: a ZeroDivisionError)."""
    padded = _ceil(spec.vocab_size, VOCAB_PADDING) * VOCAB_PADDING
    if padded % tp:
        raise KvcalcError(f"--tp {tp} --engine vllm: vLLM splits {spec.name}'s vocabulary of {spec.vocab_size:,} rows, "
                          f"padded to {padded:,} (a multiple of 64), evenly over the tp ranks, and {tp} does not divide it")
    if spec.family == "gpt-oss":
        n_kv = min(g.attention.n_kv for g in spec.groups if isinstance(g.attention, Heads))
        if tp > n_kv:
            raise KvcalcError(f"--tp {tp} --engine vllm: vLLM's gpt-oss file divides {spec.name}'s {n_kv} KV heads by "
                              f"tp with no floor of one, so it runs at tp {n_kv} at most")


def _check_sglang(spec: ModelSpec, s: Settings) -> None:
    """A KvcalcError where SGLang (0.5.23) cannot run the layout, or builds it by rules kvcalc lacks."""
    if s.pp > 1 and spec.family in SGLANG_NO_PP:
        raise KvcalcError(f"--pp {s.pp} --engine sglang: SGLang runs {spec.name} without pipeline parallelism (its "
                          "model file takes no pipeline proxy tensors; give --pp 1, or no --engine)")
    if s.pp > 1 and spec.tie_embeddings and spec.family in SGLANG_TIED_NO_PP:
        raise KvcalcError(f"--pp {s.pp} --engine sglang: SGLang ties {spec.name}'s head to the embedding, which its "
                          "last pipeline stage does not build (give --pp 1, or no --engine)")
    if s.tp > 1 and spec.family == "gpt2":
        # gpt2.py: RadixAttention(num_kv_heads=total_num_heads) over a pool of its heads / tp a rank
        raise KvcalcError(f"--tp {s.tp} --engine sglang: SGLang's GPT-2 file declares all {spec.name}'s heads to each "
                          "rank's attention while its pool holds a tp-th of them, so it runs at tp 1 only")
    if s.dp_attention and spec.family in ("minicpm3", "kimi_linear"):
        # minicpm3.py and kimi_linear.py split their attention (and embedding) over the whole tp group: no attention
        # tp group of their own, as DeepseekV2's MLA has
        raise KvcalcError(f"--dp-attention: SGLang has no DP attention for {spec.name}'s model file (it splits the "
                          "attention over every tp rank); DeepSeek's, Kimi K2's and GLM-5's MLA have it")


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


def _check_heads_split(spec: ModelSpec, tp: int) -> None:
    """A tp that splits every block as vLLM builds it (each kind's tp_rule: softmax heads, SSM heads and groups,
    linear-attention heads)."""
    from kvcalc.attention import Layer

    def subject(g: ResolvedGroup, part: str = "") -> str:
        """Who has the heads, in words: 'every layer of M has', "M's local layers' cross-attention blocks have"."""
        if g.label in ("all", "all layers"):
            return f"every {part or 'layer'} of {spec.name} has"
        label = g.label if g.label.endswith("layers") else f"{g.label} layers"
        whose = f"' {part}s" if part else ""  # the local layers' cross-attention blocks
        return f"{spec.name}'s {label}{whose} have"

    blocks = [(subject(g), g.attention, g.layer) for g in spec.groups]
    blocks += [(subject(g, "cross-attention block"), g.cross, g.cross_layer) for g in spec.groups if g.cross]
    # a mixer beside the attention (Falcon-H1's Mamba-2): vLLM's MambaMixer2 asserts on its heads and groups too
    blocks += [(subject(g, "parallel mixer"), g.parallel, g.parallel_layer) for g in spec.groups if g.parallel]
    if spec.encoder is not None:
        blocks.append((f"{spec.name}'s encoder has", spec.encoder.attention, Layer(spec.d_model, None, "encoder.attention")))
    for who, att, layer in blocks:
        rule = att.tp_rule(layer, tp)
        if rule:
            raise KvcalcError(f"--tp {tp}: {who} {rule}")


def rank_block_size(plans: tuple[Stage, ...]) -> int | None:
    """Tokens a page holds on one GPU (--engine): its groups' largest page. vLLM sizes a hybrid model's page by one
    rank's state (kvcalc.costs.paged), so under --tp it can be smaller than the one-GPU block_size."""
    blocks = [g.term.block for plan in plans for g in plan.groups if g.term.block is not None]
    return max(blocks) if blocks else None


def per_gpu(spec: ModelSpec, s: Settings) -> PerGpu:
    """The busiest GPU under the settings' parallel layout: the pipeline stage whose cache, states and weights
    together are largest (the first such stage)."""
    check_layout(spec, s)
    return busiest_gpu(s, stages(spec, s))


def busiest_gpu(s: Settings, plans: tuple[Stage, ...]) -> PerGpu:
    """per_gpu from the layout's stages(spec, s), for settings the layout was checked for (a sweep makes them once
    per model and settings)."""
    if len(plans) == 1:
        return stage_gpu(s, plans[0])
    figures = [stage_gpu(s, stage) for stage in plans]
    return max(figures, key=lambda f: (f.kv_cache_bytes + f.state_bytes + f.weights_bytes, -f.stage))
