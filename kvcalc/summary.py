"""A spec as key/value rows for `show`, and as YAML text for `import`."""

from __future__ import annotations

from kvcalc.costs.cache import CacheReport
from kvcalc.render import Column
from kvcalc.rows import attention_label
from kvcalc.spec import MLA, DenseFFN, ModelSpec
from kvcalc.units import format_bytes, format_tokens

SUMMARY_COLUMNS = [Column("key", "Field"), Column("shown", "Value"), Column("source", "Source")]


def _ffn_text(spec: ModelSpec) -> str:
    ffn = spec.ffn
    if isinstance(ffn, DenseFFN):
        return f"dense{' gated' if ffn.gated else ''}, d_ff {ffn.d_ff:,}"
    shared = f" + {ffn.n_shared_experts} shared" if ffn.n_shared_experts else ""
    dense = f"; first {ffn.first_k_dense} layer(s) dense d_ff {ffn.dense_d_ff:,}" if ffn.first_k_dense else ""
    return f"MoE {ffn.n_experts_per_tok} of {ffn.n_routed_experts} routed{shared}, expert d_ff {ffn.moe_d_ff:,}{dense}"


def summary_rows(loaded, report: CacheReport, units: str = "binary") -> list[dict]:
    """Key facts of a loaded model and its cache: raw `value`, human `shown`, and the `source` of each."""
    spec: ModelSpec = loaded.spec
    keys = loaded.config_keys
    where = lambda field: f"{field}" + (f" (config.json: {keys[field]})" if field in keys else "")  # noqa: E731
    rows = [
        ("name", spec.name, spec.name, loaded.origin),
        ("family", spec.family, spec.family, "family"),
        ("source", spec.source, spec.source or "–", "source"),
        ("attention", attention_label(spec, report.mla_cache), attention_label(spec, report.mla_cache), "layer_groups"),
        ("d_model", spec.d_model, f"{spec.d_model:,}", where("d_model")),
        ("n_layers", spec.n_layers, f"{spec.n_layers:,}", where("n_layers")),
        ("vocab_size", spec.vocab_size, f"{spec.vocab_size:,}", where("vocab_size")),
        ("tie_embeddings", spec.tie_embeddings, str(spec.tie_embeddings).lower(), "tie_embeddings"),
        ("max_context", spec.max_context, f"{spec.max_context:,} ({format_tokens(spec.max_context)})", where("max_context")),
        ("ffn", _ffn_text(spec), _ffn_text(spec), "ffn"),
    ]
    for g in spec.groups:
        att = g.attention
        if isinstance(att, MLA):
            q = f"q_lora_rank {att.q_lora_rank}" if att.q_lora_rank else "no query compression"
            dims = (f"n_h {att.n_heads}, d_c {att.kv_lora_rank}, d_R {att.qk_rope_head_dim}, qk_nope {att.qk_nope_head_dim}, "
                    f"v {att.v_head_dim}, {q}; d_qk = {att.qk_nope_head_dim + att.qk_rope_head_dim} (derived)")
        elif att.kind == "linear":
            dims = f"constant state {att.state_elements:,} elements per sequence"
        else:
            n_kv = {"mha": att.n_heads, "mqa": 1}.get(att.kind, getattr(att, "n_kv_heads", None))
            hd = f"{g.head_dim} ({'derived: d_model / n_heads' if g.head_dim_derived else 'head_dim'})"
            dims = f"n_h {att.n_heads}, n_kv {n_kv}, d_h {hd}, group size {att.n_heads // n_kv}"
        window = f", window {g.sliding_window:,}" if g.sliding_window else ""
        text = f"{att.kind.upper()} on {len(g.layers)} layer(s) [{_span(g.layers)}]{window}: {dims}"
        rows.append((g.label, text, text, f"layer_groups[{g.index}]"))
    mla = f", MLA {report.mla_cache}" if report.mla_cache else ""
    rows += [
        ("kv_elements_per_token", report.elements_per_token, f"{report.elements_per_token:,}", "sum over layers (full-attention rate)"),
        ("kv_bytes_per_token", report.bytes_per_token, f"{report.bytes_per_token:,} B ({format_bytes(report.bytes_per_token, units)})",
         f"{report.kv_dtype}{mla}"),
        ("kv_cache_bytes", report.bytes, f"{report.bytes:,} B ({format_bytes(report.bytes, units)})",
         f"ctx {report.ctx:,} × batch {report.batch}, windows applied"),
    ]
    return [{"key": k, "value": v, "shown": s, "source": src} for k, v, s, src in rows]


def _span(layers) -> str:
    from kvcalc.spec import layer_ranges

    return layer_ranges(list(layers))


def spec_yaml(spec: ModelSpec, name: str | None = None) -> str:
    """The spec as YAML (defaults left out), in field order, ready to save as a bundled or user spec."""
    import yaml

    from kvcalc.registry import check_name

    data = spec.model_dump(exclude_defaults=True, exclude_none=True)
    data = {"name": spec.name if name is None else check_name(name), **{k: v for k, v in data.items() if k != "name"}}
    data["layer_groups"] = [
        {**({"name": g["name"]} if "name" in g else {}), "layers": g.get("layers", "all"), **g} for g in data["layer_groups"]
    ]
    return yaml.safe_dump(_kind_first(data), sort_keys=False, default_flow_style=False, width=100)


def _kind_first(value):
    """Put the discriminator `kind` first in every block, so a spec reads 'kind: gqa' before the dims."""
    if isinstance(value, dict):
        ordered = {"kind": value["kind"]} if "kind" in value else {}
        return {**ordered, **{k: _kind_first(v) for k, v in value.items()}}
    if isinstance(value, list):
        return [_kind_first(v) for v in value]
    return value


def cost_summary_rows(fig: dict, units: str = "binary") -> list[dict]:
    """Key/value rows of `cost`: parameters, memory, decode traffic, and (with hardware) roofline times."""
    from kvcalc.units import format_count, format_flops, format_seconds

    b = lambda n: f"{n:,} B ({format_bytes(n, units)})"  # noqa: E731
    rows = [
        ("params_total", fig["params_total"], f"{fig['params_total']:,} ({format_count(fig['params_total'])})", "all weights"),
        ("params_active", fig["params_active"], f"{fig['params_active']:,} ({format_count(fig['params_active'])})",
         "used by one token (MoE: top-k + shared experts)"),
        ("weights_bytes", fig["weights_bytes"], b(fig["weights_bytes"]), f"all weights in {fig['weights_dtype']}"),
        ("kv_cache_bytes", fig["kv_cache_bytes"], b(fig["kv_cache_bytes"]), "KV cache at ctx, windows applied"),
        ("decode_bytes_read", fig["decode_bytes_read"], b(fig["decode_bytes_read"]),
         "one decode step at ctx: active weights + KV cache (MoE: a lower bound at batch > 1)"),
        ("decode_intensity", fig["decode_intensity"], f"{fig['decode_intensity']:.2f} FLOP/byte",
         f"{format_flops(fig['flops_decode_token'])} per decode step / bytes read"),
    ]
    if "mla_crossover" in fig:
        t = fig["mla_crossover"]
        text = f"absorbed is cheaper from context {t:,} on" if t else "naive stays cheaper"
        rows.append(("mla_crossover", t, text, "first context where the absorbed decode step needs fewer FLOPs than naive"))
    if "hardware" in fig:
        hw = fig["hardware"]
        rows += [
            ("prefill_seconds", fig["prefill_seconds"], format_seconds(fig["prefill_seconds"]), f"{hw}, lower bound"),
            ("decode_seconds_per_token", fig["decode_seconds_per_token"], format_seconds(fig["decode_seconds_per_token"]),
             f"{hw}, {fig['decode_bound']}-bound, lower bound"),
            ("tokens_per_second", fig["tokens_per_second"], f"{fig['tokens_per_second']:,.1f}", "batch / decode time, upper bound"),
            ("fits_in_memory", fig["fits_in_memory"], "yes" if fig["fits_in_memory"] else "no", f"weights + KV cache vs {hw} memory"),
        ]
    return [{"key": k, "value": v, "shown": s, "source": src} for k, v, s, src in rows]
