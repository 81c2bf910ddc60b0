"""A serving engine's paged KV cache: whole pages of B tokens a layer, what vLLM and SGLang really allocate.

Rules (also in the README):
- A sequence holding `held` of its ctx positions (the last ones: a window's, or all) touches the pages covering
  positions ctx − held … ctx − 1: (ctx − 1) // B − (ctx − held) // B + 1 of them, so windowed layers pay at most one
  page beyond their span (vLLM's SlidingWindowManager frees the pages before it). A chunked layer holds its current
  chunk, which starts at a multiple of C (kvcalc.attention.base), reserved whole as its min(ctx, C) tokens are: past
  the first chunk, the most pages a chunk can span, (B − gcd(B, C) + C − 1) // B + 1, which is C / B when B divides
  C (ChunkedLocalAttentionManager frees the pages of the chunks before; vLLM one step late, so under --engine vllm
  a chunk and the token after it: (B − gcd(B, C) + C) // B + 1, C / B + 1). A layer holding no tokens (KV-shared)
  has no pages, whatever its window or chunk, except under SGLang, whose one pool has a buffer for every layer
  (MHATokenToKVPool layer_num = num_hidden_layers; Gemma 3n's shared layers only skip writing): every token there. Cross-attention holds ceil(enc / B) pages
  of encoder positions. Under a group scheme g<G> a key group runs along the tokens the pages span: ceil(n·B / G)
  groups a channel for n pages (`span_bytes`).
- vLLM: a window layer at its bound, not by alignment: ceil(W / B) + 1 once the window caps the layer (a page more
  than the window touches when B divides W − 1; SlidingWindowManager frees the pages before the window, so where the
  window starts on a page vLLM holds one fewer than this bound at that step), never more than ceil(ctx / B) (the "+1 here because the sliding window may not start from the
  beginning of the block" of vllm/v1/kv_cache_interface.py SlidingWindowSpec.max_admission_blocks_per_request; that
  function sizes W − 1 + max_in_flight_tokens tokens, a prefill's in flight, while kvcalc counts the cache of a
  sequence at ctx).
- SGLang frees a windowed or chunked layer's old tokens only in its hybrid-SWA pool, built for Llama4, GptOss,
  MiMoV2Flash, Step3p5 and Gemma4 (srt/configs/model_config.py is_hybrid_swa_model); any other model's layers keep
  every token in its one pool (`keeps_every_token`: ceil(ctx / B) pages a layer). Under --mtp a step allocates up to
  the committed length + 2 · max(steps · topk, draft tokens), its speculative defaults (3, 1, 4): 7 slots past ctx
  (`lookahead`).
- Page sizes: `ideal` is exact (B = 1); SGLang's default page_size is 1, which its attention backend may change
  (kvcalc.costs.sglang_pages: 64 under TensorRT-LLM's kernels on Blackwell, 64 for DSA); vLLM's default
  block_size is 64 (vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE, vLLM 0.34.0; 16 in its earlier releases),
  which FlashAttention keeps (any multiple of 16); MLA layers take --block-size when a backend takes it
  (FLASH_ATTN_MLA: multiples of 16 for a 16-bit cache; FlashMLA for fp8 and the sparse backends: multiples of 64),
  else 64. --block-size sets the rest.
- vLLM and SGLang store DeepSeek-V3.2's indexer key as fp8 with one fp32 scale per 128 values (DeepseekV32IndexerCache;
  NSATokenToKVPool: head_dim + head_dim // 128 · 4 bytes a token) whatever the KV dtype, SGLang in pages of 64
  whatever --block-size (arg_groups/model_overrides/deepseek_v2.py sets page_size 64 for DeepSeek DSA on CUDA); vLLM turns an fp8 cache of a sparse MLA model
  into its fp8_ds_mla layout (656 bytes a token for DeepSeek-V3.2; kvcalc.costs.quant).
- Constant states (linear attention, SSMs): vLLM keeps each layer's states of a request in pages of its KV pool,
  two at a time in a hybrid (prefix caching is on by default for hybrids in vLLM 0.34.0: mamba_cache_mode "align",
  MambaSpec.max_num_blocks_per_req; the extra prefill-checkpoint page of a Mamba-2 layer is not counted), one in a
  model of states alone, and makes every page the same size (vllm/platforms/interface.py `_align_hybrid_block_size`): the attention block grows to a = k · ceil(S / (k · A)) tokens, with S the
  bytes of one layer's state, A the bytes one token adds to an attention layer and k = max(the backend's smallest
  block, 16, or 64 for FlashMLA, the block size: 64 by default), at least 128 for an MLA hybrid, a multiple of 64
  where every state layer is a Gated DeltaNet (VLLM_GDN_CHECKPOINT_ALIGNMENT), and each state page
  is padded to a · A bytes (under kvcalc's g<G> scheme, not vLLM's, a page is not a · A: the first multiple of k
  whose page holds S, `_holding_block`). SGLang
  keeps states in its own Mamba pool at their exact size (mem_cache/memory_pool.py MambaPool), a slot a sequence or
  three under its extra-buffer strategy, two under pp > 1 (state_slots); ideal is exact.
- vLLM's groups (vllm/v1/core/kv_cache_planning.py get_kv_cache_groups): a model whose layers' specs differ is kept in
  groups of one spec and equal size, the fewest layers a spec has, or the most when that is under 1.5 times the
  fewest (_get_kv_cache_groups_uniform_page_size), each spec split into ceil(n / size) groups, its layers dealt round
  (layers[i::groups]), the last padded; a block of the pool is a page in each of the group size's tensors
  (get_kv_cache_config_from_groups), so a padding slot costs pages as its spec's layers do. Before that, every page is
  made as large as the largest (unify_kv_cache_spec_page_size): a smaller attention page takes more tokens when it
  divides the largest, else is padded; a state page is padded. Under pipeline parallelism the groups are the whole
  model's, projected on each stage (get_kv_cache_configs): a stage's block costs its largest group's layers there,
  for every group. One spec (is_kv_cache_spec_uniform), or one type of attention at one block size
  (UniformTypeKVCacheSpecs), is one group of each layer's own pages. A layer's cross-attention is counted with its
  self-attention (Whisper: the same pages, as many layers). Under --mtp a state layer holds a page more a speculated
  token (MambaSpec.num_speculative_blocks; kvcalc speculates one token an MTP layer), and an attention layer's pages
  cover the 3k slots a step allocates past ctx (`lookahead`). Source: vLLM 0.34.0.
- The pool's free pages and prefix sharing are not modelled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from math import gcd, lcm

from kvcalc.attention import MLA, AttentionKind, Formula, Layer
from kvcalc.costs.quant import component_bytes, group_size
from kvcalc.costs.sglang_pages import SGLANG_DEFAULT_PAGE, sglang_page, validated_page
from kvcalc.costs.state import parts_bytes, state_parts
from kvcalc.errors import KvcalcError
from kvcalc.settings import Settings
from kvcalc.spec import ModelSpec, ResolvedGroup

# tokens a page: vLLM CacheConfig.DEFAULT_BLOCK_SIZE (64 from vLLM 0.34.0 of 2026-11-16; 16 in 0.33.0 and before), SGLang page_size
DEFAULT_BLOCK = {"ideal": 1, "vllm": 64, "sglang": SGLANG_DEFAULT_PAGE}  # SGLang's as its backend changes it: sglang_page
VLLM_KERNEL_BLOCK = 16  # FlashAttention's smallest kernel block (get_supported_kernel_block_sizes: MultipleOf(16))
VLLM_MLA_HYBRID_BLOCK = 128  # _align_hybrid_block_size: an MLA/Mamba hybrid's block a multiple of 128 (TRT-LLM MLA)
# _align_hybrid_block_size in mamba_cache_mode "align" (the hybrids' default): the block is also a multiple of the
# Mamba layers' prefill checkpoint alignment where every one declares it (get_mamba_prefill_checkpoint_alignment): a
# Qwen Gated DeltaNet layer on the FlashInfer prefill (qwen_gdn_linear_attn.py _resolve_gdn_prefill_backend: Hopper,
# and Blackwell at head_k_dim 128; vllm_gdn_flashinfer) declares FLASHINFER_GDN_CHECKPOINT_ALIGNMENT; no other state
# kind declares one
VLLM_GDN_CHECKPOINT_ALIGNMENT = 64


def gdn_checkpoints(states: Sequence[ResolvedGroup], s: Settings) -> bool:
    """Whether vLLM takes a hybrid's prefill checkpoints on its Gated DeltaNet's grid: every state layer (`states`, the
    groups with a state) a Gated DeltaNet (get_mamba_prefill_checkpoint_alignment: all its Mamba layers declare one),
    each prefilled by FlashInfer (vllm_gdn_flashinfer), the only backend that declares one."""
    return all(g.attention.kind == "gated_deltanet" and g.parallel is None for g in states) and \
        vllm_gdn_flashinfer(s, [getattr(g.attention, "linear_key_head_dim", 0) for g in states])


def vllm_gdn_flashinfer(s: Settings, head_k_dims: Sequence[int]) -> bool:
    """Whether vLLM 0.34.0 prefills a Gated DeltaNet of these key head dims with FlashInfer on the settings' GPU
    (qwen_gdn_linear_attn.py _resolve_gdn_prefill_backend, 'auto'): on compute capability 9.0 (Hopper); on the 10.x
    and 12.x families (B200, GB200; RTX 5090) with head_k_dim 128 under CUDA 13, its wheels' runtime; elsewhere Triton:
    Ampere and Ada (A100, L40S, RTX 4090), and off CUDA (AMD, TPU). Without a GPU named, or an NVIDIA preset that gives
    no compute_capability, Hopper's."""
    hw = s.hardware
    if hw is None:
        return True
    if hw.platform != "cuda":
        return False
    cap = hw.capability
    if cap is None or cap == (9, 0):
        return True
    return cap[0] in (10, 12) and all(d == 128 for d in head_k_dims)


def engine_gpu_key(s: Settings) -> tuple[str, tuple[int, int] | None] | None:
    """What of the settings' GPU the engines' pages read (vllm_gdn_flashinfer; SGLang's page by backend,
    kvcalc.costs.sglang_pages), for the memo keys of plans that page under an engine."""
    hw = s.hardware
    return None if s.engine not in ("vllm", "sglang") or hw is None else (hw.platform, hw.capability)
# A hybrid's state pages a request holds at a time in vLLM 0.34.0, which enables prefix caching for hybrid models by
# default (ModelConfig.is_prefix_caching_supported; MambaModelConfig: mamba_cache_mode "align"): the running state and
# the last block's (MambaSpec.max_num_blocks_per_req: "only 2 + num_speculative_blocks state blocks are resident")
VLLM_RESIDENT_STATES = 2
# SGLang frees a windowed (or chunked) layer's old tokens only in its hybrid-SWA pool, which it builds for these model
# families (srt/configs/model_config.py is_hybrid_swa_model: Llama4, GptOss, MiMoV2Flash, Step3p5, Gemma4); every
# other model's layers share one pool of every token, the window applied by the attention kernel only
SGLANG_HYBRID_SWA = frozenset({"llama4", "gpt-oss", "mimo_v2_flash", "step3p5", "gemma4"})


# SGLang 0.5.23 runs a hybrid's radix cache with its extra-buffer strategy for these families (arg_groups/overrides.py
# _MAMBA_EXTRA_BUFFER_ARCHS, which _mamba_radix_cache_resolution picks under the default overlap schedule and triton
# linear-attention backend): HybridReqToTokenPool.alloc gives a new request its working state slot and
# _alloc_ping_pong_buffer its mamba_initial_tracking_slots more (allocation_sizing.get_mamba_tracking_slots: 2 with the
# overlap schedule, 1 without it, as under pp > 1, which turns the schedule off after the strategy is chosen:
# overrides._pipeline_parallel_overlap_disable), all freed together when it ends (free_mamba_cache)
SGLANG_EXTRA_BUFFER_FAMILIES = frozenset({"qwen3_next", "nemotron_h", "falcon_h1", "granitemoehybrid", "kimi_linear",
                                          "qwen3_5_moe"})


def tracking_slots(family: str, s: Settings) -> int:
    """The tracking slots SGLang's extra-buffer strategy gives a running sequence beside its own: 2 under the overlap
    schedule, 1 under pp > 1 (no overlap); 0 for other families and engines."""
    if s.engine != "sglang" or family not in SGLANG_EXTRA_BUFFER_FAMILIES:
        return 0
    return 2 if s.pp == 1 else 1


# SGLang 0.5.23's mamba_track_interval default (arg_groups/fields/exec_.py): the extra-buffer strategy snapshots a
# hybrid's states every so many tokens, and validate_mamba_extra_buffer (arg_groups/mamba_hook.py) asserts that the
# page size divides it
SGLANG_TRACK_INTERVAL = 256


def check_sglang_block(spec: ModelSpec, s: Settings) -> None:
    """A KvcalcError for a --block-size SGLang 0.5.23 does not start with on a hybrid it runs with the extra-buffer
    radix cache (tracking_slots): one that does not divide its state-tracking interval."""
    if s.block_size is None or not tracking_slots(spec.family, s) or not spec.has_states():
        return
    if SGLANG_TRACK_INTERVAL % (validated_page(spec, s) or 1):  # as asked, before a backend changes it
        default = sglang_page(spec, dataclasses.replace(s, block_size=None))
        raise KvcalcError(f"--block-size {s.block_size} --engine sglang: SGLang 0.5.23 snapshots {spec.name}'s states "
                          f"every {SGLANG_TRACK_INTERVAL} tokens for its radix cache (mamba_track_interval) and does not "
                          "start unless the page size divides that (validate_mamba_extra_buffer): give a power of 2 up "
                          f"to {SGLANG_TRACK_INTERVAL}, or leave --block-size out for its {default} on this GPU")


def state_slots(family: str, s: Settings) -> int:
    """State slots a running sequence takes in the engine's pool outside vLLM's hybrid pages (PoolLayout counts
    those): its own and SGLang's tracking slots (tracking_slots)."""
    return 1 + tracking_slots(family, s)


# The window SGLang's hybrid-SWA pool must hold for one request (model_runner_components/load_model_utils.py
# resolve_sliding_window_size): the model file's get_attention_sliding_window_size where it has one, W − 1 (gpt_oss.py,
# gemma4_causal.py: "inclusive (HF) -> exclusive (sglang)"), else the config's sliding window, else
# attention_chunk_size (Llama 4)
SGLANG_WINDOW_EXCLUSIVE = frozenset({"gpt-oss", "gemma4"})


def sglang_window(spec: ModelSpec) -> int:
    """SGLang's sliding_window_size for a model whose windowed (or chunked) layers it keeps in its SWA pool (0 for
    every other model): the pool refuses to start at that + a page or fewer tokens (validate_swa_pool_size)."""
    if spec.family not in SGLANG_HYBRID_SWA:
        return 0
    spans = [g.layer.span for g in spec.groups if g.layer.span]
    if not spans:
        return 0
    return max(spans) - (1 if spec.family in SGLANG_WINDOW_EXCLUSIVE else 0)


def keeps_every_token(family: str, engine: str | None) -> bool:
    """Whether the engine pages every token of a windowed or chunked layer of a model of `family` (SGLang outside
    its hybrid-SWA models)."""
    return engine == "sglang" and family not in SGLANG_HYBRID_SWA


# vLLM model files that give a sliding layer one key more than the config's window: commandr.py (Cohere 2) passes
# sliding_window + 1 ("cohere swa layer sees [pos - sliding_window, pos]", its training convention), so its sliding
# layers keep W + 1 tokens
VLLM_WINDOW_PLUS_ONE = frozenset({"cohere2"})


def engine_groups(spec: ModelSpec, s: Settings) -> tuple[ResolvedGroup, ...]:
    """The spec's layer groups as the engine runs their windows (VLLM_WINDOW_PLUS_ONE); the spec's own otherwise."""
    if s.engine != "vllm" or spec.family not in VLLM_WINDOW_PLUS_ONE:
        return spec.groups
    return tuple(dataclasses.replace(g, layer=dataclasses.replace(g.layer, window=g.layer.window + 1))
                 if g.layer.window else g for g in spec.groups)


# Models whose encoder input the engines pad to its full source length whatever the input: Whisper's 30 s of audio,
# 1,500 positions (vLLM 0.34.0 whisper.py: WhisperProcessingInfo.get_num_audio_tokens is max_source_positions and
# "the encoder prompt is padded"; SGLang's whisper pad_input_ids)
PADDED_ENCODER = frozenset({"whisper"})


def check_encoder_positions(family: str, source_len: int | None, enc_ctx: int | None, engine: str | None) -> None:
    """A KvcalcError for an --enc-ctx the engine would not hold: vLLM and SGLang pad a Whisper input to its source
    length, so its cross-attention pages hold that many positions whatever --enc-ctx says."""
    if engine in ("vllm", "sglang") and family in PADDED_ENCODER and enc_ctx not in (None, source_len):
        raise KvcalcError(f"--enc-ctx {enc_ctx:,} --engine {engine}: {engine} pads every {family} input to its "
                          f"{source_len:,} encoder positions (30 s of audio), so its cross-attention holds those "
                          "whatever the audio: leave --enc-ctx out, or drop --engine for the exact cache")


def check_vllm_block(attention: AttentionKind, s: Settings) -> None:
    """A KvcalcError for a --block-size vLLM 0.34.0 has no attention backend for on a layer of `attention`: it picks
    each layer's backend by the size asked while it builds the model, before any hybrid's raise (selector.py,
    platforms/cuda.py "No valid attention backend found"); every CUDA backend of a (non-MLA) attention layer takes a
    multiple of 16 tokens only (AttentionBackend.supports_block_size: FLASH_ATTN, TRITON_ATTN and FLEX_ATTENTION
    MultipleOf(16), FLASHINFER 16/32/64), and MLA's as block_tokens says."""
    if s.engine != "vllm" or s.block_size is None:
        return
    if isinstance(attention, MLA):
        block_tokens(attention, s)  # refuses what no MLA backend runs
    elif s.block_size % VLLM_KERNEL_BLOCK:
        raise KvcalcError(f"--block-size {s.block_size} --engine vllm: vLLM 0.34.0's attention backends (FlashAttention, "
                          f"FlashInfer, Triton, FlexAttention) run pages of a multiple of {VLLM_KERNEL_BLOCK} tokens "
                          f"only: give one, or leave --block-size out for its {DEFAULT_BLOCK['vllm']}")


def check_pages(spec: ModelSpec, s: Settings, cached: Sequence[AttentionKind]) -> None:
    """A KvcalcError for a --block-size the settings' engine does not start with on `spec`, whose layers of the
    attention kinds `cached` hold a cache: vLLM's (check_vllm_block) and SGLang's (check_sglang_block). Every path to
    an engine's pages asks it (CachePlan, the per-GPU stages)."""
    for attention in cached:
        check_vllm_block(attention, s)
    check_sglang_block(spec, s)


VLLM_MLA_BLOCK = 64  # vllm/platforms/cuda.py forces 64 for the FlashMLA and FlashMLASparse backends


def block_tokens(attention: AttentionKind, s: Settings) -> int:
    """Tokens a page holds for a layer of `attention` under the settings' engine, before vLLM's pool (PoolLayout)
    changes it; SGLang's one page for every layer is kvcalc.costs.sglang_pages.sglang_page's."""
    if s.engine == "vllm" and isinstance(attention, MLA):
        # vLLM 0.34.0 picks the MLA backend by the block size (platforms/cuda.py, Hopper's order): FLASH_ATTN_MLA (a
        # 16-bit cache) and TRITON_MLA (fp8 too) take any multiple of 16 (get_supported_kernel_block_sizes); the sparse
        # backends of DeepSeek Sparse Attention (FLASH_ATTN_MLA_SPARSE, FLASHMLA_SPARSE, FlashInfer's) multiples of 64.
        # No backend takes another size ("No valid attention backend found"), so vLLM does not start, nor does kvcalc
        asked = s.block_size
        sparse = attention.indexed or s.kv_quant == "fp8-ds-mla"  # fp8_ds_mla: only the sparse backends list it
        step = VLLM_MLA_BLOCK if sparse else VLLM_KERNEL_BLOCK
        if asked is not None and asked % step:
            why = ("sparse attention" if attention.indexed else "an fp8_ds_mla cache") + " (its sparse backends)" if sparse \
                else "MLA (FLASH_ATTN_MLA, TRITON_MLA)"
            raise KvcalcError(f"--block-size {asked} --engine vllm: vLLM 0.34.0 runs {why} only in pages of a multiple "
                              f"of {step} tokens (give one, or leave --block-size out for its {VLLM_MLA_BLOCK})")
        return VLLM_MLA_BLOCK if asked is None else asked
    if s.block_size is not None:
        return s.block_size
    return DEFAULT_BLOCK[s.engine or "ideal"]


def pages(ctx: int, held: int, block: int) -> int:
    """Pages one sequence's last `held` positions of `ctx` touch, at `block` tokens a page."""
    if held == 0:
        return 0
    return (ctx - 1) // block - (ctx - held) // block + 1


# SGLang's speculative defaults for its MTP (EAGLE) models: steps, top-k, draft tokens
# (arg_groups/speculative_hook.py _auto_choose_speculative_params: (3, 1, 4) for DeepSeek, GLM, MiMo and the rest)
SGLANG_SPEC_STEPS, SGLANG_SPEC_TOPK, SGLANG_SPEC_DRAFT_TOKENS = 3, 1, 4


def lookahead(mtp_layers: int, s: Settings) -> int:
    """Slots past ctx a decode step allocates under --mtp (0 without an engine, --mtp or MTP layers: no speculative
    decoding then).

    vLLM, k the MTP layers (num_speculative_tokens' default): it schedules 1 + k tokens (the one verified and k
    drafts), allocates k more for the drafter (num_lookahead_tokens; KVCacheManager.allocate_slots), and under async
    scheduling, its default, holds the k drafts of the step in flight as placeholders: 3k (an audit ran vLLM 0.34.0's
    AsyncScheduler and block manager: DeepSeek-V3, k = 1, holds a page more at ctx = 62, 63 and 0 mod 64; k = 3, at
    the 9 positions below a boundary).
    SGLang (0.5.23): a step allocates up to the committed length + 2 · max(steps · topk, draft tokens), a double
    buffer for the overlap scheduler's lag (mem_cache/allocation_sizing.py get_alloc_reserve_per_decode,
    page_aligned_decode_alloc_lens; eagle_utils.eagle_prepare_for_decode), whatever the MTP layers; at ctx the
    committed length is ctx − 1, so 2 · max(3 · 1, 4) − 1 = 7 slots past ctx."""
    if not s.mtp or not mtp_layers:
        return 0
    if s.engine == "vllm":
        return 3 * mtp_layers
    if s.engine == "sglang":
        return 2 * max(SGLANG_SPEC_STEPS * SGLANG_SPEC_TOPK, SGLANG_SPEC_DRAFT_TOKENS) - 1
    return 0


def lookahead_limit(spec: ModelSpec, s: Settings) -> int | None:
    """The tokens a sequence's slots stop at under --mtp: vLLM allocates min(tokens + lookahead, max_model_len)
    (KVCacheManager.allocate_slots), its default max_model_len the model's served context; None elsewhere."""
    if s.engine == "vllm" and lookahead(spec.mtp_layers, s):
        return spec.served_context or spec.max_context
    return None


def ahead_at(ctx: int, ahead: int, limit: int | None) -> int:
    """The slots past `ctx` a step allocates (`lookahead`), stopped at `limit` (lookahead_limit) where ctx is within it."""
    return min(ahead, limit - ctx) if limit is not None and ctx <= limit else ahead


def layer_pages(ctx: int, held: int, block: int, layer: Layer, engine: str | None, every: bool = False,
                ahead: int = 0, limit: int | None = None) -> int:
    """Pages one sequence holds in one layer under the engine's rule (see the module's rules); `every`: the engine
    keeps every token of a windowed layer (`keeps_every_token`); `ahead`: slots a step allocates past ctx
    (`lookahead`), which the layer's pages cover as tokens it holds, up to `limit` (`lookahead_limit`)."""
    rule = _layer_rule(ctx, held, layer, engine, every)
    if rule == "empty":
        return 0
    ahead = ahead_at(ctx, ahead, limit)
    ctx, held = ctx + ahead, held + ahead
    if rule in ("every", "shared"):
        return pages(ctx, ctx, block)
    if rule == "window":
        return min(-(-ctx // block), -(-held // block) + 1)
    if rule in ("chunk", "chunk-lag"):  # a chunk past the first, reserved whole: the most pages one can span
        return chunk_pages(layer.chunk or 0, block, lag=rule == "chunk-lag", ahead=ahead)
    return pages(ctx, held, block)


PAGE_RULES = {"empty": "holds no tokens: 0 pages",
              "shared": "reads an earlier layer's cache, but SGLang's one pool gives every layer a buffer "
                        "(layer_num = num_hidden_layers): ceil(ctx / B)",
              "every": "SGLang keeps every token outside its hybrid-SWA models: ceil(ctx / B)",
              "window": "vLLM's window rule: min(ceil(ctx / B), ceil(W / B) + 1)",
              "chunk": "a whole chunk: (B − gcd(B, C) + C − 1) // B + 1",
              "chunk-lag": "a whole chunk and the next token, as vLLM frees a chunk's pages one step late: "
                           "(B − gcd(B, C) + C) // B + 1",
              "touched": "the pages its held tokens touch: (ctx − 1) // B − (ctx − held) // B + 1"}


def layer_pages_rule(ctx: int, held: int, layer: Layer, engine: str | None, every: bool = False, ahead: int = 0,
                     limit: int | None = None) -> str:
    """The rule `layer_pages` applies, in words (for --explain)."""
    rule = PAGE_RULES[_layer_rule(ctx, held, layer, engine, every)]
    slots = ahead_at(ctx, ahead, limit)
    if slots < ahead:  # stopped at max_model_len
        return rule + (f", ctx and held counting {slots} of the {ahead} slots a --mtp step allocates ahead, which stop at "
                       f"vLLM's max_model_len, {limit:,}")
    return rule + (f", ctx and held counting the {ahead} slots a --mtp step allocates ahead" if ahead else "")


def _layer_rule(ctx: int, held: int, layer: Layer, engine: str | None, every: bool = False) -> str:
    """Which rule counts a layer's pages: the one place that picks it."""
    if held == 0:  # a KV-shared layer (Gemma 3n) reads an earlier layer's pages and allocates none of its own,
        # except in SGLang's one pool, sized for every layer (gemma3n_causal.py only skips writing to it)
        return "shared" if engine == "sglang" and layer.kv_shared else "empty"
    if every and held < ctx:  # a window or chunk the engine does not free
        return "every"
    if engine == "vllm" and layer.window is not None and held < ctx:
        return "window"
    if layer.chunk is not None and held < ctx:
        return "chunk-lag" if engine == "vllm" else "chunk"
    return "touched"


def chunk_pages(chunk: int, block: int, lag: bool = False, ahead: int = 0) -> int:
    """Pages a whole chunk of C tokens reserves: chunks start at multiples of C, so a chunk starts r tokens into a page
    for r a multiple of gcd(B, C) below B, and spans (r + C − 1) // B + 1 pages; the most, at r = B − gcd(B, C).
    C / B when B divides C. `lag`: vLLM frees the pages before the current chunk only for tokens already computed
    (async scheduling: KVCacheManager.allocate_slots removes skipped blocks up to the computed tokens less the one in
    flight), so on a chunk's first step a layer still holds the chunk before it: C + 1 tokens, (r + C) // B + 1
    pages; C / B + 1 when B divides C (vLLM's admission bound, ChunkedLocalAttentionSpec.max_admission_blocks_per_request,
    allows a prefill's in-flight tokens more: cdiv(min(C + max_in_flight_tokens, max_model_len), B)). `ahead`: slots
    a step allocates past the sequence (`lookahead`), spanned too."""
    span = chunk + (1 if lag else 0) + ahead
    return (block - gcd(block, chunk) + span - 1) // block + 1


def window_falls(window: int, block: int) -> int | None:
    """The residue x = (ctx − W) mod B at which a window's page count falls at the next ctx (a window past its first
    W tokens, under pages() at B > 1), or None when it never varies. The W positions start r = (ctx − W) mod B tokens
    into a page and span (r + W − 1) // B + 1 pages: one more from r = B − ((W − 1) mod B) on, up to r = B − 1."""
    return None if (window - 1) % block == 0 else block - 1


def engine_scheme(attention: AttentionKind, s: Settings) -> str:
    """The quantisation layout the engine stores: vLLM and SGLang turn an fp8 cache of a sparse MLA model into
    FlashMLA's scaled 656-byte entry (vLLM's fp8_ds_mla; SGLang's calculate_mla_kv_cache_dim with the DSA backends it
    picks on Hopper for fp8, flashmla_kv: kv_lora_rank + kv_lora_rank / 128 · 4 + qk_rope_head_dim · 2 bytes)."""
    sparse_mla = isinstance(attention, MLA) and attention.indexed and s.mla_cache == "latent"
    if s.engine in ("vllm", "sglang") and sparse_mla and s.kv_dtype == "fp8" and s.kv_quant == "none":
        return "fp8-ds-mla"
    return s.kv_quant


def stored_layout(name: str, attention: AttentionKind, s: Settings) -> tuple[str, str]:
    """The dtype and quantisation scheme the engine stores a cached tensor in: the indexer cache in fp8 with a scale
    per 128, always (vLLM DeepseekV32IndexerCache; SGLang NSATokenToKVPool.index_k_with_scale_buffer, 128 + 4 bytes a
    token), every other tensor at the KV dtype in engine_scheme's layout."""
    if s.engine in ("vllm", "sglang") and name == "index_k":
        return "fp8", "fp8-ds-mla"
    return s.kv_dtype, engine_scheme(attention, s)


def page_bytes(formula: Formula, heads: int, block: int, attention: AttentionKind, s: Settings) -> int:
    """Bytes of one page (`block` tokens of one layer and sequence) as the engine lays it out."""
    return sum(component_bytes(name, channels, heads, block, *stored_layout(name, attention, s))
               for name, channels in formula.components.items())


def stored_token(formula: Formula, heads: int, attention: AttentionKind,
                 s: Settings) -> list[tuple[str, int, str, str, int]] | None:
    """One token of one layer as the engine stores it, tensor by tensor (name, channels, dtype, scheme, bytes), where
    that differs from the cache's own layout (kv_dtype and --kv-quant): DeepSeek-V3.2's indexer key in fp8 with a
    scale, an fp8 cache of sparse MLA in fp8_ds_mla entries; None elsewhere, and under a group scheme g<G>, whose
    scales are per page span."""
    if s.engine not in ("vllm", "sglang") or group_size(s.kv_quant) is not None or \
            all(stored_layout(name, attention, s) == (s.kv_dtype, s.kv_quant) for name in formula.components):
        return None
    return [(name, channels, *stored_layout(name, attention, s),
             component_bytes(name, channels, heads, 1, *stored_layout(name, attention, s)))
            for name, channels in formula.components.items()]


def span_bytes(formula: Formula, heads: int, n_pages: int, block: int, attention: AttentionKind, s: Settings) -> int:
    """Bytes of `n_pages` whole pages of `block` tokens (one layer and sequence): the payload and scales of the tokens
    they span, so a group scheme g<G> keeps ceil(n·B / G) key groups a channel, not one a page (with ideal's and
    SGLang's one-token pages, the exact cache; not n · page_bytes, which gave every one-token page its own group).
    Every other scheme is n · page_bytes."""
    if group_size(s.kv_quant) is None:
        return n_pages * page_bytes(formula, heads, block, attention, s)
    return page_bytes(formula, heads, n_pages * block, attention, s)


@dataclass(frozen=True)
class HybridPages:
    """vLLM's unified page for a model with attention and constant-state layers: the attention block in tokens, and
    the bytes of every page (a state page padded to it)."""

    block: int
    page_bytes: int


def vllm_hybrid_pages(groups: tuple[ResolvedGroup, ...] | list[ResolvedGroup], s: Settings) -> HybridPages | None:
    """The unified page vLLM gives a hybrid model (see the module's rules); None for other engines and models."""
    if s.engine != "vllm":
        return None
    state_bytes = [parts_bytes(state_parts(g, s), 1) for g in groups]  # vLLM: every state tensor at its dtype
    growing = [g for g in groups if g.attention.cache_formula(g.layer, s.mla_cache).elements and not g.layer.kv_shared]
    if not growing or not any(state_bytes):
        return None
    first = growing[0].attention  # vLLM sizes the page by the first attention layer's spec
    formula = first.cache_formula(growing[0].layer, s.mla_cache)
    heads = first.cache_heads(growing[0].layer, s.mla_cache)
    # _align_hybrid_block_size: k = max(the backend's smallest kernel block, the block size), 128 at least for MLA,
    # a multiple of the Gated DeltaNet's checkpoint grid
    asked = s.block_size or DEFAULT_BLOCK["vllm"]
    k = max(VLLM_MLA_BLOCK if isinstance(first, MLA) else VLLM_KERNEL_BLOCK, asked)
    k = max(k, VLLM_MLA_HYBRID_BLOCK) if isinstance(first, MLA) else k
    if gdn_checkpoints([g for g, b in zip(groups, state_bytes) if b], s):
        k = lcm(k, VLLM_GDN_CHECKPOINT_ALIGNMENT)
    block = max(_holding_block(formula, heads, k, max(state_bytes), first, s), asked)
    return HybridPages(block, page_bytes(formula, heads, block, first, s))


def _holding_block(formula: Formula, heads: int, k: int, state: int, attention: AttentionKind, s: Settings) -> int:
    """The fewest tokens, a multiple of k, whose attention page holds `state` bytes: k · ceil(S / (k · A)) for vLLM's
    layouts, whose page is A bytes a token (_align_hybrid_block_size); under kvcalc's g<G> scheme a key group's scales
    come G tokens at a time, so a page is less than block · A (A, one token's page, pays a whole group) and the
    smallest multiple is searched for, from that bound up."""
    lo = -(-state // (k * page_bytes(formula, heads, 1, attention, s)))  # page(n) <= n · A: no fewer multiples

    def holds(m: int) -> bool:
        return page_bytes(formula, heads, m * k, attention, s) >= state

    hi = lo
    while not holds(hi):
        lo, hi = hi + 1, 2 * hi
    while lo < hi:  # the first multiple that holds, in lo..hi (page bytes grow with the tokens)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if holds(mid) else (mid + 1, hi)
    return k * lo


@dataclass(frozen=True)
class GroupPages:
    """How vLLM pages one layer group of a model in its hybrid pool (PoolLayout): the tokens a page of its attention
    holds, the bytes its attention page is padded to when not a whole part of the unified page (else None), and the
    bytes of its state's page."""

    block: int | None = None
    padded_page: int | None = None
    state_page: int | None = None
    state_pages: int = 1  # pages a state layer holds a sequence: 2 + the speculative tokens in a hybrid (MambaSpec)


@dataclass(frozen=True)
class PoolLayout:
    """vLLM's KV cache groups for a model whose layers' cache specs differ (see the module's rules): each layer
    group's pages, and vLLM's groups as (spec, layer indices)."""

    pages: tuple[GroupPages, ...]  # per layer group
    buckets: tuple[tuple[int, str], ...]  # per spec: the (layer group, part) its padding slots are counted with
    groups: tuple[tuple[int, tuple[int, ...]], ...]  # vLLM's groups: (spec, its layer indices)
    page: int = 0  # bytes of every page of the pool (unify_kv_cache_spec_page_size: the largest spec's)

    def _counts(self, here: range | frozenset[int] | None) -> list[int]:
        return [len(layers) if here is None else sum(1 for i in layers if i in here) for _, layers in self.groups]

    def slots(self, here: range | frozenset[int] | None = None) -> int:
        """Tensors of the pool on a GPU holding the layers `here`: a block is one page in each, as many as the busiest
        group has layers (get_kv_cache_config_from_groups)."""
        return max(self._counts(here), default=0)

    def pads(self, here: range | frozenset[int] | None = None) -> dict[tuple[int, str], int]:
        """Padding slots of each spec on a GPU holding the layers `here` (None: all), counted with the spec's first
        (layer group, part): a block of the pool is one page in each of the busiest group's layer count of tensors
        (get_kv_cache_config_from_groups), so every group of a spec costs that many pages a block, layers or not
        (kv_cache_planning._project_kv_cache_groups_to_worker keeps a stage's empty groups)."""
        counts = self._counts(here)
        slots = max(counts, default=0)
        out: dict[tuple[int, str], int] = {}
        for (bucket, _), n in zip(self.groups, counts):
            first = self.buckets[bucket]
            out[first] = out.get(first, 0) + slots - n
        return out


def sglang_buffers(groups: tuple[ResolvedGroup, ...] | list[ResolvedGroup], s: Settings, encoder_layers: int,
                   here: range | None = None, family: str = "") -> dict[tuple[int, str], int]:
    """The layer buffers SGLang's one pool holds beyond each layer's own, as extra slots of a group (on the stage
    holding the layers `here`):
    - an encoder–decoder model (Whisper): the groups with cross-attention, a decoder layer's cross-attention having a
      buffer of its own beside its self-attention, and each encoder layer one (configs/model_config.py
      num_attention_layers = encoder_layers + 2 · decoder_layers), every buffer holding all of a request's encoder
      positions and tokens (whisper.py pad_input_ids) as the decoder layer's pages do; the encoder layers' counted with
      the first such group;
    - Nemotron-NAS (SGLANG_NO_OP_BUFFERS): its layers without attention, each a buffer like an attention layer's, with
      the first attention group (nemotron_nas.py builds no attention there, but the plain MHATokenToKVPool has
      layer_num = num_hidden_layers, every layer of the model's one KV head count and head dim:
      kv_cache_configurator.py, model_config.py get_total_num_kv_heads).
    Empty for other engines and models."""
    if s.engine != "sglang":
        return {}
    out: dict[tuple[int, str], int] = {}

    def count(g: ResolvedGroup) -> int:
        return len(g.layers) if here is None else sum(1 for j in g.layers if j in here)

    for i, g in enumerate(groups):
        n = count(g)
        if g.cross is not None and n:
            out[(i, "kv")] = n + (encoder_layers if not out else 0)
    if family in SGLANG_NO_OP_BUFFERS:
        first = next((i for i, g in enumerate(groups) if g.attention.kind != "none"), None)
        no_op = sum(count(g) for g in groups if g.attention.kind == "none")
        if first is not None and no_op:
            out[(first, "kv")] = out.get((first, "kv"), 0) + no_op
    return out


# Models whose SGLang pool gives the layers without attention a buffer too: nemotron_nas.py (DeciLM)
SGLANG_NO_OP_BUFFERS = frozenset({"nemotron-nas"})


def vllm_layout(groups: tuple[ResolvedGroup, ...] | list[ResolvedGroup], s: Settings,
                speculative: int = 0) -> PoolLayout | None:
    """vLLM's pool for a model whose layers' cache specs differ (vllm/v1/core/kv_cache_planning.py get_kv_cache_groups);
    None for other engines, and where one spec or one type of attention at one block size covers every layer (one
    group: each layer's own pages, as kvcalc counts them without a layout). `speculative`: the tokens a step
    speculates (--mtp: the MTP layers), for which each state layer holds a page more (MambaSpec.num_speculative_blocks,
    MambaManager)."""
    if s.engine != "vllm":
        return None
    hybrid = vllm_hybrid_pages(groups, s)  # the attention block a state fits in (_align_hybrid_block_size)
    parts: list[tuple[int, str, tuple[object, ...], int, int]] = []  # (layer group, part, spec, block, page bytes)
    for i, g in enumerate(groups):
        att, layer = g.attention, g.layer
        formula = att.cache_formula(layer, s.mla_cache)
        if formula.elements and not layer.kv_shared:  # an attention layer; its cross-attention pages ride with it
            block = hybrid.block if hybrid is not None else block_tokens(att, s)
            heads = att.cache_heads(layer, s.mla_cache)
            kind = ("window", layer.window) if layer.window else ("chunk", layer.chunk) if layer.chunk else ("full", 0)
            kv_spec = (kind, isinstance(att, MLA), tuple(formula.components.items()), heads, g.cross is not None)
            parts.append((i, "kv", kv_spec, block, page_bytes(formula, heads, block, att, s)))
        state = state_parts(g, s)
        if parts_bytes(state, 1):  # a constant state: vLLM's MambaSpec
            parts.append((i, "state", (("state", 0), False, state, 0, False), 0,
                          hybrid.page_bytes if hybrid is not None else parts_bytes(state, 1)))
    if len({(spec, block, page) for _, _, spec, block, page in parts}) <= 1:
        return None  # one spec (is_kv_cache_spec_uniform)
    if all(part == "kv" for _, part, *_ in parts) and len({(spec[0], block) for _, _, spec, block, _ in parts}) == 1:
        return None  # one type of attention at one block size (UniformTypeKVCacheSpecs): one group, each layer's pages
    top = max(page for *_, page in parts)  # unify_kv_cache_spec_page_size: every page as large as the largest
    pages: dict[int, GroupPages] = {}
    buckets: dict[tuple[object, ...], list[tuple[int, str]]] = {}
    for i, part, spec, block, page in parts:
        padded = None
        if part == "state":
            padded = top  # a state page is padded to the unified page
        elif page < top and top % page == 0:
            block *= top // page  # a smaller attention page holds more tokens
        elif page < top:
            padded = top  # not a whole part: padded (backends that index pages by their stride)
        old = pages.get(i, GroupPages(hybrid.block if hybrid is not None else None))
        pages[i] = (GroupPages(block, padded, old.state_page, old.state_pages) if part == "kv"
                    else GroupPages(old.block, old.padded_page, top, VLLM_RESIDENT_STATES + speculative))
        buckets.setdefault((part, spec, block, padded), []).append((i, part))
    counts = [sum(len(groups[i].layers) for i, _ in members) for members in buckets.values()]
    # _get_kv_cache_groups_uniform_page_size: groups of the fewest layers a spec has, or of the most when the most is
    # under 1.5 times the fewest; each spec split into ceil(n / size) groups, its layers dealt round (layers[i::n])
    size = max(counts) if 2 * max(counts) < 3 * min(counts) else min(counts)
    split = []
    for b, members in enumerate(buckets.values()):
        layers = sorted(j for i, _ in members for j in groups[i].layers)
        n = -(-len(layers) // size)
        split += [(b, tuple(layers[k::n])) for k in range(n)]
    default = GroupPages(hybrid.block if hybrid is not None else None)
    return PoolLayout(tuple(pages.get(i, default) for i in range(len(groups))),
                      tuple(members[0] for members in buckets.values()), tuple(split), top)
