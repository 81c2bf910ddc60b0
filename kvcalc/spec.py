"""Pydantic models of a model spec: global dims, an FFN block, and layer groups that each own an attention block.

A model is a sequence of layer groups; every layer belongs to exactly one group, so a cost is always
the sum over groups (a sliding-window or constant-state group can never be forgotten or counted twice).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

from pydantic import BaseModel, Discriminator, Field, PrivateAttr, Tag, model_validator

from kvcalc.attention import AttentionField, AttentionKind, Layer
from kvcalc.attention.base import (
    MAX_EXPERTS,
    MAX_LAYERS,
    Dim,
    ExpertCount,
    LayerCount,
    NormCount,
    ParamCount,
    Strict,
    TokenCount,
    VocabSize,
)
from kvcalc.errors import SpecError, printable
from kvcalc.yamlfile import line_finder, load_yaml
from kvcalc.yamlfile import read_text as read_text  # re-exported: importers read configs through it

LayerIndex = Annotated[int, Field(ge=0, le=MAX_LAYERS)]  # a layer index, or a count of layers that may be 0

# ---------------------------------------------------------------- FFN blocks (parameters are counted later)


class DenseFFN(Strict):
    """A dense feed-forward block."""

    kind: Literal["dense"]
    d_ff: Dim = Field(description="Hidden size of the FFN (HF intermediate_size).")
    gated: bool = Field(True, description="Gated (SwiGLU/GeGLU: three matrices) or plain (two matrices).")
    bias: bool = Field(False, description="Biases on the FFN projections (GPT-2).")


class MoEFFN(Strict):
    """A mixture-of-experts block, with optional shared experts and leading dense layers (DeepSeek)."""

    kind: Literal["moe"]
    n_routed_experts: ExpertCount = Field(description="Routed experts per MoE layer.")
    n_experts_per_tok: ExpertCount = Field(description="Routed experts each token activates (top-k).")
    moe_d_ff: Dim = Field(description="Hidden size of one routed expert.")
    n_shared_experts: Annotated[int, Field(ge=0, le=MAX_EXPERTS)] = Field(0, description="Always-active shared experts (DeepSeek).")
    shared_d_ff: Dim | None = Field(None, description="Hidden size of one shared expert; default moe_d_ff.")
    first_k_dense: LayerIndex = Field(0, description="Leading layers that use a dense FFN instead (first_k_dense_replace).")
    dense_d_ff: Dim | None = Field(None, description="Hidden size of those dense layers (HF intermediate_size).")
    gated: bool = Field(True, description="Gated experts (three matrices each).")
    router_bias: bool = Field(
        False, description="A per-expert vector in the router: DeepSeek-V3's e_score_correction_bias (topk_method "
        "noaux_tc), gpt-oss's router bias, Gemma 4's per_expert_scale."
    )
    expert_bias: bool = Field(
        False, description="Biases on each expert's projections (gpt-oss: gate_up_proj_bias, down_proj_bias)."
    )
    shared_gate: bool = Field(
        False, description="A sigmoid gate of d_model weights on the shared experts' output (Qwen3-Next shared_expert_gate)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> MoEFFN:
        if self.n_experts_per_tok > self.n_routed_experts:
            raise ValueError(
                f"n_experts_per_tok ({self.n_experts_per_tok}) must not exceed n_routed_experts ({self.n_routed_experts})"
            )
        if self.first_k_dense and self.dense_d_ff is None:
            raise ValueError(f"first_k_dense is {self.first_k_dense}, so dense_d_ff is required")
        if not self.first_k_dense and self.dense_d_ff is not None:  # a width of no layer changed nothing, silently
            raise ValueError(f"dense_d_ff ({self.dense_d_ff}) is the width of the first_k_dense layers, but "
                             "first_k_dense is 0: give first_k_dense, or a dense ffn on the layers that have one")
        if not self.n_shared_experts and (self.shared_gate or self.shared_d_ff is not None):
            # a gate on no expert was counted (d weights and their FLOPs); a width of none changed nothing, silently
            given = " and ".join(name for name, on in (("shared_d_ff", self.shared_d_ff is not None),
                                                       ("shared_gate", self.shared_gate)) if on)
            raise ValueError(f"{given} describe{'s' if ' and ' not in given else ''} shared experts, but "
                             "n_shared_experts is 0: give n_shared_experts or leave them out")
        return self


class NoFFN(Strict):
    """No feed-forward block: a layer that is one mixer only (Nemotron-H's Mamba and attention blocks)."""

    kind: Literal["none"]


FFN = Annotated[DenseFFN | MoEFFN | NoFFN, Field(discriminator="kind")]


# ---------------------------------------------------------------- layer groups


class Every(Strict):
    """Every `every`-th layer starting at `start` (Gemma 3's global layers: every 6, start 5)."""

    every: LayerCount
    start: LayerIndex = 0


def _selector_form(value: Any) -> str | None:
    """Which form a `layers` value takes, so a wrong value meets one rule, not one per form (a discriminated union)."""
    if isinstance(value, str):
        return "range-text"
    if isinstance(value, (list, tuple)):
        return "index-list"
    if isinstance(value, (dict, Every)):
        return "every-mapping"
    return None


SELECTOR_RULE = "expected 'all', 'rest', a range string such as '0-4,6', a list of layer indices, or {every: N, start: S}"
SELECTOR_TAGS = ("range-text", "index-list", "every-mapping")  # left out of a field's path in messages
LayerSelector = Annotated[
    Annotated[str, Tag("range-text")] | Annotated[list[LayerIndex], Tag("index-list")] | Annotated[Every, Tag("every-mapping")],
    Discriminator(_selector_form, custom_error_type="layer_selector", custom_error_message=SELECTOR_RULE),
]

_RANGE = re.compile(r"^\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?$")  # ASCII digits (\d takes other scripts')


# A group's name: printable text, not all spaces: no control or format character (a bidi override, a zero-width
# space), no line or paragraph separator, and no ';', which separates the groups' formulas in table dims
# (the control and format characters as ranges, which Python's re, pydantic's Rust regex and a JSON Schema all read)
_FORMAT = (r"\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f"
           r"\ufeff\ufff9-\ufffb")  # the Basic Multilingual Plane's format characters and line separators
_NOT_SHOWN = rf"\u0000-\u001f\u007f-\u009f{_FORMAT};"
GROUP_NAME_PATTERN = rf"^[^{_NOT_SHOWN}]*[^\s{_NOT_SHOWN}][^{_NOT_SHOWN}]*$"
# A spec's text (family, source, notes): any printable text, a tab or line break in source and notes; no control
# character (an ESC starts a terminal escape that could hide or forge the rows after it, a bare CR splits a csv row)
# and no format character
FAMILY_PATTERN = rf"^[^\u0000-\u001f\u007f-\u009f{_FORMAT}]*$"
TEXT_PATTERN = rf"^[^\u0000-\u0008\u000b-\u001f\u007f-\u009f{_FORMAT}]*$"
TEXT_RULE = ("printable text: no control character (a terminal escape, a carriage return) and no format character (a "
             "zero-width space, a bidi override)")


class LayerGroup(Strict):
    """Layers that share one attention block (and optionally a window and an FFN override)."""

    name: str | None = Field(None, max_length=80, pattern=GROUP_NAME_PATTERN,
                             description="A label such as 'local' or 'global': 1 to 80 printable characters, no "
                             "control characters (a table row, a legend).")
    layers: LayerSelector = Field(
        "all",
        description="Which layers (0-based): 'all', 'rest' (those no other group takes), a range string "
        "'0-4,6', a list of indices, or {every: N, start: S}.",
    )
    attention: AttentionField = Field(description="The attention block: `kind` (mha, gqa, mqa, mla, linear, ...) and its dims.")
    sliding_window: TokenCount | None = Field(
        None, description="Window W: each query sees itself and the W-1 keys before it; the layer holds min(ctx, W) tokens."
    )
    attention_chunk_size: TokenCount | None = Field(
        None, description="Chunk C of chunked local attention (Llama 4): a query sees the keys of its own aligned chunk "
        "up to itself; the layer holds min(ctx, C) tokens."
    )
    ffn: FFN | None = Field(None, description="FFN of these layers when it differs from the model's.")
    norms_per_layer: NormCount | None = Field(
        None, description="Norms in each of these layers when it differs from the model's (DeciLM: a layer without "
        "attention has no input norm)."
    )
    kv_shared: bool = Field(
        False, description="These layers read the K/V an earlier layer cached (Gemma 3n num_kv_shared_layers, YOCO, "
        "CLA): they hold no cache and project no K/V; their weights are counted as the checkpoint holds them."
    )
    parallel_mixer: AttentionField | None = Field(
        None, description="A constant-state mixer running beside the attention in the same layers, on the same input, "
        "its output summed with the attention's (Falcon-H1: Mamba-2): its state, weights and FLOPs add to the layer's."
    )
    cross_attention: AttentionField | None = Field(
        None, description="Encoder–decoder models (Whisper, T5, BART): an attention block over the encoder's output, whose "
        "keys and values are cached once per input (enc_ctx tokens) beside the growing self-attention cache."
    )

    def layer(self, d_model: int, gi: int) -> Layer:
        """Where this group's attention block sits (what its kind needs to answer)."""
        return Layer(d_model, self.sliding_window, f"layer_groups[{gi}].attention", self.attention_chunk_size,
                     self.kv_shared)


class Encoder(Strict):
    """The encoder of an encoder–decoder model: run once per input over `source_len` positions; its output is what
    the decoder layers' cross-attention caches. Counted in parameters and in the prefill's FLOPs."""

    n_layers: LayerCount = Field(description="Encoder layers (HF encoder_layers).")
    source_len: TokenCount = Field(
        description="Encoder positions per input: the default enc_ctx (Whisper max_source_positions: 1500 frames)."
    )
    attention: AttentionField = Field(description="The encoder's (bidirectional) self-attention block.")
    ffn: FFN = Field(description="The encoder's FFN block.")
    norms_per_layer: NormCount = Field(2, description="Norms in each encoder layer.")
    extra_params: ParamCount = Field(
        0, description="Encoder parameters outside its layers, counted by the importer from the config (Whisper: the "
        "two convolutions of the audio front end, the position table, the final LayerNorm)."
    )


def _select(selector: LayerSelector, n_layers: int, taken: set[int]) -> list[int]:
    """Layer indices a selector names, in order; 'rest' means every layer not in `taken`.

    A range is checked against n_layers before it is enumerated, so no selector builds more than n_layers indices.
    """
    if isinstance(selector, Every):
        return list(range(selector.start, n_layers, selector.every))
    if isinstance(selector, list):
        return list(selector)
    word = selector.strip().lower()
    if word == "all":
        return list(range(n_layers))
    if word == "rest":
        return [i for i in range(n_layers) if i not in taken]
    indices: list[int] = []
    for part in word.split(","):
        match = _RANGE.match(part)
        if not match:
            raise ValueError(f"cannot read {selector!r}: use 'all', 'rest', '0-4,6', a list, or {{every, start}}")
        lo_text, hi_text = match[1], match[2] if match[2] is not None else match[1]
        for text in (hi_text, lo_text):  # checked before the range is built; a long one is no layer either
            if len(text) > 12 or int(text) >= n_layers:
                shown = text if len(text) <= 12 else f"{text[:12]}… ({len(text):,} digits)"
                raise ValueError(f"{part.strip()[:40]!r}: layer {shown} does not exist (n_layers is {n_layers})")
        lo, hi = int(lo_text), int(hi_text)
        if hi < lo:
            raise ValueError(f"range {part.strip()!r} runs backwards")
        indices.extend(range(lo, hi + 1))
        if len(indices) > n_layers:
            raise ValueError(f"{selector!r} names more layers than the model has (n_layers is {n_layers})")
    return indices


# ---------------------------------------------------------------- the model


@dataclass(frozen=True)
class ResolvedGroup:
    """A layer group with its layer indices resolved; every fact of its layers is asked of its attention kind."""

    index: int
    label: str
    layers: tuple[int, ...]
    attention: AttentionKind
    sliding_window: int | None
    layer: Layer  # what the kind needs to know of where it sits: d_model, window, spec path
    cross: AttentionKind | None = None  # cross-attention over the encoder's output (encoder–decoder models)
    parallel: AttentionKind | None = None  # a constant-state mixer beside the attention (Falcon-H1's Mamba-2)

    @property
    def parallel_layer(self) -> Layer:
        """Where the parallel mixer sits: no window, its own spec path."""
        return Layer(self.layer.d_model, None, self.layer.path.replace(".attention", ".parallel_mixer"))

    @property
    def cross_layer(self) -> Layer:
        """Where the cross-attention block sits: no window, its own spec path."""
        return Layer(self.layer.d_model, None, self.layer.path.replace(".attention", ".cross_attention"))

    @property
    def head_dim(self) -> int | None:
        """The resolved d_h of an MHA/GQA/MQA group (None for other kinds)."""
        return self.attention.d_h(self.layer)


_T = TypeVar("_T")


class ExtraWeights(Strict):
    """Weights of a block the schema has no type for, counted by the importer from the config (Gemma 3n's per-layer
    embeddings, AltUp, LAuReL): in parameters (total and active), traffic and per-GPU weights, and its `flops` a
    token in every pass."""

    params: ParamCount = Field(description="All its weights.")
    table: ParamCount = Field(0, description="Of them, a lookup table (read by row, not in full): its size.")
    row: ParamCount = Field(0, description="Values one token reads from that table.")
    flops: ParamCount = Field(0, description="FLOPs of one token through the block, in every pass: 2 a multiply-add of "
                              "its matrices, and any product of activations (Gemma 3n's AltUp predictions)")
    replicated: ParamCount = Field(0, description="Of them, weights vLLM and SGLang hold whole on every tensor-parallel "
                                   "rank (replicated linears, norms); the rest split by tp.")


NAME_LENGTH = 128  # a model's name at most (ModelSpec.name, registry.NAME_PATTERN)


class ModelSpec(Strict):
    """A complete model spec, as written in a bundled YAML file or imported from a Hugging Face config."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=NAME_LENGTH,
                      description="Short name, as used on the command line (at most 128 characters: it heads rows, "
                      "columns and captions, which LaTeX cannot stretch without bound).")
    family: str = Field(pattern=FAMILY_PATTERN, description="Model family, e.g. 'llama3', 'gemma3', 'deepseek'.")
    source: str | None = Field(None, pattern=TEXT_PATTERN,
                               description="Where the numbers come from (URL, config, paper section).")
    notes: str | None = Field(None, pattern=TEXT_PATTERN, description="Free-form remarks.")
    d_model: Dim = Field(description="Hidden size (HF hidden_size).")
    n_layers: LayerCount = Field(description="Transformer layers (HF num_hidden_layers).")
    vocab_size: VocabSize = Field(description="Vocabulary size.")
    tie_embeddings: bool = Field(False, description="LM head shares the input embedding (HF tie_word_embeddings).")
    norm: Literal["rmsnorm", "layernorm"] = Field(
        "rmsnorm", description="Normalisation layers: rmsnorm (a weight of d_model) or layernorm (weight and bias)."
    )
    norms_per_layer: NormCount = Field(
        2, description="Norms in each layer: 2 (pre-attention, pre-FFN), 4 (Gemma 2/3: also post-attention, post-FFN), "
        "1 (Falcon-7B's parallel attention and FFN)."
    )
    learned_positions: bool = Field(
        False, description="A learned position embedding of max_context × d_model (GPT-2); false for RoPE/ALiBi."
    )
    parallel_attn: bool | None = Field(
        None, description="Attention and FFN read the same input and their outputs are summed before one tensor-parallel "
        "all-reduce a layer (Falcon's parallel_attn or new_decoder_architecture; vLLM FalconAttention "
        "reduce_row_parallel_results); absent: each block reduces its own output."
    )
    max_context: TokenCount = Field(description="Trained maximum context in tokens (HF max_position_embeddings).")
    multimodal: bool | None = Field(
        None, description="Whether the checkpoint this spec describes carries a vision (or audio) tower the serving "
        "engines load beside the text model kvcalc counts (HF: a vision_config or audio_config); absent: as its "
        "family's published checkpoints do (Gemma 3 1B is a text model: false)."
    )
    served_context: TokenCount | None = Field(
        None, description="The context vLLM serves by default where it is below max_context (a LongRoPE model's "
        "original_max_position_embeddings: vLLM config/model.py _get_and_verify_max_len); absent: max_context."
    )
    ffn: FFN = Field(description="The FFN block of every layer unless a group overrides it.")
    layer_groups: list[LayerGroup] = Field(min_length=1, description="Layer groups; together they cover every layer once.")
    encoder: Encoder | None = Field(None, description="The encoder of an encoder–decoder model (Whisper, T5, BART).")
    extra_weights: dict[str, ExtraWeights] = Field(
        default_factory=dict, description="Weights outside the blocks the schema names, by name (Gemma 3n: "
        "per_layer_embeddings, altup, laurel), counted by the importer from the config."
    )
    mtp_layers: LayerIndex = Field(
        0, description="Multi-token-prediction layers (DeepSeek num_nextn_predict_layers): each a decoder layer like the "
        "last one plus a 2·d × d input projection and three norms; counted only with --mtp (speculative decoding keeps "
        "their cache), since plain decoding does not run them."
    )

    _groups: tuple[ResolvedGroup, ...] = PrivateAttr(default=())
    _owner: tuple[int, ...] = PrivateAttr(default=())  # layer -> index of its group, so a lookup is O(1)
    _memo: dict = PrivateAttr(default_factory=dict)  # figures that depend on the spec alone (mla_crossover), by key

    @model_validator(mode="after")
    def _resolve(self) -> ModelSpec:
        problems: list[str] = []
        owner: dict[int, int] = {}
        picked: list[list[int]] = [[] for _ in self.layer_groups]
        rest = [i for i, g in enumerate(self.layer_groups) if isinstance(g.layers, str) and g.layers.strip().lower() == "rest"]
        if len(rest) > 1:
            problems.append(f"layer_groups: only one group may take 'rest' (groups {rest} do)")
        for gi, group in enumerate(self.layer_groups):
            if gi in rest:
                continue
            try:
                picked[gi] = _select(group.layers, self.n_layers, set())
            except ValueError as exc:
                problems.append(f"layer_groups[{gi}].layers: {exc}")
                continue
            if not picked[gi]:  # a group of no layer would vanish from every figure without a word
                problems.append(f"layer_groups[{gi}].layers: selects none of the {self.n_layers} layers (a group needs one)")
                continue
            problems += self._claim(gi, picked[gi], owner)
        for gi in rest[:1]:
            picked[gi] = _select("rest", self.n_layers, set(owner))
            owner.update({layer: gi for layer in picked[gi]})
        if self.served_context is not None and self.served_context > self.max_context:
            problems.append(f"served_context: {self.served_context:,} is above max_context ({self.max_context:,}): "
                            "vLLM serves no more than the maximum")
        labels = [self._label(i) for i in range(len(self.layer_groups))]  # a name 'group 1' meets group 1's default
        for i, label in enumerate(labels):
            if (first := labels.index(label)) < i:
                what = f"layer_groups[{i}].name: {label!r}" if self.layer_groups[i].name else \
                    f"layer_groups[{i}]: its default label {label!r}"
                problems.append(f"{what} labels layer_groups[{first}] too (their rows would read alike: give each "
                                "group a name of its own)")
        missing = [i for i in range(self.n_layers) if i not in owner]
        if missing and not problems:
            which = f"layer {layer_text(missing)} belongs" if len(missing) == 1 else f"layers {layer_text(missing)} belong"
            problems.append(f"layer_groups: {which} to no group (every layer needs an attention block)")
        for gi in range(len(self.layer_groups)):
            if rest and gi == rest[0] and not picked[gi] and not problems:
                whole = [i for i, g in enumerate(self.layer_groups) if i != gi and "layers" not in g.model_fields_set]
                why = f" (layer_groups[{whole[0]}] has no `layers:`, so it takes all of them)" if whole else ""
                problems.append(f"layer_groups[{gi}].layers: 'rest' is empty: the other groups already cover every "
                                f"layer{why}")
        problems += self._check_dims()
        if not problems:
            problems += self._check_shared(picked)
        if problems:
            raise ValueError("\n".join(problems))
        self._groups = tuple(self._resolved(gi, g, sorted(picked[gi])) for gi, g in enumerate(self.layer_groups))
        group_of = [0] * self.n_layers
        for gi, layers in enumerate(picked):
            for layer in layers:
                group_of[layer] = gi
        self._owner = tuple(group_of)
        return self

    # Private attributes are read through __pydantic_private__ (a dict, never None for a model that has private
    # attributes: hence the ignores): pydantic's own path to them (BaseModel.__getattr__) takes about 1.5 µs a read,
    # and the cost code reads them for every figure of every row.

    def memo(self, key: tuple[object, ...], compute: Callable[..., _T], *args: object) -> _T:
        """`compute(*args)` once per spec and key: for figures that depend on the spec alone, not on the context."""
        memo = self.__pydantic_private__["_memo"]  # type: ignore[index]
        try:
            return memo[key]
        except KeyError:
            memo[key] = value = compute(*args)
            return value

    def __eq__(self, other: object) -> bool:
        """Equal fields: the memo of figures already computed (and the groups resolved from the fields) do not count,
        so two loads of one spec stay equal whatever was asked of either (pydantic's compares private attributes)."""
        if not isinstance(other, ModelSpec):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # its lists are unhashable, as under pydantic's own hash

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> ModelSpec:
        """A copy with its own empty memo (figures remembered for this spec may not hold for the copy); with `update`,
        a spec validated anew from the fields and the update, so its layer groups are resolved from them (pydantic's
        copy keeps the old ones and checks nothing: an update of n_layers kept the old layers' figures)."""
        if update:
            return type(self).model_validate({**self.model_dump(), **update})
        copy = super().model_copy(deep=deep)
        copy.__pydantic_private__["_memo"] = {}  # type: ignore[index]
        return copy

    def group_index_of(self, layer: int) -> int:
        """The index (in layer_groups) of the group that holds `layer`."""
        return self.__pydantic_private__["_owner"][layer]  # type: ignore[index]

    def _claim(self, gi: int, layers: list[int], owner: dict[int, int]) -> list[str]:
        """Give `layers` to group `gi` in `owner`; one line each for layers that do not exist and for those another
        group (or this one, twice) already has, so a duplicated group is one short message."""
        missing = sorted({i for i in layers if i >= self.n_layers})
        twice: dict[int, set[int]] = {}
        for layer in layers:
            if layer >= self.n_layers:
                continue
            if layer in owner:
                twice.setdefault(owner[layer], set()).add(layer)
            else:
                owner[layer] = gi
        where = f"layer_groups[{gi}].layers"
        problems = [f"{where}: {_some(missing, 'does not exist', 'do not exist')} (n_layers is {self.n_layers})"] if missing else []
        def unset(i: int) -> bool:  # left out: 'all', the field's default
            return "layers" not in self.layer_groups[i].model_fields_set

        for other, dup in sorted(twice.items()):
            whose = "this group" if other == gi else f"layer_groups[{other}]"
            hint = " (a group without `layers:` takes all of them; `layers: rest` takes those no other group has)" \
                if other != gi and (unset(gi) or unset(other)) else ""
            problems.append(f"{where}: {_some(sorted(dup), 'is', 'are')} already in {whose}{hint}")
        return problems

    def _check_shared(self, picked: list[list[int]]) -> list[str]:
        """A KV-shared layer reads the cache of an earlier layer (Gemma 3n, YOCO, CLA): some layer before the first
        one must hold a KV cache of its own (a layer with none to read was counted as reading one of zero bytes)."""
        shared = [(min(picked[gi]), gi) for gi, g in enumerate(self.layer_groups) if g.kv_shared and picked[gi]]
        if not shared:
            return []
        first, gi = min(shared)
        holders = [min(picked[i]) for i, g in enumerate(self.layer_groups)
                   if not g.kv_shared and g.attention.windowed and picked[i]]
        if holders and min(holders) < first:
            return []
        return [f"layer_groups[{gi}].kv_shared: layer {first} reads the KV cache of an earlier layer, but no layer "
                f"before it holds one (a layer of a kind with a KV cache, not kv_shared)"]

    def _check_dims(self) -> list[str]:
        """Cross-field rules that need the model-level dims."""
        problems = []
        for gi, group in enumerate(self.layer_groups):
            att = group.attention
            problems += att.problems(group.layer(self.d_model, gi))
            mixer = group.parallel_mixer
            if mixer is not None and (mixer.windowed or not att.windowed):
                problems.append(f"layer_groups[{gi}].parallel_mixer: must be a constant-state kind (mamba2, ...) beside "
                                f"an attention block, not '{mixer.kind}' beside '{att.kind}'")
            if group.kv_shared and not att.windowed:
                problems.append(f"layer_groups[{gi}].kv_shared: a '{att.kind}' layer has no KV cache to share")
            # the other blocks' own rules (head_dim where d_model is not divisible by n_heads), at their paths
            for block, path in ((mixer, "parallel_mixer"), (group.cross_attention, "cross_attention")):
                if block is not None:
                    problems += block.problems(Layer(self.d_model, None, f"layer_groups[{gi}].{path}"))
            cross = group.cross_attention
            if cross is not None and not cross.windowed:
                problems.append(f"layer_groups[{gi}].cross_attention: must be a kind with a KV cache over the encoder's "
                                f"positions (mha, gqa, ...), not '{cross.kind}'")
            if group.cross_attention is not None and self.encoder is None:
                problems.append(f"layer_groups[{gi}].cross_attention: cross-attention needs an encoder (the model's `encoder`)")
            if group.sliding_window is not None and group.attention_chunk_size is not None:
                problems.append(f"layer_groups[{gi}]: sliding_window and attention_chunk_size exclude each other")
            for name, size in (("sliding_window", group.sliding_window), ("attention_chunk_size", group.attention_chunk_size)):
                if size is None:
                    continue
                if not att.windowed:
                    problems.append(f"layer_groups[{gi}].{name}: a '{att.kind}' layer has no KV cache to window")
                elif size >= self.max_context:
                    what = "window" if name == "sliding_window" else "chunk"
                    problems.append(
                        f"layer_groups[{gi}].{name}: {what} {size} must be below max_context ({self.max_context}); "
                        f"a {what} that long never applies, so leave it out"
                    )
        if self.encoder is not None:
            problems += self.encoder.attention.problems(Layer(self.d_model, None, "encoder.attention"))
        for where, ffn in [("ffn", self.ffn)] + [(f"layer_groups[{i}].ffn", g.ffn) for i, g in enumerate(self.layer_groups)]:
            if isinstance(ffn, MoEFFN) and ffn.first_k_dense >= self.n_layers:
                problems.append(f"{where}.first_k_dense: {ffn.first_k_dense} must be below n_layers ({self.n_layers})")
        return problems

    def _label(self, gi: int) -> str:
        """The label of group `gi`'s rows: its name, else 'group gi' ('all layers' for a model of one group)."""
        return self.layer_groups[gi].name or ("all layers" if len(self.layer_groups) == 1 else f"group {gi}")

    def _resolved(self, gi: int, group: LayerGroup, layers: list[int]) -> ResolvedGroup:
        return ResolvedGroup(
            index=gi,
            label=self._label(gi),
            layers=tuple(layers),
            attention=group.attention,
            sliding_window=group.sliding_window,
            layer=group.layer(self.d_model, gi),
            cross=group.cross_attention,
            parallel=group.parallel_mixer,
        )

    @property
    def groups(self) -> tuple[ResolvedGroup, ...]:
        """The layer groups with their layer indices resolved, in spec order."""
        return self.__pydantic_private__["_groups"]  # type: ignore[index]

    @property
    def position_params(self) -> int:
        """Parameters of the learned position table, max_context rows of d_model (GPT-2's wpe); 0 for RoPE/ALiBi."""
        return self.max_context * self.d_model if self.learned_positions else 0

    @property
    def attention_kinds(self) -> tuple[str, ...]:
        """Distinct attention kinds, in the order the groups first use them."""
        kinds = [k for g in self.groups for k in (g.attention.kind, g.parallel.kind if g.parallel else None) if k]
        return tuple(dict.fromkeys(kinds))

    def mtp_group(self) -> ResolvedGroup | None:
        """The multi-token-prediction layers as a layer group: the last layer's attention, at indices after the model's."""
        if not self.mtp_layers:
            return None
        last = self.groups[self.group_index_of(self.n_layers - 1)]
        layers = tuple(range(self.n_layers, self.n_layers + self.mtp_layers))
        return dataclasses.replace(last, label="mtp", layers=layers)

    def has_layouts(self) -> bool:
        """Whether some layer's cache has a layout to choose (MLA: latent or expanded)."""
        return any(g.attention.layouts for g in self.groups)

    def has_states(self) -> bool:
        """Whether some layer, or the mixer beside its attention (Falcon-H1), keeps a constant state."""
        return any(m.constant_state(layer) for g in self.groups for m, layer in
                   ((g.attention, g.layer), (g.parallel, g.parallel_layer)) if m is not None)

    def has_schedules(self) -> bool:
        """Whether some layer has decode schedules of different cost (MLA: naive or absorbed)."""
        return any(g.attention.schedules for g in self.groups)

    def sparse_topk(self) -> int | None:
        """The index top-k of the model's DeepSeek Sparse Attention layers (the first such group's), None without any."""
        return next((k for g in self.groups if (k := g.attention.sparse_topk()) is not None), None)


def _ranges(indices: Sequence[int]) -> str:
    """[0,1,2,5,7,8] -> '0-2,5,7-8': every run, exactly (what an imported spec writes as a group's selector)."""
    parts, start = [], None
    for i, x in enumerate(indices):
        if start is None:
            start = x
        if i + 1 == len(indices) or indices[i + 1] != x + 1:
            parts.append(f"{start}" if start == x else f"{start}-{x}")
            start = None
    return ",".join(parts)


layer_ranges = _ranges

SHOWN_RUNS = 256  # runs of consecutive layers a text lists in full; a published model has a few dozen at most
HEAD_RUNS, TAIL_RUNS = 8, 2  # what a longer list shows: its first and last runs, around an ellipsis


def layer_text(indices: Sequence[int], sep: str = ",") -> str:
    """Sorted layer indices as ranges for a reader: every run up to SHOWN_RUNS of them (as layer_ranges), else the first
    and last runs around '…' and the number of runs, so that a text stays short for a model of 10**6 layers."""
    breaks = [i + 1 for i in range(len(indices) - 1) if indices[i + 1] != indices[i] + 1]
    if len(breaks) < SHOWN_RUNS:
        return _ranges(indices).replace(",", sep)
    starts, ends = [0, *breaks], [*breaks, len(indices)]
    run = lambda a, b: f"{indices[a]}" if b - a == 1 else f"{indices[a]}-{indices[b - 1]}"  # noqa: E731
    head = [run(a, b) for a, b in zip(starts[:HEAD_RUNS], ends[:HEAD_RUNS])]
    tail = [run(a, b) for a, b in zip(starts[-TAIL_RUNS:], ends[-TAIL_RUNS:])]
    return f"{sep.join(head)}{sep}…{sep}{sep.join(tail)} ({len(starts)} runs)"


def _some(layers: list[int], one: str, many: str) -> str:
    """'layer 3 is' or 'layers 0-2,5 are': sorted indices as ranges, with the verb agreeing."""
    return f"layer {layers[0]} {one}" if len(layers) == 1 else f"layers {layer_text(layers)} {many}"


# ---------------------------------------------------------------- loading


def _loc(loc: tuple) -> str:
    """('layer_groups', 0, 'attention', 'gqa', 'n_kv_heads') -> 'layer_groups[0].attention.n_kv_heads'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in SELECTOR_TAGS or part in ("function-after[_resolve(), ModelSpec]",):
            continue  # a union's tag that _untagged could not place (the FFN's are gone by then)
        else:
            text = str(part)  # a key with an invisible character (a zero-width space) shown escaped, not as its twin
            out += ("." if out else "") + printable(text)
    return out


# The rule of a name (a spec's, a hardware preset's: the `pattern` of their name fields), in words for messages
SPEC_NAME_RULE = ("name starts with a letter or digit, has only letters, digits, '.', '_' and '-', and at most 128 "
                  "characters")
GROUP_NAME_RULE = ("a group's name is 1 to 80 characters, not all spaces, with no control, format or separator "
                   "character and no ';' (it labels a row)")

# Strict fields: what a field wanted, for "n_layers: expected an integer, got true".
_EXPECTED = {"int_type": "an integer", "bool_type": "true or false", "string_type": "a string", "float_type": "a number",
             "list_type": "a list", "dict_type": "a mapping", "model_type": "a mapping"}


# pydantic's bound errors, worded as kvcalc's own rules: "must be at least 1, got 0"
_BOUND = {"greater_than_equal": "ge", "greater_than": "gt", "less_than_equal": "le", "less_than": "lt"}


def _bound_rule(kind: str, ctx: dict, value: object) -> str:
    """'n_layers: must be at most 1,000,000, got 1000001' rather than pydantic's 'Input should be less than or equal
    to 1000000'."""
    limit = ctx.get(_BOUND[kind])
    if not isinstance(limit, (int, float)) or isinstance(limit, bool):
        return f"out of range, got {_shown(value)}"
    shown = f"{limit:,}" if isinstance(limit, int) else f"{limit:g}"
    rule = {"greater_than_equal": "at least", "greater_than": "greater than", "less_than_equal": "at most",
            "less_than": "less than"}[kind]
    return f"must be {rule} {shown}, got {_shown(value)}"


def _shown(value: object) -> str:
    """A parsed value as the file wrote it: true, 32.5, '32', a list; long text cut short."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "a mapping"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _integer_hint(text: str) -> str:
    """Why a string that reads as a number is no integer here: quoted, or written as YAML 1.1 or Python would (010,
    0x2000, 14_336, 1e3, 1:20); '' for any other string."""
    if text.isascii() and text.isdigit() and not (len(text) > 1 and text.startswith("0")):
        from kvcalc.yamlfile import MAX_DIGITS as YAML_MAX_DIGITS

        if len(text) > YAML_MAX_DIGITS:  # the loader keeps a longer run of digits as text, quoted or not
            return f" (a number of {len(text):,} digits, above any this field allows)"
        return " (in quotes it is a string: write the number without them)"
    if re.fullmatch(r"[+-]?(0[xob][0-9a-f_]+|[0-9][0-9_]*(\.[0-9_]*)?(e[+-]?[0-9]+)?|[0-9]+(:[0-9]+)+)", text, re.IGNORECASE):
        return " (an integer is written in plain decimal digits: no leading zero, underscores, prefixes or exponents)"
    return ""


def _model_of(annotation: Any, value: object) -> type[BaseModel] | None:
    """The model a field's annotation validates `value` as: through Annotated, Optional and list, an attention mapping
    as the kind its `kind` names, an FFN union's member by its `kind` tag."""
    from kvcalc.attention import KINDS, AttentionKind

    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated or origin is list:
        return _model_of(args[0], value)
    if args and origin is not Literal:  # a union: the member whose kind tag the value names, else the first model
        members = [m for m in (_model_of(a, value) for a in args) if m is not None]
        tag = value.get("kind") if isinstance(value, dict) else None
        tagged = [m for m in members if _kind_tag(m) == tag]
        return next(iter(tagged or members), None)
    if isinstance(annotation, type) and issubclass(annotation, AttentionKind):
        kind = value.get("kind") if isinstance(value, dict) else None
        return KINDS.get(kind) if isinstance(kind, str) else None  # a kind that is no name ([], 3) has no model
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _model_at(model: type[BaseModel], data: object, loc: tuple) -> tuple[type[BaseModel] | None, object]:
    """The model of the mapping at `loc` in `data` (a validation error's location, less its last part), found by
    walking the data as the fields' annotations read it (None where the walk leaves the models), and that mapping."""
    node: object = data
    current: type[BaseModel] | None = model
    for part in loc:
        if isinstance(node, dict) and part in node and current is not None:
            field = current.model_fields.get(str(part))
            node = node[part]
            current = _model_of(field.annotation, node) if field is not None else None
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        # else a union's tag (gqa, dense) that the data does not write: the same mapping goes on
    return current, node


def _untagged(model: type[BaseModel], data: object, loc: tuple) -> tuple:
    """A validation error's location without the tags pydantic adds after a field of a tagged union (the FFN's kind,
    a layer selector's form): ('ffn', 'moe', 'moe') is the key moe of the FFN mapping, whose kind is moe. Found by
    walking the data as the fields' annotations read it, so a key named like a tag stays."""
    out: list = []
    node: object = data
    current: type[BaseModel] | None = model
    tagged = False
    for part in loc:
        if tagged and isinstance(part, str):  # the tag of the union just entered
            tagged = False
            continue
        tagged = False
        if isinstance(node, dict) and current is not None and isinstance(part, str) and part in current.model_fields:
            field = current.model_fields[part]
            node = node.get(part)
            tagged = field.discriminator is not None or any(isinstance(m, Discriminator) for m in field.metadata) \
                or _is_tagged(field.annotation)
            current = _model_of(field.annotation, node)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        out.append(part)
    return tuple(out)


def _is_tagged(annotation: Any) -> bool:
    """Whether an annotation is (or holds, through Optional and list) a union pydantic validates by a tag."""
    from types import UnionType
    from typing import Union

    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return any(isinstance(m, Discriminator) or getattr(m, "discriminator", None) is not None for m in args[1:]) \
            or _is_tagged(args[0])
    if origin in (Union, UnionType, list):
        return any(_is_tagged(a) for a in args)
    return False


def _unknown_key(key: str, parent: type[BaseModel] | None, given: object) -> tuple[str, str | None]:
    """The message for a key `parent` does not have, and the field it is a misspelling of (or None): a close name the
    mapping `given` lacks suggested; a field of another attention or FFN kind named as that kind's."""
    import difflib

    from kvcalc.attention import KINDS

    tag = _kind_tag(parent)
    families: tuple[dict[str, Any], ...] = (KINDS, {"dense": DenseFFN, "moe": MoEFFN, "none": NoFFN})
    for family in families:  # a field of another kind first: n_kv_heads on an MHA block is not a misspelt n_heads
        if tag in family and family[tag] is parent:  # 'none' is an attention kind and an FFN kind: the parent's family
            others = [t for t, cls in family.items() if key in cls.model_fields]
            if others:
                return f"not a field of kind {tag} (a field of {', '.join(others)})", None
    fields = [f for f in parent.model_fields if f != "kind" and not (isinstance(given, dict) and f in given)] \
        if parent is not None else []
    close = difflib.get_close_matches(key, fields, n=1, cutoff=0.85)  # vocab_sise, n_kv_headz; not peak_flops_fp8
    if close:
        return f"unknown key: did you mean {close[0]}?", close[0]
    return "unknown key (check its spelling; unknown keys are errors)", None


def _kind_tag(model: type[BaseModel] | None) -> str | None:
    """The `kind` tag of an attention or FFN model class, or None."""
    field = model.model_fields.get("kind") if model is not None else None
    args = get_args(field.annotation) if field is not None else ()
    return args[0] if len(args) == 1 and isinstance(args[0], str) else None


def format_validation_error(exc, origin: str, locate: Callable[[tuple], int | None] | None = None,
                            model: type[BaseModel] | None = None, data: object = None) -> str:
    """Turn a pydantic ValidationError into `origin: field.path: rule` lines, each with the YAML line of its key where
    `locate` finds one (` (line 7)`); with the `model` and `data` validated, an unknown key gets the field it may
    misspell (whose 'missing' line it replaces) or the kind it belongs to."""
    lines = []
    errors = exc.errors(include_url=False)
    if model is not None:
        errors = [{**err, "loc": _untagged(model, data, tuple(err["loc"]))} for err in errors]
    misspelt: set[tuple] = set()  # (parent loc, field) of the missing fields an unknown key names
    unknown: dict[int, str] = {}
    for i, err in enumerate(errors):
        if err["type"] == "extra_forbidden" and model is not None:
            loc = tuple(err["loc"])
            unknown[i], field = _unknown_key(str(loc[-1]), *_model_at(model, data, loc[:-1]))
            if field is not None:
                misspelt.add((loc[:-1], field))
    for i, err in enumerate(errors):
        msg = str(err["msg"]).removeprefix("Value error, ")
        where = _loc(tuple(err["loc"]))
        if err["type"] == "missing" and (tuple(err["loc"])[:-1], err["loc"][-1]) in misspelt:
            continue  # said at the misspelt key
        if err["type"] in _EXPECTED:
            msg = f"expected {_EXPECTED[err['type']]}, got {_shown(err['input'])}"
            if err["type"] == "int_type" and isinstance(err["input"], str):
                msg += _integer_hint(err["input"])
        elif err["type"] == "invalid_key":  # YAML's `~: 3` or `1: 2` at the top: a key that is no name
            where = _loc(tuple(err["loc"])[:-1])
            msg = f"a key must be a name (a string), got {_shown(err['input'])}"
        elif err["type"] == "layer_selector":
            msg = f"{SELECTOR_RULE}, got {_shown(err['input'])}"
        elif err["type"] in _BOUND:
            msg = _bound_rule(err["type"], err.get("ctx", {}), err["input"])
        elif err["type"] == "extra_forbidden":
            msg = unknown.get(i, "unknown key (check its spelling; unknown keys are errors)")
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] == "union_tag_not_found":  # an FFN mapping without its kind
            msg = f"required field is missing: {err.get('ctx', {}).get('discriminator', 'kind').strip(chr(39))}"
        elif err["type"] == "union_tag_invalid":
            ctx = err.get("ctx", {})
            msg = f"unknown kind {ctx.get('tag')!r}: choose one of {ctx.get('expected_tags', '').replace(chr(39), '')}"
        elif err["type"] == "string_pattern_mismatch" and where in ("family", "source", "notes", "vendor", "description"):
            msg = f"must be {TEXT_RULE}, got {_shown(err['input'])}"
        elif err["type"] in ("string_pattern_mismatch", "string_too_long") and where.endswith("].name"):
            msg = f"{GROUP_NAME_RULE}, got {_shown(err['input'])}"
        elif err["type"] in ("string_pattern_mismatch", "string_too_long") and where.endswith("name"):
            msg = f"a {SPEC_NAME_RULE}, got {_shown(err['input'])}"
        elif err["type"] == "too_short":
            n = err.get("ctx", {}).get("min_length", 1)
            msg = f"must have at least {n} item{'s' if n != 1 else ''}"
        at = locate(tuple(err["loc"])) if locate is not None else None
        msg += f" (line {at})" if at is not None else ""
        for line in msg.split("\n"):
            lines.append(f"{origin}: {where}: {line}" if where else f"{origin}: {line}")
    return "\n".join(lines)


def validate_mapping(model: type[BaseModel], data: object, origin: str, noun: str, fields: str,
                     locate: Callable[[tuple], int | None] | None = None):
    """Validate a parsed file as `model`, raising SpecError lines that name `origin` (`noun` and `fields` word them;
    `locate`: the YAML line of an error's key)."""
    from pydantic import ValidationError

    if data is None:
        raise SpecError(f"{origin}: the file is empty; a {noun} is a mapping of fields ({fields})")
    if not isinstance(data, dict):
        raise SpecError(f"{origin}: the {noun} must be a mapping of fields, not {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        other = _other_kind(data, noun)
        raise SpecError(f"{origin}: {other}" if other else format_validation_error(exc, origin, locate, model, data)) from None


# Keys that only one kind of file has: a model spec, a hardware preset, a Hugging Face config.json
_KIND_KEYS = {
    "spec": ("model spec", ("d_model", "layer_groups", "n_layers"), "give it as a MODEL"),
    "hardware spec": ("hardware preset", ("peak_flops_bf16", "memory_bandwidth", "memory_bytes"), "give it to --hardware"),
    "config.json": ("Hugging Face config.json", ("model_type", "num_hidden_layers", "hidden_size", "architectures"),
                    "give it as a MODEL, or convert it with kvcalc import"),
}


def _other_kind(data: dict, noun: str) -> str | None:
    """Where a file that fails as a `noun` is plainly another kind of kvcalc input (two or more of that kind's own keys
    and none of the `noun`'s), the one message saying so; else None (its fields' errors are the message)."""
    own = _KIND_KEYS[noun][1] if noun in _KIND_KEYS else ()
    if any(k in data for k in own):
        return None
    for kind, (name, keys, advice) in _KIND_KEYS.items():
        found = [k for k in keys if k in data]
        if kind != noun and len(found) >= 2:
            return f"a {name} (it has {', '.join(found)}), not a {_KIND_KEYS.get(noun, (noun,))[0]}; {advice}"
    return None


def spec_from_dict(data: object, origin: str, locate: Callable[[tuple], int | None] | None = None) -> ModelSpec:
    """Validate a parsed mapping as a ModelSpec, raising SpecError that names `origin` (and lines, with `locate`)."""
    return validate_mapping(ModelSpec, data, origin, "spec", "name, d_model, layer_groups, ...", locate)


def load_spec(path: Path) -> ModelSpec:
    """Load and validate a YAML model spec."""
    return spec_from_dict(load_yaml(path), str(path), line_finder(path))
