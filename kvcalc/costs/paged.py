"""A serving engine's paged KV cache: whole pages of B tokens a layer, what vLLM and SGLang really allocate.

Rules (also in the README):
- A sequence holding `held` of its ctx positions (the last ones: a window's, or all) touches the pages covering
  positions ctx − held … ctx − 1: (ctx − 1) // B − (ctx − held) // B + 1 of them, so windowed layers pay at most one
  page beyond their span (vLLM's SlidingWindowManager frees the pages before it). A chunked layer holds its current
  chunk, which starts at a multiple of C (kvcalc.attention.base), reserved whole as its min(ctx, C) tokens are: past
  the first chunk, the most pages a chunk can span, (B − gcd(B, C) + C − 1) // B + 1, which is C / B when B divides
  C (ChunkedLocalAttentionManager frees the pages of the chunks before). A layer holding no tokens (KV-shared)
  has no pages, whatever its window or chunk. Cross-attention holds ceil(enc / B) pages
  of encoder positions. Under a group scheme g<G> a key group runs along the tokens the pages span: ceil(n·B / G)
  groups a channel for n pages (`span_bytes`).
- vLLM: a window layer at its bound, not by alignment: ceil(W / B) + 1 once the window caps the layer (a page more
  than the window touches when B divides W − 1), never more than ceil(ctx / B) (the "+1 here because the sliding window may not start from the
  beginning of the block" of vllm/v1/kv_cache_interface.py SlidingWindowSpec.max_memory_usage_bytes; that function
  sizes a prefill step, W − 1 + max_num_batched_tokens tokens, while kvcalc counts the cache of a sequence at ctx).
- SGLang frees a windowed or chunked layer's old tokens only in its hybrid-SWA pool, built for Llama4, GptOss,
  MiMoV2Flash, Step3p5 and Gemma4 (srt/configs/model_config.py is_hybrid_swa_model); any other model's layers keep
  every token in its one pool (`keeps_every_token`: ceil(ctx / B) pages a layer).
- Page sizes: `ideal` is exact (B = 1); SGLang's default page_size is 1 (server_args.py); vLLM's default
  block_size is 16, and 64 for MLA layers (vllm/platforms/cuda.py: "Forcing kv cache block size to 64 for FlashMLA
  backend", also for FlashMLASparse). --block-size overrides all.
- vLLM and SGLang store DeepSeek-V3.2's indexer key as fp8 with one fp32 scale per 128 values (DeepseekV32IndexerCache;
  NSATokenToKVPool: head_dim + head_dim // 128 · 4 bytes a token) whatever the KV dtype, SGLang in pages of 64
  (server_args.py sets page_size 64 for DeepSeek NSA); vLLM turns an fp8 cache of a sparse MLA model
  into its fp8_ds_mla layout (656 bytes a token for DeepSeek-V3.2; kvcalc.costs.quant).
- Constant states (linear attention, SSMs): vLLM keeps each layer's state of a request in one page of its KV pool
  and makes every page the same size (vllm/platforms/interface.py `_align_hybrid_block_size`, without prefix caching
  of states: mamba_cache_mode "none"): the attention block grows to a = k · ceil(S / (k · A)) tokens, with S the
  bytes of one layer's state, A the bytes one token adds to an attention layer and k = max(the backend's smallest
  block, the block size asked) (16, or 64 for FlashMLA), and each state page is padded to a · A bytes. SGLang
  keeps states in its own Mamba pool at their exact size (mem_cache/memory_pool.py MambaPool); ideal is exact.
- The pool's free pages and prefix sharing are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

from kvcalc.attention import MLA, AttentionKind, Formula, Layer
from kvcalc.costs.quant import component_bytes, group_size
from kvcalc.costs.state import parts_bytes, state_parts
from kvcalc.settings import Settings
from kvcalc.spec import ResolvedGroup

DEFAULT_BLOCK = {"ideal": 1, "vllm": 16, "sglang": 1}  # tokens a page; vLLM CacheConfig.block_size, SGLang page_size
# SGLang frees a windowed (or chunked) layer's old tokens only in its hybrid-SWA pool, which it builds for these model
# families (srt/configs/model_config.py is_hybrid_swa_model: Llama4, GptOss, MiMoV2Flash, Step3p5, Gemma4); every
# other model's layers share one pool of every token, the window applied by the attention kernel only
SGLANG_HYBRID_SWA = frozenset({"llama4", "gpt-oss", "mimo_v2_flash", "step3p5", "gemma4"})


def keeps_every_token(family: str, engine: str | None) -> bool:
    """Whether the engine pages every token of a windowed or chunked layer of a model of `family` (SGLang outside
    its hybrid-SWA models)."""
    return engine == "sglang" and family not in SGLANG_HYBRID_SWA
VLLM_MLA_BLOCK = 64  # vllm/platforms/cuda.py forces 64 for the FlashMLA and FlashMLASparse backends
SGLANG_NSA_BLOCK = 64  # sglang server_args.py: "Setting page size to 64 for DeepSeek NSA" (NSATokenToKVPool asserts it)


def block_tokens(attention: AttentionKind, s: Settings, hybrid: HybridPages | None = None) -> int:
    """Tokens a page holds for a layer of `attention` under the settings' engine (`hybrid`: vLLM's unified page)."""
    if hybrid is not None:
        return hybrid.block
    if s.block_size is not None:
        return s.block_size
    if s.engine == "vllm" and isinstance(attention, MLA):
        return VLLM_MLA_BLOCK
    if s.engine == "sglang" and isinstance(attention, MLA) and attention.indexed:
        return SGLANG_NSA_BLOCK
    return DEFAULT_BLOCK[s.engine or "ideal"]


def pages(ctx: int, held: int, block: int) -> int:
    """Pages one sequence's last `held` positions of `ctx` touch, at `block` tokens a page."""
    if held == 0:
        return 0
    return (ctx - 1) // block - (ctx - held) // block + 1


def layer_pages(ctx: int, held: int, block: int, layer: Layer, engine: str | None, every: bool = False) -> int:
    """Pages one sequence holds in one layer under the engine's rule (see the module's rules); `every`: the engine
    keeps every token of a windowed layer (`keeps_every_token`)."""
    rule = _layer_rule(ctx, held, layer, engine, every)
    if rule == "empty":
        return 0
    if rule == "every":
        return pages(ctx, ctx, block)
    if rule == "window":
        return min(-(-ctx // block), -(-held // block) + 1)
    if rule == "chunk":  # a chunk past the first, reserved whole: the most pages one can span
        return chunk_pages(layer.chunk or 0, block)
    return pages(ctx, held, block)


PAGE_RULES = {"empty": "holds no tokens: 0 pages",
              "every": "SGLang keeps every token outside its hybrid-SWA models: ceil(ctx / B)",
              "window": "vLLM's window rule: min(ceil(ctx / B), ceil(W / B) + 1)",
              "chunk": "a whole chunk: (B − gcd(B, C) + C − 1) // B + 1",
              "touched": "the pages its held tokens touch: (ctx − 1) // B − (ctx − held) // B + 1"}


def layer_pages_rule(ctx: int, held: int, layer: Layer, engine: str | None, every: bool = False) -> str:
    """The rule `layer_pages` applies, in words (for --explain)."""
    return PAGE_RULES[_layer_rule(ctx, held, layer, engine, every)]


def _layer_rule(ctx: int, held: int, layer: Layer, engine: str | None, every: bool = False) -> str:
    """Which rule counts a layer's pages: the one place that picks it."""
    if held == 0:  # a KV-shared layer (Gemma 3n) reads an earlier layer's pages and allocates none of its own
        return "empty"
    if every and held < ctx:  # a window or chunk the engine does not free
        return "every"
    if engine == "vllm" and layer.window is not None and held < ctx:
        return "window"
    if layer.chunk is not None and held < ctx:
        return "chunk"
    return "touched"


def chunk_pages(chunk: int, block: int) -> int:
    """Pages a whole chunk of C tokens reserves: chunks start at multiples of C, so a chunk starts r tokens into a page
    for r a multiple of gcd(B, C) below B, and spans (r + C − 1) // B + 1 pages; the most, at r = B − gcd(B, C).
    C / B when B divides C."""
    return (block - gcd(block, chunk) + chunk - 1) // block + 1


def window_falls(window: int, block: int) -> int | None:
    """The residue x = (ctx − W) mod B at which a window's page count falls at the next ctx (a window past its first
    W tokens, under pages() at B > 1), or None when it never varies. The W positions start r = (ctx − W) mod B tokens
    into a page and span (r + W − 1) // B + 1 pages: one more from r = B − ((W − 1) mod B) on, up to r = B − 1."""
    return None if (window - 1) % block == 0 else block - 1


def engine_scheme(attention: AttentionKind, s: Settings) -> str:
    """The quantisation layout the engine stores: vLLM turns an fp8 cache of a sparse MLA model into fp8_ds_mla."""
    sparse_mla = isinstance(attention, MLA) and attention.indexed and s.mla_cache == "latent"
    if s.engine == "vllm" and sparse_mla and s.kv_dtype == "fp8" and s.kv_quant == "none":
        return "fp8-ds-mla"
    return s.kv_quant


def page_bytes(formula: Formula, heads: int, block: int, attention: AttentionKind, s: Settings) -> int:
    """Bytes of one page (`block` tokens of one layer and sequence) as the engine lays it out."""
    scheme = engine_scheme(attention, s)
    out = 0
    for name, channels in formula.components.items():
        if s.engine in ("vllm", "sglang") and name == "index_k":  # the indexer cache: fp8 with a scale per 128, always
            # (vLLM DeepseekV32IndexerCache; SGLang NSATokenToKVPool.index_k_with_scale_buffer, 128 + 4 bytes a token)
            out += component_bytes(name, channels, heads, block, "fp8", "fp8-ds-mla")
        else:
            out += component_bytes(name, channels, heads, block, s.kv_dtype, scheme)
    return out


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
    one_token = page_bytes(formula, first.cache_heads(growing[0].layer, s.mla_cache), 1, first, s)
    k = max(VLLM_MLA_BLOCK if isinstance(first, MLA) else DEFAULT_BLOCK["vllm"], s.block_size or 0)
    block = max(k * -(-max(state_bytes) // (k * one_token)), s.block_size or 0)
    return HybridPages(block, block * one_token)
