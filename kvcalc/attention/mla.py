"""DeepSeek's multi-head latent attention (DeepSeek-V2 §2.1): one latent c_KV of d_c and a decoupled RoPE key of d_R
per token are cached; per-head keys and values are rebuilt by W_UK and W_UV, or those are folded ("absorbed") into
the query and the output. Named as in DeepSeek's configs.

With DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5) a lightning indexer caches one more key of d_I per token; each
query scores every key it can see with H_I cheap heads (score = Σ_h w_h·ReLU(q_h·k)), and MLA attends only the top
k (DeepSeek-V3.2-Exp inference/model.py, class Indexer: wq_b, wk, k_norm, weights_proj, k_cache)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from kvcalc.attention.base import (
    AttentionKind,
    Dim,
    Formula,
    HeadCount,
    Layer,
    Symbol,
    TokenCount,
    Weight,
    Work,
    keys_seen,
    keys_seen_sum,
    matrix_flops,
)
from kvcalc.settings import MLA_CACHE_LAYOUTS, MLA_SCHEDULES  # the layouts and schedules, named once (settings)


class MLA(AttentionKind):
    """Multi-head latent attention with decoupled RoPE."""

    kind: Literal["mla"]
    n_heads: HeadCount = Field(description="Query heads n_h.")
    kv_lora_rank: Dim = Field(description="KV latent dim d_c, the compressed vector c_KV that is cached.")
    q_lora_rank: Dim | None = Field(
        None, description="Query latent dim d_c' (absent: plain W_Q, as in DeepSeek-V2-Lite)."
    )
    qk_nope_head_dim: Dim = Field(description="Per-head query/key dim without RoPE, rebuilt from the latent.")
    qk_rope_head_dim: Dim = Field(description="Decoupled RoPE key dim d_R, one key shared by all heads.")
    v_head_dim: Dim = Field(description="Per-head value dim.")
    index_n_heads: HeadCount | None = Field(None, description="Indexer heads H_I (DeepSeek-V3.2 index_n_heads).")
    index_head_dim: Dim | None = Field(None, description="Indexer key dim d_I, cached per token (index_head_dim).")
    index_topk: TokenCount | None = Field(None, description="Keys each query attends after the indexer's top-k (index_topk).")

    label: ClassVar[str] = "MLA"
    layouts: ClassVar[tuple[str, ...]] = MLA_CACHE_LAYOUTS
    schedules: ClassVar[tuple[str, ...]] = MLA_SCHEDULES

    @model_validator(mode="after")
    def _indexer_whole(self) -> MLA:
        given = [self.index_n_heads, self.index_head_dim, self.index_topk]
        if any(v is not None for v in given) and None in given:
            raise ValueError("an indexer needs index_n_heads, index_head_dim and index_topk together")
        return self

    @property
    def indexed(self) -> bool:
        """Whether a sparse indexer selects the keys attended (DeepSeek Sparse Attention)."""
        return self.index_topk is not None

    def sparse_topk(self) -> int | None:
        return self.index_topk

    @property
    def qk_head_dim(self) -> int:
        """d_qk = d_nope + d_R: a query or key head, its RoPE part included."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def cache_formula(self, layer: Layer, layout: str) -> Formula:
        formula = self._attention_cache(layer, layout)
        if not self.indexed or self.index_head_dim is None:
            return formula
        # DeepSeek-V3.2: the indexer's key of d_I per token is cached beside the latent (Indexer.k_cache)
        d_i = Symbol("d_I", self.index_head_dim, f"{layer.path}.index_head_dim")
        return Formula(f"{formula.expression} + d_I", formula.symbols + (d_i,), formula.elements + d_i.value,
                       {**formula.components, "index_k": d_i.value},
                       formula.reference + "; plus the indexer key (DeepSeek-V3.2 Indexer.k_cache)")

    def _attention_cache(self, layer: Layer, layout: str) -> Formula:
        at = layer.path
        if layout == "latent":
            d_c = Symbol("d_c", self.kv_lora_rank, f"{at}.kv_lora_rank")
            d_r = Symbol("d_R", self.qk_rope_head_dim, f"{at}.qk_rope_head_dim")
            return Formula(
                "d_c + d_R", (d_c, d_r), d_c.value + d_r.value, {"c_kv": d_c.value, "k_rope": d_r.value},
                "DeepSeek-V2 §2.1.3 and Table 1: the latent c_KV plus the decoupled RoPE key (what DeepSeek, vLLM, SGLang cache)",
            )
        n_h = Symbol("n_h", self.n_heads, f"{at}.n_heads")
        nope = Symbol("d_nope", self.qk_nope_head_dim, f"{at}.qk_nope_head_dim")
        rope = Symbol("d_R", self.qk_rope_head_dim, f"{at}.qk_rope_head_dim")
        d_v = Symbol("d_v", self.v_head_dim, f"{at}.v_head_dim")
        k, v = self.n_heads * self.qk_head_dim, self.n_heads * self.v_head_dim
        return Formula(
            "n_h·(d_nope + d_R) + n_h·d_v", (n_h, nope, rope, d_v), k + v, {"k": k, "v": v},
            "per-head K and V rebuilt from the latent (DeepSeek reference 'naive' mode; HF transformers 4.x)",
        )

    def cache_heads(self, layer: Layer, layout: str) -> int:
        return 1 if layout == "latent" else self.n_heads  # the latent is one vector; expanded K/V have n_h heads

    def cache_shapes(self, layer: Layer, batch: int, held: int, layout: str) -> dict[str, tuple[int, ...]]:
        if layout == "latent":
            out: dict[str, tuple[int, ...]] = {"c_kv": (batch, held, self.kv_lora_rank), "k_rope": (batch, held, self.qk_rope_head_dim)}
        else:
            out = {"k": (batch, held, self.n_heads, self.qk_head_dim), "v": (batch, held, self.n_heads, self.v_head_dim)}
        if self.index_head_dim is not None:
            out["index_k"] = (batch, held, self.index_head_dim)
        return out

    def key_cap(self, layer: Layer) -> int | None:
        """The most keys a query attends: its window, capped by the indexer's top-k."""
        caps = [c for c in (layer.window, self.index_topk) if c]
        return min(caps) if caps else None

    def keys_at(self, layer: Layer, t: int) -> int:
        scanned = self.scan_at(layer, t)
        return min(scanned, self.index_topk) if self.index_topk else scanned

    def keys_prefill(self, layer: Layer, n: int) -> int:
        # Σ_t min(t, W, k): a window of min(W, k) (an indexer with chunked attention is refused in `problems`)
        return keys_seen(n, self.key_cap(layer)) if self.indexed else self.scan_prefill(layer, n)

    def keys_prefills(self, layer: Layer, n: int) -> int:
        return keys_seen_sum(n, self.key_cap(layer)) if self.indexed else self.scan_prefills(layer, n)

    def reads_held(self, layer: Layer) -> bool:
        return super().reads_held(layer) and not self.indexed

    def tokens_read(self, layer: Layer, ctx: int, component: str) -> int:
        # DSA: the indexer scores every visible key's index_k; the latent (or K/V) is read for the top-k keys only
        # (DeepSeek-V3.2 sparse_attn / vLLM's FlashMLA sparse kernel gather the selected tokens)
        return self.scan_at(layer, ctx) if component == "index_k" else self.keys_at(layer, ctx)

    def problems(self, layer: Layer) -> list[str]:
        if self.indexed and layer.chunk:
            return [f"{layer.path}: an indexer (index_topk) with chunked attention is not modelled"]
        return []

    def weights(self, layer: Layer) -> tuple[Weight, ...]:
        d, n_h, c, r = layer.d_model, self.n_heads, self.kv_lora_rank, self.qk_rope_head_dim
        nope, d_v, q = self.qk_nope_head_dim, self.v_head_dim, self.q_lora_rank
        if q:  # DeepSeek-V2 eq. 12-14: c_Q = W_DQ h, q_C = W_UQ c_Q, q_R = RoPE(W_QR c_Q)
            out = [Weight("W_DQ", "attn/q_down", (d, q)), Weight("W_UQ", "attn/q_up", (q, n_h * nope)),
                   Weight("W_QR", "attn/q_up", (q, n_h * r)), Weight("q_a_layernorm", "attn/norms", (q,), "norm")]
        else:  # no query compression (DeepSeek-V2-Lite): one W_Q for both parts
            out = [Weight("W_Q", "attn/q", (d, n_h * (nope + r)))]
        # eq. 9 and 15: c_KV = W_DKV h and k_R = RoPE(W_KR h), one projection in HF (kv_a_proj_with_mqa)
        out += [Weight("W_DKV", "attn/kv_down", (d, c)), Weight("W_KR", "attn/kv_down", (d, r)),
                Weight("kv_a_layernorm", "attn/norms", (c,), "norm"),
                # eq. 10-11: k_C = W_UK c_KV, v_C = W_UV c_KV (kv_b_proj)
                Weight("W_UK", "attn/kv_up", (c, n_h * nope)), Weight("W_UV", "attn/kv_up", (c, n_h * d_v)),
                Weight("W_O", "attn/o", (n_h * d_v, d))]
        if self.index_n_heads is not None and self.index_head_dim is not None:
            h_i, d_i = self.index_n_heads, self.index_head_dim
            # Indexer: wq_b reads the query latent c_Q (x without one), wk and weights_proj read x; k_norm is a LayerNorm
            out += [Weight("W_IQ", "attn/index", (q or d, h_i * d_i)), Weight("W_IK", "attn/index", (d, d_i)),
                    Weight("W_IW", "attn/index", (d, h_i)), Weight("index_k_norm", "attn/index", (2 * d_i,), "norm")]
        return tuple(out)

    def flops(self, layer: Layer, work: Work, schedule: str) -> dict[str, int]:
        w, T = self.weights(layer), work.tokens
        n_h, d_c, nope, d_v = self.n_heads, self.kv_lora_rank, self.qk_nope_head_dim, self.v_head_dim
        out = matrix_flops(w, T, ("W_DQ", "W_UQ", "W_QR", "W_Q", "W_DKV", "W_KR"))
        if schedule == "naive":
            out["attn/kv_up"] = matrix_flops(w, work.expanded, ("W_UK", "W_UV"))["attn/kv_up"]  # every key rebuilt
            out["attn/scores"] = 2 * work.pairs * n_h * self.qk_head_dim
            out["attn/mix"] = 2 * work.pairs * n_h * d_v
        else:  # DeepSeek-V2 §2.1.3: W_UK folded into the query, W_UV into the output
            out["attn/q_absorb"] = 2 * T * n_h * nope * d_c  # q_nope·W_UK per head: the query in latent space
            out["attn/scores"] = 2 * work.pairs * n_h * (d_c + self.qk_rope_head_dim)  # against c_KV and the RoPE key
            out["attn/mix"] = 2 * work.pairs * n_h * d_c  # A·c_KV in latent space
            out["attn/v_up"] = 2 * T * n_h * d_c * d_v  # W_UV applied to the latent output
        out.update(matrix_flops(w, T, ("W_O",)))
        if self.index_n_heads is not None and self.index_head_dim is not None:
            out.update(matrix_flops(w, T, ("W_IQ", "W_IK", "W_IW")))  # attn/index: the indexer's projections
            # every key scanned: q_h·k for H_I heads of d_I, then the weighted sum over heads
            out["attn/index_scores"] = 2 * work.scanned_pairs * self.index_n_heads * (self.index_head_dim + 1)
        return out

    def per_rank(self, layer: Layer, tp: int) -> MLA:
        # vLLM/SGLang MLA under TP: heads split (q_b_proj, kv_b_proj, o_proj); the latent c_KV, the RoPE key and their
        # projections (q_a_proj, kv_a_proj_with_mqa) and the indexer are replicated on every rank
        return self.model_copy(update={"n_heads": -(-self.n_heads // tp)})

    @property
    def query_heads(self) -> int:
        return self.n_heads

    def facts(self) -> dict[str, int]:
        return {"kv_lora_rank": self.kv_lora_rank, "qk_rope_head_dim": self.qk_rope_head_dim}

    def kv_label(self, layer: Layer, layout: str | None) -> str:
        # latent: d_c + d_R per token (+ d_I with an indexer); expanded: per-head K and V of every query head
        index = f"+{self.index_head_dim}" if self.index_head_dim else ""
        return (str(self.n_heads) if layout == "expanded" else f"{self.kv_lora_rank}+{self.qk_rope_head_dim}") + index

    def head_dim_label(self, layer: Layer) -> str:
        return f"{self.qk_head_dim}/{self.v_head_dim}"

    def describe(self, layer: Layer) -> str:
        q = f"q_lora_rank {self.q_lora_rank}" if self.q_lora_rank else "no query compression"
        index = f"; indexer {self.index_n_heads} heads × {self.index_head_dim}, top {self.index_topk:,}" if self.indexed else ""
        return (f"n_h {self.n_heads}, d_c {self.kv_lora_rank}, d_R {self.qk_rope_head_dim}, qk_nope {self.qk_nope_head_dim}, "
                f"v {self.v_head_dim}, {q}; d_qk = {self.qk_head_dim} (derived){index}")
