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
  or the embedding alone, and SGLang's files by their own rules (kvcalc.costs.engine_files: stage_ends,
  end_params); some layouts an engine cannot run are refused (check_engine). The largest stage is reported.
- Engines hold some weights twice or wider (engine_files.engine_extra_bytes): the absorbed MLA up-projections beside kv_b_proj
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
  the dense FFNs, whole (engine_files.ffn_split); vLLM pads Kimi Linear's routed experts to 256 a tp rank.
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

from kvcalc.attention import MLA, Formula
from kvcalc.costs.cache import GroupCache, GroupTerm, group_cache, group_term
from kvcalc.costs.engine_files import (
    VLLM_MTP_FC_SPLIT,
    FfnSplit,
    ceil_div,
    check_engine,
    end_params,
    engine_attention_weights,
    engine_extra_bytes,
    extra_per_rank,
    extra_table_per_rank,
    ffn_split,
    mxfp4_scale_bytes,
    stage_ends,
    unquantized_params,
    vocab_rows,
)
from kvcalc.costs.paged import (
    PoolLayout,
    check_pages,
    engine_gpu_key,
    engine_groups,
    gdn_checkpoints,
    keeps_every_token,
    lookahead,
    lookahead_limit,
    sglang_buffers,
    state_slots,
    vllm_layout,
)
from kvcalc.costs.params import expert_matrices, router_params
from kvcalc.costs.sglang_pages import engine_page
from kvcalc.costs.state import merged_bytes, parts_bytes, step_state_bytes
from kvcalc.dtypes import bits_to_bytes
from kvcalc.errors import KvcalcError
from kvcalc.settings import Settings
from kvcalc.spec import DenseFFN, ModelSpec, MoEFFN, NoFFN, ResolvedGroup


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


def _rank_group(group: ResolvedGroup, tp: int) -> ResolvedGroup:
    """A layer group as one tensor-parallel rank holds it."""
    return dataclasses.replace(group, attention=group.attention.per_rank(group.layer, tp),
                               cross=group.cross.per_rank(group.cross_layer, tp) if group.cross else None,
                               parallel=group.parallel.per_rank(group.parallel_layer, tp) if group.parallel else None)


def ffn_params_per_rank(ffn: DenseFFN | MoEFFN | NoFFN, d: int, tp: int, ep: int, split: FfnSplit | None = None) -> int:
    """Weights of one FFN layer on one rank (see the module's rules); `split`: the engine's departures from tp
    (ffn_split), None for none."""
    if isinstance(ffn, NoFFN):
        return 0
    split = split or FfnSplit(tp, tp, tp)
    mats = 3 if ffn.gated else 2
    up = 2 if ffn.gated else 1
    if isinstance(ffn, DenseFFN):
        ff = ceil_div(ffn.d_ff, split.dense_tp)
        return mats * d * ff + ((up * ff + d) if ffn.bias else 0)
    experts, ff = routed_share(ffn, tp, ep, split)
    routed = experts * (mats * d * ff + ((up * ff + d) if ffn.expert_bias else 0))
    shared = ffn.n_shared_experts * mats * d * ceil_div(ffn.shared_d_ff or ffn.moe_d_ff, split.shared_tp) + (d if ffn.shared_gate else 0)
    return routed + shared + router_params(ffn, d)


def routed_share(ffn: MoEFFN, tp: int, ep: int, split: FfnSplit) -> tuple[int, int]:
    """The routed experts one rank holds and the width of its share of each (see the module's rules)."""
    if ep > 1:  # ceil(E / ep) experts; below tp each split over the tp / ep ranks sharing them (SGLang moe_tp_size)
        return ceil_div(ffn.n_routed_experts, ep), (ceil_div(ffn.moe_d_ff, tp // ep) if ep < tp else ffn.moe_d_ff)
    width = ffn.moe_d_ff
    if tp > 1 and width // tp < split.moe_pad:  # padded so each tp rank's share is moe_pad wide (KIMI_MOE_PAD)
        width = split.moe_pad * tp
    return ffn.n_routed_experts, ceil_div(width, split.moe_tp)


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
    temporal_parts: tuple[tuple[int, str], ...] = ()  # its state's recurrent component alone (state.temporal_parts)


class AdmissionGroup(NamedTuple):
    """One of vLLM's KV cache groups as its start-up check counts one request's blocks (vllm/v1/kv_cache_interface.py
    max_admission_blocks_per_request, MambaSpec.max_memory_usage_bytes; vLLM 0.34.0): its kind ('full', 'window',
    'chunk', 'cross' or 'state'), the tokens a page holds, and the window or chunk (a state: the blocks it reserves)."""

    kind: str
    block: int
    span: int = 0


@dataclass(frozen=True)
class Stage:
    """A pipeline stage apart from the context and batch: its groups and the bytes of its weights."""

    stage: int
    layers: range
    groups: tuple[_StageGroup, ...]
    weights_bytes: int
    held_back: int = 0  # bytes of the pool no sequence gets (vLLM: BlockPool's null block, one block of the pool)
    sized: tuple[_StageGroup, ...] = ()  # layers the engine's pool sizing counts here but no pool holds (sglang_pools)
    state_slots: int = 1  # state slots a sequence takes in the engine's pool (kvcalc.costs.paged.state_slots)
    admission: tuple[AdmissionGroup, ...] = ()  # vLLM's groups as its start-up check counts them (admission_groups)


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
           s.block_size, s.state_dtype, s.enc_ctx, s.mtp, ffn_split(spec, s), engine_gpu_key(s))
    return spec.memo(key, _plan_stages, spec, s)


def _plan_stages(spec: ModelSpec, s: Settings) -> tuple[Stage, ...]:
    from kvcalc.costs.params import ffn_of_layer, ffn_runs, weights_bytes

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
    ahead, limit = lookahead(spec.mtp_layers, s), lookahead_limit(spec, s)
    slots = state_slots(spec.family, s)
    page = engine_page(spec, s)
    caches = [group_cache(g, one, enc, every, layout, j, {}, ahead, slots, limit, page)  # padding: by stage, below
              for j, g in enumerate(held)]
    check_pages(spec, s, [g.attention for g, c in zip(held, caches) if c.formula.elements])
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
                    sized.append(_StageGroup(group.label, n, group_term(gc, one, enc, ahead, limit), state_elements=0,
                                             state_parts=(), engine_state_bytes=None, latent_split=False))
                n = 0
            pad, pad_state = pads.get((j, "kv"), 0), pads.get((j, "state"), 0)
            if n or pad or pad_state:  # its layers here, or vLLM's padding slots of their spec
                groups.append(_StageGroup(group.label, n, group_term(gc, one, enc, ahead, limit), gc.state_elements_per_layer, gc.state_parts,
                                          gc.engine_state_bytes_per_layer,
                                          s.dp_attention and isinstance(group.attention, MLA), pad, pad_state,
                                          gc.temporal_parts))
        # SGLang's DP attention runs attention at attention-tp size 1: every rank holds the whole attention weights
        weighed = list(everyone) if s.dp_attention else ranks
        params = _stage_params(spec, s, i, layers, len(ranges), weighed[:len(spec.groups)])
        if last and mtp is not None:
            params += _mtp_params_per_rank(spec, s, weighed[-1])
        counted = [(rank, len(group.layers) if group is mtp else
                   bisect_left(group.layers, layers.stop) - bisect_left(group.layers, layers.start))
                   for group, rank in zip(everyone, weighed) if group is not mtp or last]
        routers = sum(run.count_in(layers.start, layers.stop) * router_params(run.ffn, spec.d_model)
                      for run in ffn_runs(spec) if isinstance(run.ffn, MoEFFN))
        if last and mtp is not None and isinstance(last_ffn := ffn_of_layer(spec, spec.n_layers - 1), MoEFFN):
            routers += spec.mtp_layers * router_params(last_ffn, spec.d_model)  # the MTP layers' MoE, the last layer's
        draft = _draft_embedding(spec, s) if last and mtp is not None else 0
        eh_proj = spec.mtp_layers * _mtp_proj(spec, s) if last and mtp is not None else 0
        tables = sum(extra_table_per_rank(x, s) for x in spec.extra_weights.values()) if i == 0 else 0  # _stage_params'
        ffns = [(run.ffn, run.count_in(layers.start, layers.stop)) for run in ffn_runs(spec)]
        plain = unquantized_params(spec, s, ffns, i == 0)
        extra = engine_extra_bytes(spec, s, counted, stage_ends(spec, s, i, len(ranges)), routers, draft, eh_proj, tables,
                                   plain)
        extra += mxfp4_scale_bytes(spec, s, _routed_matrices(spec, s, ffns))
        out.append(Stage(i, layers, tuple(groups), weights_bytes(params, s.weights_dtype) + extra,
                         null_block_bytes(s, layout, here, groups), tuple(sized), slots,
                         admission_groups(held, caches, layout, s) if s.engine == "vllm" else ()))
    return tuple(out)


def admission_groups(groups: Sequence[ResolvedGroup], caches: Sequence[GroupCache],
                     layout: PoolLayout | None, s: Settings) -> tuple[AdmissionGroup, ...]:
    """vLLM's KV cache groups of a model's layer `groups` (as one rank holds them, `caches` their cache) as its
    start-up check counts them (AdmissionGroup): the groups of its pool `layout` (PoolLayout.groups: a group for each
    spec's share; vLLM keeps a stage's empty groups, so every stage has them all), or, without a layout (one spec,
    or one type of attention at one block size), one group of the layers' kind; a model of states alone one state
    group, vLLM's mamba_cache_mode "none" (a state page and no checkpoint). `s`: the settings, whose GPU picks the
    prefill kernels that keep checkpoints (checkpoint_blocks)."""
    def attention(g: ResolvedGroup, block: int) -> AdmissionGroup:
        layer = g.layer
        if layer.window:
            return AdmissionGroup("window", block, layer.window)
        return AdmissionGroup("chunk", block, layer.chunk) if layer.chunk else AdmissionGroup("full", block)

    if layout is None:
        held = [(g, c) for g, c in zip(groups, caches) if c.block_size is not None and c.formula.elements
                and not g.layer.kv_shared]
        if held:  # an encoder–decoder model's cross-attention is a group of its own (CrossAttentionSpec)
            block = held[0][1].block_size or 1
            cross = (AdmissionGroup("cross", block),) if any(g.cross is not None for g, _ in held) else ()
            return (attention(held[0][0], block), *cross)
        return (AdmissionGroup("state", 0, 1),) if any(c.state_elements_per_layer for c in caches) else ()
    states = [g for g, c in zip(groups, caches) if c.state_elements_per_layer]
    out = []
    for bucket, _ in layout.groups:
        i, part = layout.buckets[bucket]
        if part == "state":  # mamba_cache_mode "align": 2 state blocks and the prefill checkpoint's, where one is kept
            out.append(AdmissionGroup("state", 0, 2 + checkpoint_blocks(groups[i], states, s)))
        else:
            out.append(attention(groups[i], layout.pages[i].block or 1))
    return tuple(out)


def checkpoint_blocks(g: ResolvedGroup, states: Sequence[ResolvedGroup], s: Settings) -> int:
    """The prefill-checkpoint block a hybrid's state layer reserves in vLLM's "align" mode (MambaSpec
    num_prefill_checkpoint_blocks): 1 for a Mamba-2 mixer (mamba_mixer2.py get_kv_cache_spec) and for a Gated DeltaNet
    where every state layer is one, on the FlashInfer prefill (qwen_gdn_linear_attn.py; kvcalc.costs.paged.
    gdn_checkpoints, as vllm_hybrid_pages asks it); 0 for the other kinds."""
    mixer = g.parallel if g.parallel is not None else g.attention
    if mixer.kind == "mamba2":
        return 1
    return 1 if mixer.kind == "gated_deltanet" and gdn_checkpoints(states, s) else 0


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
    _, norms = mtp_proj_and_norms(spec)
    return spec.mtp_layers * (attention + ffn + _mtp_proj(spec, s) + norms) + _draft_embedding(spec, s)


def _mtp_proj(spec: ModelSpec, s: Settings) -> int:
    """One MTP layer's eh_proj (2·d × d) on a rank: whole, or under vLLM's VLLM_MTP_FC_SPLIT files fc's d outputs
    split over tp (2·d inputs each)."""
    from kvcalc.costs.params import mtp_proj_and_norms

    if s.engine == "vllm" and spec.family in VLLM_MTP_FC_SPLIT:
        return 2 * spec.d_model * ceil_div(spec.d_model, s.tp)
    return mtp_proj_and_norms(spec)[0]


def _draft_embedding(spec: ModelSpec, s: Settings) -> int:
    """Parameters of the MTP drafter's embedding on a rank of the last stage: under pipeline stages vLLM's own
    (spec_decode eagle utils maybe_share_target_embed returns early when pp > 1), and SGLang's: the target's, which
    its DeepSeek file builds on the last stage too under speculative decoding (deepseek_v2.py
    pp_stage_needs_embedding) and the draft shares, or where a file builds none there the draft's own
    (speculative/pp_draft_embedding.py resolve_draft_embed_and_head), one VocabParallelEmbedding split as the
    target's either way (whole under DP attention); the head stays shared. 0 otherwise."""
    if s.engine not in ("vllm", "sglang") or s.pp == 1:
        return 0
    return vocab_rows(spec, s, split=not s.dp_attention) * spec.d_model


def _routed_matrices(spec: ModelSpec, s: Settings, ffns: list[tuple[DenseFFN | MoEFFN | NoFFN, int]]) -> int:
    """Parameters of the routed experts' matrices a rank holds for the FFN blocks `ffns` (block, its layers here)."""
    split = ffn_split(spec, s)
    out = 0
    for ffn, n in ffns:
        if isinstance(ffn, MoEFFN) and n:
            experts, ff = routed_share(ffn, s.tp, s.ep, split)
            out += n * experts * expert_matrices(ffn, spec.d_model, ff)
    return out


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
    ends = stage_ends(spec, s, stage, stages)
    params += sum(end_params(spec, s, ends))
    if stage == 0:
        params += _encoder_per_rank(spec, tp) if spec.encoder else sum(encoder_params(spec).values())
        params += sum(extra_per_rank(x, s) for x in spec.extra_weights.values())
    return params + (norm if ends[1] else 0)  # the final norm


def stage_gpu(s: Settings, plan: Stage) -> PerGpu:
    """One stage's GPU at the settings' context and batch: the cache and states of its share of the sequences."""
    # without pages or scales, the bytes of the elements' total, as kv_cache_bytes (README conventions: a 4-bit cache
    # of an odd count of elements a group rounds once, not once a group)
    exact = s.engine is None and s.kv_quant == "none"
    kv = elements = 0
    for g in plan.groups:
        if exact:
            elements += (g.n + g.pad) * g.term.layer_elements(s.ctx, _sequences(s, g))
        else:
            kv += (g.n + g.pad) * _layer_kv(s, g)
    if exact and plan.groups:
        kv = bits_to_bytes(elements, plan.groups[0].term.bits)
    return _new(PerGpu, (s.tp * s.pp * s.dp, plan.stage, plan.layers, kv, _states(s, plan.groups), plan.weights_bytes))


def _states(s: Settings, groups: Sequence[_StageGroup]) -> int:
    """The constant states of stage groups' layers on one GPU, its share of the sequences: the engine's pages (with
    vLLM's padding slots), or the elements of each dtype rounded to bytes once (as CacheReport.state_bytes)."""
    pages, parts = 0, []
    for g in groups:  # a stage's few groups (a fit's search asks every step: no generator for a model without states)
        if g.engine_state_bytes is not None:
            pages += (g.n + g.pad_state) * _sequences(s, g) * g.engine_state_bytes
        elif g.state_parts:
            parts += [(g.n * _sequences(s, g) * n, dtype) for n, dtype in g.state_parts]
    return pages + merged_bytes(parts) if parts else pages


def _layer_kv(s: Settings, g: _StageGroup) -> int:
    """One layer's cache of a stage group on one GPU, its share of the sequences (--engine: in whole pages)."""
    return g.term.layer_bytes(s.ctx, _sequences(s, g), s)


class SGLangPools(NamedTuple):
    """One stage's GPU as SGLang's static pools divide it (fit): the cache its full-attention layers and its sliding
    (or chunked) layers hold at the settings, the bytes one token takes in each (a token in every such layer), the page
    size, one sequence's constant states (in all the state slots it takes) with the sequences that hold them, and the bytes a token takes in layers the
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
    state_slots: int = 1  # slots of the state pool one sequence's states take (kvcalc.costs.paged.state_slots)
    swa_floor: int = 0  # the SWA pool's tokens at or below which SGLang refuses to start (sglang_stage_pools)

    @property
    def state_slot(self) -> int:
        """Bytes of one slot of the state pool: a sequence's states in all the stage's layers, once."""
        return self.state_per_sequence // self.state_slots


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
    return SGLangPools(full, swa, full_rate, swa_rate, block, state, sequences, sized_full, sized_swa, plan.state_slots)


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
                              _sequences(s, g), g.latent_split, per_layer, (g.n + g.pad) * per_layer, _states(s, [g]),
                              g.pad, g.term.pages_at(s.ctx, s), g.term.block))
    return out


_new = tuple.__new__  # a PerGpu past its generated __new__ (a row of a sweep makes one)


def stage_read_bytes(s: Settings, plan: Stage, tokens: int = 1) -> int:
    """What one GPU of a stage reads of its cache and states in a decode step at the settings' context (its share of
    the sequences), as on one GPU (kvcalc.costs.traffic): the keys each layer's query attends, by token
    (GroupTerm.read_bytes: each tensor as the engine stores it), and every state read and written back (a step of
    `tokens` a sequence, speculative under --mtp, writes the recurrent state once a token); not the engine's whole or
    padded pages."""
    keys = sum(g.n * g.term.read_bytes(s.ctx, _sequences(s, g), s) for g in plan.groups)
    states = merged_bytes((g.n * _sequences(s, g) * n, dtype) for g in plan.groups for n, dtype in g.state_parts)
    temporal = merged_bytes((g.n * _sequences(s, g) * n, dtype) for g in plan.groups for n, dtype in g.temporal_parts)
    return keys + step_state_bytes(states, temporal, tokens)  # as traffic.decode_bytes counts them on one GPU


def stage_written_bytes(s: Settings, plan: Stage) -> int:
    """What a prefill at the settings' context writes on one GPU of a stage (its share of the sequences), as on one
    GPU (kvcalc.costs.traffic.prefill_bytes): each layer's cache as its elements and scales (each tensor as the engine
    stores it, GroupTerm.written_bytes) and each state once, not the engine's whole or padded pages, its padding
    slots or its tracking slots."""
    return sum(g.n * g.term.written_bytes(s.ctx, _sequences(s, g), s) for g in plan.groups) \
        + merged_bytes((g.n * _sequences(s, g) * n, dtype) for g in plan.groups for n, dtype in g.state_parts)


def _sequences(s: Settings, g: _StageGroup) -> int:
    """Sequences whose cache of group `g` one GPU holds: its replica's ceil(batch / dp), split over the tp ranks under
    SGLang's DP attention."""
    replica = ceil_div(s.batch, s.dp)
    return ceil_div(replica, s.tp) if g.latent_split else replica


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
    check_engine(spec, s)  # what vLLM's and SGLang's model files cannot run, or run by rules kvcalc lacks
    if s.kv_quant == "fp8-ds-mla" and not spec.has_layouts():
        raise KvcalcError(f"--kv-quant fp8-ds-mla: {spec.name} has no MLA layer (fp8_ds_mla is vLLM's layout of "
                          "DeepSeek's MLA latent cache); per-token or per-head scales fit other caches")
    if s.dp_attention and not spec.has_layouts():
        raise KvcalcError(f"--dp-attention: {spec.name} has no MLA layer, and kvcalc models SGLang's DP attention for "
                          "MLA models only (SGLang runs it on some GQA models too, their heads split over the "
                          "attention tp size: not modelled)")
    if s.dp_attention and s.engine == "vllm":
        # vLLM has no such flag: its attention runs data-parallel across --data-parallel-size ranks, each a replica
        # of the attention, with the experts shared by expert parallelism, which kvcalc computes as --dp N --ep M
        raise KvcalcError("--dp-attention --engine vllm: DP attention is SGLang's (--enable-dp-attention); vLLM runs "
                          "attention data-parallel as replicas with shared experts, --dp N --ep M here")
    if s.tp > 1:
        _check_heads_split(spec, s.tp)


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
