"""Parameter counts by component (total and active per token) and the memory the weights take.

Conventions (also in the README):
- Counts every weight matrix, bias, norm weight (LayerNorm: weight and bias) and embedding table of the spec.
- "Active" is what one token uses: every attention and norm weight, both embedding tables (input and LM head),
  dense FFNs, the router, the shared experts and the top-k routed experts (DeepSeek's convention for V2's 21B).
- The multi-token-prediction layers (a spec's mtp_layers, DeepSeek-V3 §2.2) are counted only when asked (mtp=True):
  plain decoding does not run them.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from kvcalc.attention import Layer
from kvcalc.dtypes import dtype_bits
from kvcalc.errors import KvcalcError, brief
from kvcalc.spec import DenseFFN, ModelSpec, MoEFFN, NoFFN, ResolvedGroup


def ffn_of_layer(spec: ModelSpec, layer: int) -> DenseFFN | MoEFFN | NoFFN:
    """The FFN block layer `layer` runs: the group's override, else the model's; MoE's leading layers are dense."""
    gi = spec.group_index_of(layer)
    ffn = spec.layer_groups[gi].ffn or spec.ffn
    if isinstance(ffn, MoEFFN) and layer < ffn.first_k_dense and ffn.dense_d_ff is not None:  # (the spec requires it)
        return _leading_dense(spec, gi, ffn)
    return ffn


def _leading_dense(spec: ModelSpec, gi: int, ffn: MoEFFN) -> DenseFFN:
    """DeepSeek first_k_dense_replace: the dense FFN of dense_d_ff that the leading layers of group `gi` run (built
    once per spec and group)."""
    assert ffn.dense_d_ff is not None  # the spec requires it with first_k_dense
    d_ff = ffn.dense_d_ff
    return spec.memo(("leading_dense", gi), lambda: DenseFFN(kind="dense", d_ff=d_ff, gated=ffn.gated))


@dataclass(frozen=True)
class FfnRun:
    """Layers of one group that run the same FFN block: `layers[lo:hi]` of the group's sorted layer indices."""

    ffn: DenseFFN | MoEFFN | NoFFN
    layers: tuple[int, ...]
    lo: int
    hi: int

    @property
    def count(self) -> int:
        """How many layers run it."""
        return self.hi - self.lo

    @property
    def first(self) -> int:
        """The first layer that runs it."""
        return self.layers[self.lo]

    def count_in(self, start: int, stop: int) -> int:
        """How many of its layers lie in range(start, stop) (a pipeline stage)."""
        return bisect_left(self.layers, stop, self.lo, self.hi) - bisect_left(self.layers, start, self.lo, self.hi)


def ffn_runs(spec: ModelSpec) -> tuple[FfnRun, ...]:
    """The FFN of every layer as runs, ordered by their first layer: each group's layers split at MoE's first_k_dense
    (at most two runs a group), so a sum over layers is a sum over runs of count × per-layer figure (once per spec)."""
    return spec.memo(("ffn_runs",), lambda: _ffn_runs(spec))


def _ffn_runs(spec: ModelSpec) -> tuple[FfnRun, ...]:
    runs = []
    for g in spec.groups:
        ffn = spec.layer_groups[g.index].ffn or spec.ffn
        split = 0  # layers before it run the leading dense FFN
        if isinstance(ffn, MoEFFN) and ffn.first_k_dense and ffn.dense_d_ff is not None:
            split = bisect_left(g.layers, ffn.first_k_dense)
            if split:
                runs.append(FfnRun(_leading_dense(spec, g.index, ffn), g.layers, 0, split))
        if split < len(g.layers):
            runs.append(FfnRun(ffn, g.layers, split, len(g.layers)))
    return tuple(sorted(runs, key=lambda r: r.first))


def add_times(total: dict[str, int], part: dict[str, int], times: int) -> None:
    """total += times × part, component by component; a component new to `total` goes last (as Counter.update puts
    it, so a breakdown's order is the order of its first layer)."""
    for key, value in part.items():
        total[key] = total.get(key, 0) + times * value


def attention_params(group: ResolvedGroup) -> dict[str, int]:
    """Weights of one attention layer of `group`, by component (its kind's weight table, biases and norms included)."""
    out: dict[str, int] = {}
    weights = group.attention.weights(group.layer)
    if group.parallel is not None:  # a mixer beside the attention (Falcon-H1's Mamba-2): its weights are the layer's
        weights += group.parallel.weights(group.parallel_layer)
    for w in weights:
        out[w.component] = out.get(w.component, 0) + w.size
    return out


def encoder_params(spec: ModelSpec) -> dict[str, int]:
    """The encoder's weights (encoder–decoder models): its layers' attention, FFN and norms, and what the importer
    counted outside them (front end, position table, final norm)."""
    e = spec.encoder
    if e is None:
        return {}
    d = spec.d_model
    norm = 2 * d if spec.norm == "layernorm" else d
    attn = sum(w.size for w in e.attention.weights(Layer(d, None, "encoder.attention")))
    return {"encoder/attn": e.n_layers * attn, "encoder/ffn": e.n_layers * sum(ffn_params(e.ffn, d)[0].values()),
            "encoder/norms": e.n_layers * e.norms_per_layer * norm, "encoder/other": e.extra_params}


def _matrices(gated: bool) -> int:
    return 3 if gated else 2  # gate, up, down (SwiGLU/GeGLU) or up, down


def ffn_params(ffn: DenseFFN | MoEFFN | NoFFN, d_model: int) -> tuple[dict[str, int], dict[str, int]]:
    """(total, active-per-token) weights of one FFN layer, by component."""
    d = d_model
    if isinstance(ffn, NoFFN):
        return {}, {}
    if isinstance(ffn, DenseFFN):
        bias = ((2 if ffn.gated else 1) * ffn.d_ff + d) if ffn.bias else 0
        dense = {"ffn/dense": _matrices(ffn.gated) * d * ffn.d_ff + bias}
        return dense, dense
    # gpt-oss: each expert's gate_up projection has a bias of 2·d_ff, its down projection one of d
    expert = expert_matrices(ffn, d) + (((2 if ffn.gated else 1) * ffn.moe_d_ff + d) if ffn.expert_bias else 0)
    shared = ffn.n_shared_experts * _matrices(ffn.gated) * d * (ffn.shared_d_ff or ffn.moe_d_ff)
    shared += d if ffn.shared_gate else 0  # Qwen3-Next shared_expert_gate: Linear(d_model, 1)
    router = router_params(ffn, d)
    total = {"ffn/routed": ffn.n_routed_experts * expert, "ffn/shared": shared, "ffn/router": router}
    active = {"ffn/routed": ffn.n_experts_per_tok * expert, "ffn/shared": shared, "ffn/router": router}
    return total, active


def expert_matrices(ffn: MoEFFN, d_model: int, d_ff: int | None = None) -> int:
    """One routed expert's matrices (gate, up and down, or up and down), at its width moe_d_ff or a rank's `d_ff`."""
    return _matrices(ffn.gated) * d_model * (ffn.moe_d_ff if d_ff is None else d_ff)


def router_params(ffn: MoEFFN, d_model: int) -> int:
    """An MoE layer's router: d × E and, with router_bias, E biases (e_score_correction_bias); whole on every rank."""
    return d_model * ffn.n_routed_experts + (ffn.n_routed_experts if ffn.router_bias else 0)


@dataclass(frozen=True)
class ParamReport:
    """Parameter counts of a model: by component, in total, and active per token."""

    model: str
    breakdown: dict[str, int]
    active_breakdown: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.breakdown.values())

    @property
    def active(self) -> int:
        return sum(self.active_breakdown.values())


def param_counts(spec: ModelSpec, mtp: bool = False) -> ParamReport:
    """Exact parameter counts of `spec` by component ('embed', 'attn/q', 'ffn/routed', 'norms', 'lm_head', ...);
    `mtp`: with its multi-token-prediction layers ('mtp/...'). Counted once per spec; each call gets its own dicts."""
    if type(mtp) is not bool:  # mtp="no" is truthy: it counted the MTP layers
        raise KvcalcError(f"mtp must be True or False, got {brief(mtp)}")
    report = spec.memo(("param_counts", mtp), lambda: _param_counts(spec, mtp))
    return ParamReport(report.model, dict(report.breakdown), dict(report.active_breakdown))


def param_totals(spec: ModelSpec, mtp: bool = False) -> tuple[int, int]:
    """(total, active) parameters of `spec`, once per spec."""
    def totals() -> tuple[int, int]:
        report = param_counts(spec, mtp)
        return report.total, report.active

    return spec.memo(("param_totals", mtp), totals)


def _param_counts(spec: ModelSpec, mtp: bool) -> ParamReport:
    d = spec.d_model
    norm = 2 * d if spec.norm == "layernorm" else d  # LayerNorm has a weight and a bias
    total: dict[str, int] = {"embed": spec.vocab_size * d}
    if spec.position_params:
        total["pos_embed"] = spec.position_params
    active = dict(total)
    for group in spec.groups:
        if not group.layers:
            continue
        attn = attention_params(group)
        if group.cross is not None:  # encoder–decoder: the cross-attention block's weights
            for w in group.cross.weights(group.cross_layer):
                key = "cross/" + w.component.split("/")[1]
                attn[key] = attn.get(key, 0) + w.size
        add_times(total, attn, len(group.layers))  # every layer of a group has the same weights
        add_times(active, attn, len(group.layers))
    enc = encoder_params(spec)
    add_times(total, enc, 1)
    add_times(active, enc, 1)
    for run in ffn_runs(spec):
        t, a = ffn_params(run.ffn, d)
        add_times(total, t, run.count)
        add_times(active, a, run.count)
    # per-layer norms (a group's own count where it has one) and the final norm
    norms = sum(len(g.layers) * (spec.layer_groups[g.index].norms_per_layer or spec.norms_per_layer) for g in spec.groups)
    norms = norms * norm + norm
    total["norms"] = active["norms"] = norms
    if not spec.tie_embeddings:
        total["lm_head"] = active["lm_head"] = spec.vocab_size * d
    for name, block in spec.extra_weights.items():  # blocks the schema has no type for (the importer counted them)
        total[f"extra/{name}"] = active[f"extra/{name}"] = block.params
    if mtp and spec.mtp_layers:
        extra, extra_active = mtp_params(spec)
        add_times(total, extra, 1)
        add_times(active, extra_active, 1)
    keep = lambda c: {k: v for k, v in c.items() if v}  # noqa: E731
    return ParamReport(spec.name, keep(total), keep(active))


def mtp_params(spec: ModelSpec) -> tuple[dict[str, int], dict[str, int]]:
    """(total, active per token) of the multi-token-prediction layers (DeepSeek-V3 §2.2): each a decoder block like
    the last layer (its attention, and its FFN: all experts in the total, the routed top-k and the shared ones active,
    as DeepSeek's MoE runs them), M_k of 2·d × d (eh_proj), and RMSNorms enorm, hnorm and the shared head's norm; the
    embedding and output head are shared with the main model (the checkpoint stores copies; not counted twice)."""
    group = spec.mtp_group()
    if group is None:
        return {}, {}
    d, n = spec.d_model, spec.mtp_layers
    ffn, ffn_active = ffn_params(ffn_of_layer(spec, spec.n_layers - 1), d)
    proj, norms = mtp_proj_and_norms(spec)
    rest = {"mtp/attn": n * sum(attention_params(group).values()), "mtp/proj": n * proj, "mtp/norms": n * norms}
    return {**rest, "mtp/ffn": n * sum(ffn.values())}, {**rest, "mtp/ffn": n * sum(ffn_active.values())}


def mtp_proj_and_norms(spec: ModelSpec) -> tuple[int, int]:
    """One MTP layer's M_k (eh_proj, 2·d × d) and its norms: the block's, and enorm, hnorm and the shared head's (DeepSeek-V3
    §2.2); both whole on every tensor-parallel rank (vLLM DeepSeekMTP: nn.Linear and RMSNorm). The block's norms are the
    last layer's, whose group may set its own norms_per_layer (as the MTP layers take its attention and FFN)."""
    d = spec.d_model
    norm = 2 * d if spec.norm == "layernorm" else d
    last = spec.layer_groups[spec.group_index_of(spec.n_layers - 1)].norms_per_layer or spec.norms_per_layer
    return 2 * d * d, (last + 3) * norm


def weights_bytes(params: int, weights_dtype: str) -> int:
    """Bytes of `params` weights stored as `weights_dtype`, rounded up (int4: half a byte; scales not modelled)."""
    if type(params) is not int or params < 0:  # 10.5 gave a float, True 2 bytes, a ParamReport a TypeError
        raise KvcalcError(f"params must be a count of weights (an int, e.g. param_counts(spec).total), got "
                          f"{brief(params)}")
    return -(-params * dtype_bits(weights_dtype, "weights") // 8)


__all__ = ["FfnRun", "ParamReport", "add_times", "attention_params", "expert_matrices", "ffn_of_layer", "ffn_runs",
           "param_counts", "param_totals", "router_params", "weights_bytes"]
