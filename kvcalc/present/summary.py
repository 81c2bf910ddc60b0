"""Key/value tables: a model's spec and cache for `show`, and parameters, memory and time for `cost`.

Each row has the raw `value` (csv and json), the `shown` text (human formats) and the `source` of the figure.
"""

from __future__ import annotations

from typing import Any

from kvcalc.costs.cache import CacheReport
from kvcalc.dtypes import beyond_bf16_peak
from kvcalc.fields import Figure
from kvcalc.figures import CostFigures
from kvcalc.present.render import Column, cell
from kvcalc.registry import LoadedModel
from kvcalc.rows import attention_label
from kvcalc.settings import Settings
from kvcalc.spec import DenseFFN, ModelSpec, MoEFFN, NoFFN, layer_text
from kvcalc.units import aside_bytes, format_count, format_flops, format_number, format_seconds, format_tokens

SUMMARY_COLUMNS = [Column("key", "Field"), Column("shown", "Value"), Column("source", "Source")]
SUMMARY_KEYS = ["key", "value", "source"]

# The keys of the summaries as JSON objects (show's and cost's "summary": key -> value), for their JSON schema: each
# typed by the compare/sweep figure of that key (kvcalc.present.columns.FIGURES) or, for show's own facts, by
# SHOW_FIGURES. show also has one text line per layer group, keyed by the group's name (with " (layer group)"
# added where the name is one of these keys).
SHOW_FIGURES = {f.key: f for f in (
    Figure("name", "Name", "text", "the model's name"),
    Figure("source", "Source", "text", "where the spec's numbers come from"),
    Figure("attention", "Attention", "text", "attention kinds of its layers, with windows and chunks (GQA+SWA 1024×52)"),
    Figure("vocab_size", "Vocabulary", "int", "vocabulary size"),
    Figure("tie_embeddings", "Tied", "bool", "the output head shares the embedding matrix"),
    Figure("ffn", "FFN", "text", "the feed-forward block in a few words"),
    Figure("encoder", "Encoder", "text", "an encoder–decoder model's encoder, and the positions cross-attention caches"),
    Figure("kv_elements_per_token", "Elements per token", "int", "cache elements one token adds over all layers"),
)}
SHOW_SUMMARY_REQUIRED = ("name", "family", "attention", "d_model", "n_layers", "vocab_size", "tie_embeddings",
                         "max_context", "ffn", "kv_elements_per_token", "kv_bytes_per_token", "kv_cache_bytes")
SHOW_SUMMARY = SHOW_SUMMARY_REQUIRED + ("source", "encoder", "engine_kv_bytes", "engine_state_bytes", "gpus",
                                        "kv_cache_bytes_per_gpu", "state_bytes_per_gpu", "weights_bytes_per_gpu",
                                        "state_bytes", "cache_bytes")
COST_SUMMARY_REQUIRED = ("params_total", "params_active", "weights_bytes", "kv_cache_bytes", "decode_bytes_read",
                         "decode_intensity")
COST_SUMMARY = COST_SUMMARY_REQUIRED + ("state_bytes", "engine_kv_bytes", "engine_state_bytes", "gpus", "kv_cache_bytes_per_gpu", "state_bytes_per_gpu",
                                        "weights_bytes_per_gpu", "mla_crossover", "prefill_seconds", "decode_seconds_per_token", "tokens_per_second",
                                        "fits_in_memory", "tp_allreduce_bytes", "comm_seconds_per_token")



def _tokens_aside(n: int) -> str:
    """A token count exact, with its k/M form where that differs ('131,072 (128k)'; '448' alone)."""
    short = format_tokens(n)
    return f"{n:,}" if short == f"{n:,}" else f"{n:,} ({short})"

def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _rows(items: list[tuple[str, Any, str, str]]) -> list[dict]:
    return [{"key": k, "value": v, "shown": s, "source": src} for k, v, s, src in items]


def ffn_text(spec: ModelSpec) -> str:
    """The model's FFN in a few words, and where layer groups set their own (each group's row says which)."""
    if isinstance(spec.ffn, NoFFN):
        return "none (per layer group)"
    own = sum(len(g.layers) for g in spec.groups if spec.layer_groups[g.index].ffn not in (None, spec.ffn))
    if own == spec.n_layers:
        return f"{_ffn_words(spec.ffn)}, for no layer: every group sets its own (see their rows)"
    return _ffn_words(spec.ffn) + (f" (but {own:,} layer(s) of groups with their own: see their rows)" if own else "")


def _ffn_words(ffn: DenseFFN | MoEFFN | NoFFN) -> str:
    """An FFN block in a few words."""
    if isinstance(ffn, NoFFN):
        return "none"
    if isinstance(ffn, DenseFFN):
        return f"dense{' gated' if ffn.gated else ''}, d_ff {ffn.d_ff:,}"
    shared = f" + {ffn.n_shared_experts} shared" if ffn.n_shared_experts else ""
    dense = f"; first {ffn.first_k_dense} layer(s) dense d_ff {ffn.dense_d_ff:,}" if ffn.first_k_dense and ffn.dense_d_ff else ""
    return f"MoE {ffn.n_experts_per_tok} of {ffn.n_routed_experts} routed{shared}, expert d_ff {ffn.moe_d_ff:,}{dense}"


def summary_rows(loaded: LoadedModel, report: CacheReport, units: str = "binary",
                 settings: Settings | None = None) -> list[dict]:
    """Key facts of a loaded model and its cache, each with where it came from (and, under a parallel layout in
    `settings`, what the busiest GPU holds)."""
    spec = loaded.spec
    keys = loaded.config_keys
    where = lambda field: f"{field}" + (f" (config.json: {keys[field]})" if field in keys else "")  # noqa: E731
    label = attention_label(spec, report.mla_cache)
    items: list[tuple[str, Any, str, str]] = [
        ("name", spec.name, spec.name, loaded.origin),
        ("family", spec.family, spec.family, "family"),
        ("source", spec.source, spec.source or "–", "source"),
        ("attention", label, label, "layer_groups"),
        ("d_model", spec.d_model, f"{spec.d_model:,}", where("d_model")),
        ("n_layers", spec.n_layers, f"{spec.n_layers:,}", where("n_layers")),
        ("vocab_size", spec.vocab_size, f"{spec.vocab_size:,}", where("vocab_size")),
        ("tie_embeddings", spec.tie_embeddings, _yes(spec.tie_embeddings), "tie_embeddings"),
        ("max_context", spec.max_context, _tokens_aside(spec.max_context), where("max_context")),
        ("ffn", ffn_text(spec), ffn_text(spec), "ffn"),
    ]
    for g in spec.groups:
        window = f", window {g.sliding_window:,}" if g.sliding_window else ""
        window += f", chunk {g.layer.chunk:,}" if g.layer.chunk else ""
        window += ", reading an earlier layer's cache (KV-shared)" if g.layer.kv_shared else ""
        cross = f"; cross-attention over the encoder: {g.cross.describe(g.cross_layer)}" if g.cross is not None else ""
        if g.parallel is not None:
            cross += f"; in parallel, {g.parallel.kind.upper()}: {g.parallel.describe(g.parallel_layer)}"
        if (own := spec.layer_groups[g.index].ffn) is not None and own != spec.ffn:
            cross += f"; its own FFN: {_ffn_words(own)}"
        text = (f"{g.attention.kind.upper()} on {len(g.layers)} layer(s) [{layer_text(g.layers)}]{window}: "
                f"{g.attention.describe(g.layer)}{cross}")
        key = g.label if g.label not in SHOW_SUMMARY else f"{g.label} (layer group)"  # nemotron-h's "attention" group
        items.append((key, text, text, f"layer_groups[{g.index}]"))
    if spec.encoder is not None:
        e = spec.encoder
        text = (f"{e.n_layers} layers, {e.source_len:,} positions by default; its output is cached by every decoder "
                f"layer's cross-attention: {report.enc_ctx:,} positions here")
        items.append(("encoder", text, text, "encoder"))
    mla = f", MLA {report.mla_cache}" if report.mla_cache else ""
    items += [
        ("kv_elements_per_token", report.elements_per_token, f"{report.elements_per_token:,}",
         "sum over layers (full-attention rate)"),
        ("kv_bytes_per_token", report.bytes_per_token,
         f"{report.bytes_per_token:,} B{aside_bytes(report.bytes_per_token, units)}", f"{report.kv_dtype}{mla}"
         + (f", {report.kv_quant} scales" if report.kv_quant != "none" else "")),
        ("kv_cache_bytes", report.bytes, f"{report.bytes:,} B{aside_bytes(report.bytes, units)}",
         f"ctx {report.ctx:,} × batch {report.batch}, windows {'ignored (--no-windows)' if loaded.windows_removed else 'applied'}"
         + (f", {report.kv_quant} scales" if report.kv_quant != "none" else "")),
    ]
    items += engine_items(report, units)
    if settings is not None:
        items += per_gpu_items(spec, settings, report, units)
    if report.state_elements:
        items += [
            ("state_bytes", report.state_bytes, f"{report.state_bytes:,} B{aside_bytes(report.state_bytes, units)}",
             f"constant states of linear-attention and SSM layers, {report.state_dtype}, batch {report.batch}"),
            ("cache_bytes", report.cache_bytes, f"{report.cache_bytes:,} B{aside_bytes(report.cache_bytes, units)}",
             "kv_cache_bytes + state_bytes"),
        ]
    return _rows(items)


def engine_items(report: CacheReport, units: str) -> list[tuple[str, Any, str, str]]:
    """The cache and states in the engine's pages under --engine (none without one), as show and cost list them."""
    if report.engine_bytes is None:
        return []
    b = lambda n: f"{n:,} B{aside_bytes(n, units)}"  # noqa: E731
    items: list[tuple[str, Any, str, str]] = [
        ("engine_kv_bytes", report.engine_bytes, b(report.engine_bytes),
         f"{report.engine}: whole pages of {report.block_size:,} token{'s' if report.block_size != 1 else ''}"
         " a layer and sequence")]
    if report.state_bytes and report.engine_state_bytes is not None:
        items.append(("engine_state_bytes", report.engine_state_bytes, b(report.engine_state_bytes),
                      f"{report.engine}: constant states as it stores them"
                      + (" (a state two pages in a hybrid, one in a model of states alone, each padded)"
                         if report.engine == "vllm" else
                         f" ({report.plan.state_slots} slots a sequence: its own and its extra buffer's tracking "
                         f"slot{'s' if report.plan.state_slots > 2 else ''})"
                         if report.plan.state_slots > 1 else "")))
    return items


def per_gpu_items(spec: ModelSpec, settings: Settings, report: CacheReport, units: str,
                  engine_too: bool = False) -> list[tuple[str, Any, str, str]]:
    """What the busiest GPU holds under a parallel layout (gpus > 1; none on one GPU, unless `engine_too` and an
    engine's model files make its weights differ: cost's fits_in_memory reads them): its layers, KV cache (in the
    engine's pages under --engine), states and weights, as show and cost list them."""
    if settings.gpus == 1 and not (engine_too and settings.engine):
        return []
    from kvcalc.costs.parallel import held_layers_text, mtp_layers_on, per_gpu, rank_block_size, stages

    b = lambda n: f"{n:,} B{aside_bytes(n, units)}"  # noqa: E731
    gpu = per_gpu(spec, settings)
    mtp = mtp_layers_on(spec, settings, gpu.stage)
    dp_attention = ", DP attention" if settings.dp_attention else ""  # a replica's tp ranks split its sequences
    layout = (f"tp {settings.tp} × pp {settings.pp} × dp {settings.dp}{dp_attention}; the busiest GPU: stage {gpu.stage}, "
              f"{held_layers_text(gpu.layers, mtp)}")
    block = rank_block_size(stages(spec, settings)) if report.engine_bytes is not None else None
    return [("gpus", gpu.gpus, f"{gpu.gpus}", layout),
            ("kv_cache_bytes_per_gpu", gpu.kv_cache_bytes, b(gpu.kv_cache_bytes),
             "its KV cache" + (f", whole pages of {block:,} token{'s' if block != 1 else ''}" if block is not None else "")),
            ("state_bytes_per_gpu", gpu.state_bytes, b(gpu.state_bytes), "its constant states"),
            ("weights_bytes_per_gpu", gpu.weights_bytes, b(gpu.weights_bytes), f"its weights in {settings.weights_dtype}"
             + (f", with what {settings.engine} keeps wider" if settings.engine else ""))]


def _rate_bound(fig: CostFigures, step_bound: bool, speculative: bool, sequences: int) -> str:
    """What tokens/s = batch / step is: an upper bound, but where a step emits more than a token a sequence (a
    speculative step under --mtp of a model with MTP layers, `speculative`, accepts up to 1 + k drafted tokens: vLLM
    schedules 1 + k a step) or pipeline stages work on several micro-batches at once (vLLM keeps pp batches in
    flight: max_concurrent_batches; one sequence a replica, `sequences`, is one micro-batch whose every token waits
    for the one before), or where the step's time is not a lower bound (8-bit tensor cores)."""
    beyond = (["a speculative step emits up to 1 + the MTP layers' tokens a sequence"] if speculative else []) \
        + ([f"the {fig.pp} stages keep micro-batches in flight"] if fig.pp > 1 and sequences > 1 else [])
    if beyond:
        return "a token a sequence a step, not an upper bound: " + "; ".join(beyond)
    return "upper bound" + ("" if step_bound else " but for 8-bit tensor cores")


def cost_summary_rows(fig: CostFigures, kv_cache_bytes: int, units: str = "binary", state_bytes: int = 0,
                      per_gpu: list[tuple[str, Any, str, str]] | None = None, crossover_holds: bool = True,
                      engine: list[tuple[str, Any, str, str]] | None = None, partial_experts: bool = False,
                      engine_name: str | None = None, kv_dtype: str = "bf16", speculative: bool = False,
                      sequences: int = 1) -> list[dict]:
    """Key/value rows of `cost`: parameters, memory (the constant states too, where the model has them; under
    --engine its pages, from engine_items; under a parallel layout `per_gpu`, what the busiest GPU holds, from
    per_gpu_items), decode traffic, and (with hardware)
    roofline times. `crossover_holds`: whether the absorbed MLA step stays cheaper past its crossover
    (kvcalc.costs.flops.crossover_holds). `partial_experts`: whether the prefill's tokens reach fewer than all of an
    MoE layer's experts, so its traffic is an upper estimate (kvcalc.costs.traffic.partial_experts). `engine_name`:
    --engine's, whose weight widths the traffic reads (kvcalc.costs.traffic); `kv_dtype`: the cache's, whose fp8
    attention an engine runs on 8-bit tensor cores (dtypes.beyond_bf16_peak); `speculative`: MTP layers counted and
    run (--mtp on a model that has them); `sequences`: a replica's, ceil(batch / dp) (_rate_bound)."""
    b = lambda n: f"{n:,} B{aside_bytes(n, units)}"  # noqa: E731
    states = " + states read and written back" if state_bytes else ""
    items: list[tuple[str, Any, str, str]] = [
        ("params_total", fig.params_total, f"{fig.params_total:,} ({format_count(fig.params_total)})", "all weights"),
        ("params_active", fig.params_active, f"{fig.params_active:,} ({format_count(fig.params_active)})",
         "used by one token (MoE: top-k + shared experts)"),
        ("weights_bytes", fig.weights_bytes, b(fig.weights_bytes), f"all weights in {fig.weights_dtype}"),
        ("kv_cache_bytes", kv_cache_bytes, b(kv_cache_bytes), "KV cache at ctx, windows applied"),
    ]
    if state_bytes:
        items.append(("state_bytes", state_bytes, b(state_bytes),
                      "constant states of linear-attention and SSM layers, any ctx"))
    items += (engine or []) + (per_gpu or [])
    items += [
        ("decode_bytes_read", fig.decode_bytes_read, b(fig.decode_bytes_read),
         f"one decode step at ctx: active weights{f' as {engine_name} keeps them' if engine_name else ''}"
         f"{' (the LM head again for each draft)' if speculative else ''} + KV cache{states}"
         f"{' (a recurrent state written a token verified)' if speculative and state_bytes else ''}"
         " (MoE: a lower bound when a step runs more than one token: batch above 1, or --mtp)"),
        ("decode_intensity", fig.decode_intensity, f"{format_number(fig.decode_intensity)} FLOP/byte",
         f"{format_flops(fig.flops_decode_token)} per decode step / bytes read"),
    ]
    if fig.flops_decode_token_absorbed is not None:  # the schedules can be compared (MLA with a latent cache)
        t = fig.mla_crossover
        text = (("absorbed is cheaper from context {:,} on" if crossover_holds else
                 "absorbed is first cheaper at context {:,} (chunked layers: not at every context after)").format(t)
                if t else "absorbed is never cheaper")
        items.append(("mla_crossover", t, text, "first context where the absorbed decode step needs fewer FLOPs than naive"))
    if fig.hardware is not None:
        hw = fig.hardware
        # FLOPs are costed at the bf16 peak: W8A8 weights or fp8 attention on 8-bit tensor cores can beat it
        eight = beyond_bf16_peak(fig.weights_dtype, kv_dtype)
        peak = "FLOPs at the bf16 peak, which 8-bit tensor cores (where the GPU has them) can beat"
        low = f"lower bound where memory-bound; where compute-bound, {peak}" if eight else "lower bound"
        step_low = "lower bound" if fig.decode_bound == "memory" or not eight else peak
        items += [
            ("prefill_seconds", fig.prefill_seconds, format_seconds(fig.prefill_seconds or 0),
             f"{hw}, " + ("an estimate: MoE layers read every expert its tokens can reach, more than the router may pick"
                          + ("; FLOPs at the bf16 peak" if eight else "") if partial_experts else low)),
            ("decode_seconds_per_token", fig.decode_seconds_per_token, format_seconds(fig.decode_seconds_per_token or 0),
             f"{hw}, {fig.decode_bound}-bound, {step_low}"),
            ("tokens_per_second", fig.tokens_per_second, cell(fig.tokens_per_second or 0, "rate"),
             "batch / decode time, " + _rate_bound(fig, step_low == "lower bound", speculative, sequences)),
            ("fits_in_memory", fig.fits_in_memory, _yes(bool(fig.fits_in_memory)),
             f"{'the busiest GPU: its ' if per_gpu else ''}weights + KV cache{' + states' if state_bytes else ''} "
             f"vs {hw} memory"),
        ]
    if fig.tp_allreduce_bytes is not None:
        items.append(("tp_allreduce_bytes", fig.tp_allreduce_bytes, b(fig.tp_allreduce_bytes),
                      "estimate: all-reduced by one decode step over the tp ranks (kvcalc/costs/comm.py)"))
    if fig.comm_seconds_per_token is not None:
        items.append(("comm_seconds_per_token", fig.comm_seconds_per_token, format_seconds(fig.comm_seconds_per_token),
                      f"estimate: ring all-reduce on {fig.hardware}'s interconnect, beside the roofline (not in it)"))
    return _rows(items)
