"""Bytes a pass moves through memory: weights read plus KV cache read (decode) or written (prefill).

Conventions (also in the README):
- Constant states (linear attention, SSM layers) are read and written back at every decode step; a prefill writes
  them once.
- A decode step reads every weight a token uses once for the whole batch (MoE: the top-k routed and shared experts,
  a lower bound: with a batch, different tokens pick different experts, up to all of them; encoder–decoder: not the
  encoder's nor the cross-attention's K and V projections, which run once per input) and, of every sequence's
  KV cache at context t, what its query attends: the keys each layer's query sees (min(t, W) under a window, the
  keys of its own chunk under a chunk, an earlier layer's cache for a KV-shared layer), and under DSA every index
  key and the top-k latents (kvcalc.costs.cache.read_at; by token, not by page). The input embedding is a lookup:
  only one row per sequence is read (a tied table is also read whole as the LM head: both reads are counted), and of
  learned positions one row a step, every sequence of the batch being at the same position.
- A prefill reads every weight once, but of each MoE layer only the routed experts its T = batch · ctx tokens can
  reach, min(E, T · k) (every expert once T · k >= E; at T = 1 a decode step's top-k). Where T · k < E this is an
  upper estimate (the router may pick fewer: partial_experts), so the prefill time there is no lower bound. And
  of each lookup table the rows its tokens look up, at most the whole table (of learned positions the ctx rows of one
  sequence: the batch's sequences share them); it writes the KV cache of its tokens.
- Activations are left out (they are small next to weights and cache at decode time).
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from kvcalc.attention import KV_PROJECTIONS
from kvcalc.costs.cache import CacheReport, kv_cache, read_at, written_at
from kvcalc.costs.engine_files import engine_read_extra_bits, expert_tokens, mxfp4_scale_bytes, unquantized_params
from kvcalc.costs.flops import step_tokens
from kvcalc.costs.params import (
    expert_matrices,
    ffn_of_layer,
    ffn_params,
    ffn_runs,
    mtp_proj_and_norms,
    param_counts,
    router_params,
)
from kvcalc.costs.prefill_form import absorbed_queries
from kvcalc.costs.state import parts_bytes, step_state_bytes
from kvcalc.dtypes import dtype_bits
from kvcalc.settings import Settings
from kvcalc.spec import ModelSpec, MoEFFN


def _lookup_tables(spec: ModelSpec) -> int:
    """Parameters of the tables read by lookup, not in full: the input embedding (unless tied), learned positions and
    the lookup tables of extra weights (Gemma 3n's per-layer embeddings)."""
    tables = 0 if spec.tie_embeddings else spec.vocab_size * spec.d_model
    tables += sum(x.table for x in spec.extra_weights.values())
    return tables + spec.position_params


def _lookup_rows(spec: ModelSpec, tokens: int, positions: int) -> int:
    """Values the reads of `tokens` tokens at `positions` positions fetch from the lookup tables, each table at most
    whole: the input embedding (a tied one too: the LM head's whole read is counted apart), learned positions, and the
    extra weights' tables."""
    rows = min(spec.vocab_size, tokens) * spec.d_model
    if spec.learned_positions:  # a row a position (n_ctx = max_context rows: GPT-2's wpe, Whisper's), whatever the batch
        rows += min(spec.max_context, positions) * spec.d_model
    return rows + sum(min(x.table, tokens * x.row) for x in spec.extra_weights.values())


def _per_input(component: str) -> bool:
    """Weights that run once per input, in the prefill, and that a cached decode step never reads: the encoder's, and
    the K and V projections of each decoder layer's cross-attention, whose outputs (the encoder positions' K/V) are
    cached (vLLM's WhisperCrossAttention projects them only when given the encoder's output, at prefill; transformers
    reuses its EncoderDecoderCache alike)."""
    return component.startswith("encoder/") or component in ("cross/k", "cross/v")


def _read_once(spec: ModelSpec, mtp: bool) -> tuple[int, int]:
    """Parameters a decode step reads whatever the batch (active, less the weights run once per input and the lookup
    tables) and those a prefill reads (all, less the lookup tables): once per spec."""
    params = param_counts(spec, mtp)
    per_input = sum(v for k, v in params.active_breakdown.items() if _per_input(k))
    tables = _lookup_tables(spec)
    # a KV-shared layer's own K/V projections, in its checkpoint but never run (it reads an earlier layer's cache)
    unused = sum(len(g.layers) * sum(w.size for w in g.attention.weights(g.layer) if w.name in KV_PROJECTIONS)
                 for g in spec.groups if g.layer.kv_shared)
    return params.active - per_input - tables - unused, params.total - tables - unused


class _MoeRun(NamedTuple):
    """A run of MoE layers as traffic reads it: its layers, experts E, top-k, parameters an expert (biases too), an
    expert's matrices and the router's parameters."""

    layers: int
    experts: int
    top_k: int
    per_expert: int
    matrices: int
    router: int

    def reached(self, tokens: int) -> int:
        """The experts `tokens` tokens can reach in one of these layers: min(E, tokens · k) (top-k routing)."""
        return min(self.experts, tokens * self.top_k)


def _unreached_experts(spec: ModelSpec, mtp: bool, tokens: int) -> int:
    """Parameters of the routed experts a prefill of `tokens` tokens cannot reach: each MoE layer's tokens pick at
    most tokens · k of its E experts (top-k routing), so E − min(E, tokens · k) of them are not read; the MTP layers
    (`mtp`) run the last layer's FFN."""
    return sum(r.layers * (r.experts - r.reached(tokens)) * r.per_expert for r in _moe_runs(spec, mtp))


def partial_experts(spec: ModelSpec, s: Settings) -> bool:
    """Whether a prefill's tokens can reach fewer than all of some MoE layer's experts (T · k < E), where its expert
    traffic is an upper estimate: batch · ctx on one GPU, under a layout those a rank's experts serve (a replica's, or
    its expert group's: engine_files.expert_tokens), as the per-rank roofline reads them."""
    tokens = expert_tokens(s, -(-s.batch // s.dp))
    return any(r.reached(tokens) < r.experts for r in _moe_runs(spec, s.mtp))


def _moe_runs(spec: ModelSpec, mtp: bool) -> list[_MoeRun]:
    """The runs of MoE layers, the MTP layers' too (`mtp`: they run the last layer's FFN): once per spec."""
    return spec.memo(("moe_runs", mtp), _plan_moe_runs, spec, mtp)


def _plan_moe_runs(spec: ModelSpec, mtp: bool) -> list[_MoeRun]:
    runs = [(run.ffn, run.count) for run in ffn_runs(spec)]
    if mtp and spec.mtp_group() is not None:
        runs.append((ffn_of_layer(spec, spec.n_layers - 1), spec.mtp_layers))
    d = spec.d_model
    return [_MoeRun(n, ffn.n_routed_experts, ffn.n_experts_per_tok,
                    ffn_params(ffn, d)[0]["ffn/routed"] // ffn.n_routed_experts, expert_matrices(ffn, d),
                    router_params(ffn, d))
            for ffn, n in runs if isinstance(ffn, MoEFFN)]


def _weights_read_bytes(spec: ModelSpec, s: Settings, params: int, tokens: int, positions: int, prefill: bool,
                        absorbed: int | None = 0, heads: int = 1) -> int:
    """Bytes of the `params` weights a pass of `tokens` tokens at `positions` positions reads (a decode step: the
    batch at one position; a prefill: batch · ctx at ctx), at --weights-dtype, and under an engine at the widths it
    keeps them (engine_files.engine_read_extra_bits: a decode step reads MLA's copies under the absorbed schedule, a
    prefill where it attends `absorbed` of its ctx queries absorbed (prefill_form.absorbed_queries): in kv_b_proj's
    stead for all of them, beside it for some) with the MXFP4 block scales of the experts the pass reaches (mxfp4_scale_bytes: a decode
    step's top-k, a prefill's min(E, T · k)); rounded up once. `heads`: the LM head's reads among `params`, each at
    the head's width (a speculative step's drafter reads it again for each MTP layer)."""
    bits = params * dtype_bits(s.weights_dtype, "weights")
    if s.engine not in ("vllm", "sglang"):
        return -(-bits // 8)
    runs = _moe_runs(spec, s.mtp)
    mtp = spec.mtp_group() if s.mtp else None
    held = [(g, len(g.layers)) for g in spec.groups] + ([(mtp, spec.mtp_layers)] if mtp is not None else [])
    whole = replace(s, tp=1, pp=1, dp=1, ep=1, dp_attention=False)  # the whole model's weights, as one replica reads them
    plain = unquantized_params(spec, whole, [(run.ffn, run.count) for run in ffn_runs(spec)], first=prefill)
    bits += engine_read_extra_bits(
        spec, s, held, head=heads * spec.vocab_size * spec.d_model, lookups=_lookup_rows(spec, tokens, positions),
        routers=sum(r.layers * r.router for r in runs), mtp_proj=spec.mtp_layers * mtp_proj_and_norms(spec)[0] if mtp else 0,
        plain=plain, absorbed=absorbed != 0 if prefill else s.schedule == "absorbed",
        both=prefill and absorbed != s.ctx)
    reach = tokens if prefill else 1  # a decode step's weights: the top-k experts of one token (a lower bound)
    experts = sum(r.layers * r.reached(reach) * r.matrices for r in runs)
    return -(-bits // 8) + mxfp4_scale_bytes(spec, s, experts)


def routed_read_bytes(spec: ModelSpec, s: Settings, tokens: int, ranks: int = 1) -> int:
    """Bytes of the routed experts `tokens` tokens reach, min(E, tokens · k) of each MoE layer (a decode step's: those
    of one token, the top-k, as _weights_read_bytes counts them), at --weights-dtype (the engines quantize experts
    as well: RoutedExperts) with their MXFP4 block scales; the part of a pass's weights a layout's expert ranks share.
    `ranks`: the whole experts of one of that many expert-parallel ranks, at least ceil(reached / ranks) a layer (the
    next layer's routing waits on this one's, so each layer's busiest rank adds up)."""
    def experts(r: _MoeRun) -> int:
        return -(-r.reached(tokens) // ranks)

    params = sum(r.layers * experts(r) * r.per_expert for r in _moe_runs(spec, s.mtp))
    matrices = sum(r.layers * experts(r) * r.matrices for r in _moe_runs(spec, s.mtp))
    return -(-params * dtype_bits(s.weights_dtype, "weights") // 8) + mxfp4_scale_bytes(spec, s, matrices)


def decode_bytes(spec: ModelSpec, s: Settings, cache: CacheReport | None = None,
                 weights: int | None = None) -> dict[str, int]:
    """Bytes one decode step at context `s.ctx` moves, by part: 'weights' and 'kv_cache' read (the keys attended),
    and (hybrid models) 'state': every constant state read and written back. `cache`: kv_cache(spec, s), and
    `weights`: decode_weights(spec, s), when the caller has them."""
    if weights is None:
        weights = decode_weights(spec, s)
    cache = cache or kv_cache(spec, s)
    # where every layer reads what it holds, the read is the cache's own bytes, already computed
    out = {"weights": weights, "kv_cache": cache.bytes if cache.plan.reads_held else read_at(cache.plan, s)}
    state = cache.state_bytes
    if state:
        out["state"] = step_state_bytes(state, parts_bytes(cache.plan.temporal_parts, s.batch), step_tokens(spec, s))
    return out


def decode_weights(spec: ModelSpec, s: Settings) -> int:
    """Bytes of the weights a decode step reads for the batch, once per spec, MTP, batch, weights dtype, engine and MLA
    schedule (no context changes them)."""
    key = ("decode_weights", s.mtp, s.batch, s.weights_dtype, s.engine, s.schedule)
    return spec.memo(key, _decode_weights, spec, s)


def _decode_weights(spec: ModelSpec, s: Settings) -> int:
    read = spec.memo(("read_once", s.mtp), _read_once, spec, s.mtp)[0] + _lookup_rows(spec, s.batch, 1)
    # a speculative step's drafter reads the shared LM head again for each MTP layer's draft, after the model's
    # forward: vLLM installs the target's head itself (eagle/utils.py share_target_lm_head), at the head's width
    drafts = step_tokens(spec, s) - 1  # k under --mtp, else none
    read += drafts * spec.vocab_size * spec.d_model
    return _weights_read_bytes(spec, s, read, s.batch, 1, prefill=False, heads=1 + drafts)


def prefill_bytes(spec: ModelSpec, s: Settings, cache: CacheReport | None = None,
                  layout: Settings | None = None) -> dict[str, int]:
    """Bytes a prefill of `s.ctx` tokens moves, by part: 'weights' (all read once, but the experts its tokens cannot
    reach) and 'kv_cache' (written). `cache`: kv_cache(spec, s), when the caller has it; `layout`: the settings whose
    engine rules say which queries attend MLA absorbed (prefill_form.absorbed_queries; `s` unless given: a caller
    pricing one replica of a layout gives the layout)."""
    absorbed = absorbed_queries(spec, layout or s)
    whole = spec.memo(("read_once", s.mtp), _read_once, spec, s.mtp)[1] - _unreached_experts(spec, s.mtp, s.batch * s.ctx)
    cache = cache or kv_cache(spec, s)
    tokens = s.batch * s.ctx
    out = {"weights": _weights_read_bytes(spec, s, whole + _lookup_rows(spec, tokens, s.ctx), tokens, s.ctx, prefill=True,
                                          absorbed=absorbed),
           "kv_cache": written_at(cache.plan, s, cache.bytes)}
    if cache.state_bytes:
        out["state"] = cache.state_bytes  # written once at the end of the prompt
    return out
