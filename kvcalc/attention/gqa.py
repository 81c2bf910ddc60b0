"""Multi-head attention and its grouped forms: MHA (n_kv = n_h), GQA (n_h query heads share n_kv K/V heads) and
MQA (n_kv = 1). Cache per token and layer 2·n_kv·d_h (DeepSeek-V2 Table 1; the surveys' tables, README)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from kvcalc.attention.base import (
    KV_PROJECTIONS,
    AttentionKind,
    Dim,
    Formula,
    HeadCount,
    Layer,
    Symbol,
    Weight,
    Work,
    matrix_flops,
)


class Heads(AttentionKind):
    """The fields and answers MHA, GQA and MQA share; they differ only in how many K/V heads they cache."""

    n_heads: HeadCount = Field(description="Query heads n_h (HF num_attention_heads).")
    head_dim: Dim | None = Field(
        None, description="Per-head dim d_h (HF head_dim); when absent, d_model / n_heads. Gemma 3 27B gives 128, not 168."
    )
    qkv_bias: bool = Field(False, description="Bias on the q/k/v projections (Qwen2, GPT-2).")
    o_bias: bool = Field(False, description="Bias on the output projection (GPT-2).")
    qk_norm: bool = Field(False, description="RMSNorm on queries and keys per head (Gemma 3, Qwen3).")
    qk_norm_width: Literal["head", "projection"] = Field(
        "head", description="What the q/k norms span: one head (d_h weights each; Gemma 3, Qwen3) or the whole "
        "projection (n_h·d_h and n_kv·d_h; OLMo 2/3, MiniMax-M2)."
    )
    v_head_dim: Dim | None = Field(
        None, description="Per-head value dim d_v when it differs from the key dim d_h (MiMo-V2-Flash: K 192, V 128)."
    )
    output_gate: bool = Field(
        False, description="A sigmoid gate on the attention output, one per output channel, n_h·d_v (Qwen3-Next: q_proj "
        "emits the query and the gate, n_h·d_h more outputs, its d_v = d_h)."
    )
    k_bias: bool = Field(True, description="With qkv_bias: whether the key projection has a bias too (Whisper's has none).")
    k_eq_v: bool = Field(
        False, description="Values come from the key projection (Gemma 4 attention_k_eq_v): no W_V; the cache still holds "
        "K (normed, rotated) and V (normed) apart, 2·n_kv·d_h per token."
    )
    sinks: bool = Field(
        False, description="A learned attention-sink logit per query head (gpt-oss): parameters, no cached tokens."
    )

    expression: ClassVar[str]  # the cache formula in the papers' notation
    reference: ClassVar[str]

    @property
    def n_kv(self) -> int:
        """K/V heads n_kv."""
        raise NotImplementedError

    def kv_symbols(self, layer: Layer) -> tuple[Symbol, ...]:
        """The symbols of the formula besides d_h."""
        raise NotImplementedError

    @property
    def query_heads(self) -> int:
        return self.n_heads

    def kv_heads(self, layer: Layer) -> int:
        return self.n_kv

    def d_h(self, layer: Layer) -> int:
        # HF convention: head_dim when the config gives it, else hidden_size / num_attention_heads.
        return self.head_dim if self.head_dim is not None else layer.d_model // self.n_heads

    def d_v(self, layer: Layer) -> int:
        """The per-head value dim: v_head_dim when given, else d_h."""
        return self.v_head_dim if self.v_head_dim is not None else self.d_h(layer)

    def head_dim_derived(self) -> bool:
        """True when d_h = d_model / n_heads because the spec gave none."""
        return self.head_dim is None

    def d_h_symbol(self, layer: Layer) -> Symbol:
        n, d_h = self.n_heads, self.d_h(layer)
        derived = f"d_model / {layer.path}.n_heads = {n * d_h}/{n} (no head_dim given)"
        return Symbol("d_h", d_h, derived if self.head_dim_derived() else f"{layer.path}.head_dim")

    def cache_formula(self, layer: Layer, layout: str) -> Formula:
        k, v = self.n_kv * self.d_h(layer), self.n_kv * self.d_v(layer)  # keys and values: n_kv heads each
        symbols = self.kv_symbols(layer) + (self.d_h_symbol(layer),)
        expression = self.expression
        if self.v_head_dim is not None:  # keys and values of different sizes: n_kv·(d_h + d_v)
            symbols += (Symbol("d_v", self.v_head_dim, f"{layer.path}.v_head_dim"),)
            expression = self.expression.replace("2·", "").replace("d_h", "(d_h + d_v)").removeprefix("(d_h + d_v)")
            expression = expression or "d_h + d_v"  # MQA: one head of each
        reference = self.reference if self.v_head_dim is None else \
            self.reference.replace("; 2: keys and values", "; a key of d_h and a value of d_v")
        return Formula(expression, symbols, k + v, {"k": k, "v": v}, reference)

    def cache_heads(self, layer: Layer, layout: str) -> int:
        return self.n_kv

    def cache_shapes(self, layer: Layer, batch: int, held: int, layout: str) -> dict[str, tuple[int, ...]]:
        return {"k": (batch, held, self.n_kv, self.d_h(layer)), "v": (batch, held, self.n_kv, self.d_v(layer))}

    def weights(self, layer: Layer) -> tuple[Weight, ...]:
        d, n_h, n_kv, d_h, d_v = layer.d_model, self.n_heads, self.n_kv, self.d_h(layer), self.d_v(layer)
        out = [Weight("W_Q", "attn/q", (d, n_h * d_h)), Weight("W_K", "attn/k", (d, n_kv * d_h)),
               Weight("W_V", "attn/v", (d, n_kv * d_v)), Weight("W_O", "attn/o", (n_h * d_v, d))]
        if self.k_eq_v:  # Gemma4Attention: v = v_norm(k_proj(x)), no v_proj
            out = [w for w in out if w.name != "W_V"]
        # Qwen3NextAttention: q_proj is d × 2·n_h·d_h, the second half gates the output elementwise, so its width is
        # the output's, n_h·d_v (d_v = d_h there; kvcalc run refuses a gate with other values)
        if self.output_gate:
            out.append(Weight("W_G", "attn/q", (d, n_h * d_v)))
        if self.qkv_bias:
            out.append(Weight("b_Q", "attn/q", (n_h * d_h,), "bias"))
            out += [Weight("b_K", "attn/k", (n_kv * d_h,), "bias")] if self.k_bias else []
            out += [] if self.k_eq_v else [Weight("b_V", "attn/v", (n_kv * d_v,), "bias")]
            out += [Weight("b_G", "attn/q", (n_h * d_v,), "bias")] if self.output_gate else []  # q_proj's gate half
        if self.o_bias:
            out.append(Weight("b_O", "attn/o", (d,), "bias"))
        if self.qk_norm:  # q_norm and k_norm over head_dim (Gemma 3, Qwen3), or over the whole projection (OLMo 2)
            whole = self.qk_norm_width == "projection"
            out += [Weight("q_norm", "attn/norms", (n_h * d_h if whole else d_h,), "norm"),
                    Weight("k_norm", "attn/norms", (n_kv * d_h if whole else d_h,), "norm")]
        if self.sinks:  # gpt-oss: one learned logit per head joins each softmax (GptOssAttention.sinks)
            out.append(Weight("sinks", "attn/sinks", (n_h,), "bias"))
        return tuple(out)

    def flops(self, layer: Layer, work: Work, schedule: str) -> dict[str, int]:
        n_h, d_h, d_v = self.n_heads, self.d_h(layer), self.d_v(layer)
        # a KV-shared layer's keys and values come from an earlier layer's cache: its own K/V projections never run
        run = tuple(w for w in self.weights(layer) if not (layer.kv_shared and w.name in KV_PROJECTIONS))
        proj = matrix_flops(run, work.tokens, ("W_Q", "W_G", "W_K", "W_V", "W_O"))
        return {
            "attn/q": proj["attn/q"],
            "attn/k": proj.get("attn/k", 0),
            "attn/v": proj.get("attn/v", 0),
            "attn/scores": 2 * work.pairs * n_h * d_h,  # QKᵀ: each query head meets its (shared) key head
            "attn/mix": 2 * work.pairs * n_h * d_v,  # AV
            "attn/o": proj["attn/o"],
        }

    def per_rank(self, layer: Layer, tp: int) -> Heads:
        # Megatron/vLLM tensor parallelism: query heads split; K/V heads split, each rank holding ceil(n_kv / tp) (at
        # least one: replicated when n_kv < tp, vLLM QKVParallelLinear); head dims and norms whole
        update: dict[str, int] = {"n_heads": -(-self.n_heads // tp), "head_dim": self.d_h(layer)}  # d_h stays
        if isinstance(self, GQA):
            update["n_kv_heads"] = -(-self.n_kv_heads // tp)
        return self.model_copy(update=update)

    def head_dim_label(self, layer: Layer) -> str:
        d_h = self.d_h(layer)
        return str(d_h) if self.v_head_dim is None else f"{d_h}/{self.v_head_dim}"

    def describe(self, layer: Layer) -> str:
        hd = f"{self.d_h(layer)} ({'derived: d_model / n_heads' if self.head_dim_derived() else 'head_dim'})"
        dv = f", d_v {self.v_head_dim}" if self.v_head_dim is not None else ""
        sinks = ", attention sinks" if self.sinks else ""
        return f"n_h {self.n_heads}, n_kv {self.n_kv}, d_h {hd}{dv}, group size {self.n_heads // self.n_kv}{sinks}"

    def problems(self, layer: Layer) -> list[str]:
        if self.head_dim_derived() and layer.d_model % self.n_heads:
            return [f"{layer.path}.head_dim: not given, and d_model ({layer.d_model}) is not divisible by n_heads "
                    f"({self.n_heads}); give head_dim explicitly"]
        return []


class MHA(Heads):
    """Multi-head attention: every query head has its own key and value head."""

    kind: Literal["mha"]
    label: ClassVar[str] = "MHA"
    expression: ClassVar[str] = "2·n_h·d_h"
    reference: ClassVar[str] = "DeepSeek-V2 Table 1 (MHA); 2: keys and values"

    @property
    def n_kv(self) -> int:
        return self.n_heads

    def kv_symbols(self, layer: Layer) -> tuple[Symbol, ...]:
        return (Symbol("n_h", self.n_heads, f"{layer.path}.n_heads"),)


class GQA(Heads):
    """Grouped-query attention: n_heads query heads share n_kv_heads key/value heads."""

    kind: Literal["gqa"]
    n_kv_heads: HeadCount = Field(description="Key/value heads n_kv (HF num_key_value_heads).")
    label: ClassVar[str] = "GQA"
    expression: ClassVar[str] = "2·n_kv·d_h"
    reference: ClassVar[str] = "DeepSeek-V2 Table 1 (GQA, n_g groups); 2: keys and values"

    @model_validator(mode="after")
    def _groups_divide(self) -> GQA:
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.n_kv_heads})")
        return self

    @property
    def n_kv(self) -> int:
        return self.n_kv_heads

    def kv_symbols(self, layer: Layer) -> tuple[Symbol, ...]:
        return (Symbol("n_kv", self.n_kv_heads, f"{layer.path}.n_kv_heads"),)


class MQA(Heads):
    """Multi-query attention: all query heads share one key/value head (GQA with n_kv = 1)."""

    kind: Literal["mqa"]
    label: ClassVar[str] = "MQA"
    expression: ClassVar[str] = "2·d_h"
    reference: ClassVar[str] = "DeepSeek-V2 Table 1 (MQA: one shared K/V head)"

    @property
    def n_kv(self) -> int:
        return 1

    def kv_symbols(self, layer: Layer) -> tuple[Symbol, ...]:
        return ()
