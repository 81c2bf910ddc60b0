"""What each command prints, as an Output of tables, a json payload, derivations and warnings (no printing here:
kvcalc.present.emit prints)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcalc.lists import first_repeat
from kvcalc.present.emit import Output, Table
from kvcalc.present.render import Column, only

if TYPE_CHECKING:
    from fractions import Fraction

    from kvcalc.backend.runner import RunReport
    from kvcalc.costs.cache import CachePlan
    from kvcalc.costs.engine_memory import SGLangCapacity
    from kvcalc.registry import LoadedModel
    from kvcalc.settings import Settings
    from kvcalc.spec import ModelSpec

COLUMNS_HINT = "pick fewer with --columns: a preset (kv, cost, generate, mla, time) or column keys"


def over_max(spec: ModelSpec, tokens: int, what: str) -> list[str]:
    """A warning when `tokens` pass the model's trained maximum (`what` says what they are)."""
    if tokens <= spec.max_context:
        return []
    return [f"warning: {spec.name}: {what} exceeds its trained maximum of {spec.max_context:,} tokens (max_context); "
            "computed anyway"]


def _load_warnings(loaded: list[LoadedModel]) -> list[str]:
    """What loading said (an unknown model_type imported as a plain decoder, ...)."""
    return [w for lm in loaded for w in lm.warnings]


def _ctx_warnings(specs: list[ModelSpec], ctxs: list[int]) -> list[str]:
    return [w for spec in specs for w in over_max(spec, max(ctxs), f"ctx {max(ctxs):,}")]


def _gen_warnings(specs: list[ModelSpec], ctxs: list[int], gens: list[int], cols: list[Column]) -> list[str]:
    """Where a generation column is shown, a warning for a model whose prompt is within its maximum but whose
    generation passes it (the prompt past it is _ctx_warnings'), as cost warns."""
    if not any(c.key.startswith("flops_generate") for c in cols):
        return []
    p, g = max(ctxs), max(gens)
    return [w for spec in specs if p <= spec.max_context
            for w in over_max(spec, p + g, f"the prompt of {p:,} plus {g:,} generated tokens ({p + g:,})")]


def plot_warnings(loaded: list[LoadedModel], ctxs: list[int], s: Settings, metrics: list[str] | None = None) -> list[str]:
    """What `plot` says on stderr, as the table commands do: the specs' own warnings, options a model has nothing for,
    a context past a model's maximum (a figure to 1M of a model trained to 8k says so), and beside a prefill's FLOPs
    (`metrics`: flops-prefill) the note of a DeepSeek Sparse Attention model, at the longest context."""
    specs = [lm.spec for lm in loaded]
    shown = metrics or ["cache"]
    prefill = {"flops_prefill"} if "flops-prefill" in shown else set()
    return ([w for lm in loaded for w in lm.warnings] + option_warnings(specs, s) + _ctx_warnings(specs, ctxs)
            + _unplotted(s, shown) + _prefill_notes(specs, ctxs, [s], prefill, longest=True))


def _unplotted(s: Settings, metrics: list[str]) -> list[str]:
    """The options no panel of `metrics` depends on, said rather than passed over: dense attention moves the prefill's
    FLOPs alone, MLA's decode schedule the decode panels, the weights' dtype the decode time and (with a hardware
    preset) where weights and cache exceed its memory."""
    out = []
    if s.dense_attn and "flops-prefill" not in metrics:
        out.append("warning: --dense-attn: it counts a prefill's attention as dense matrices, and no panel shows a "
                   "prefill (-m flops-prefill), so the option changes nothing")
    if s.mla_schedule is not None and not {"flops-decode", "decode-time"} & set(metrics):
        out.append("warning: --mla-schedule: it moves the decode panels (-m flops-decode, decode-time) alone, and none "
                   "is drawn, so the option changes nothing")
    if s.weights_dtype != "bf16" and s.hardware is None:
        out.append(f"warning: --weights-dtype {s.weights_dtype}: without --hardware no panel depends on the weights, so "
                   "the option changes nothing")
    return out


def mla_options(mla_cache: str, mla_schedule: str | None) -> str | None:
    """The MLA options a command line gave, as a warning names them (the default latent cache is not told apart)."""
    given = (["--mla-cache"] if mla_cache != "latent" else []) + (["--mla-schedule"] if mla_schedule is not None else [])
    return "/".join(given) or None


def nothing_for(spec: ModelSpec, *, mtp: bool = False, enc_ctx: bool = False, mla: str | None = None,
                ep: bool = False, state: bool = False) -> list[tuple[str, str]]:
    """The options asked for (true; `mla`: the MLA options given, mla_options) that `spec` has nothing for, each with
    what it lacks: (option, 'no ...')."""
    from kvcalc.costs.params import ffn_runs

    lacks = []
    if mtp and not spec.mtp_layers:
        lacks.append(("--mtp", "no multi-token-prediction layers (mtp_layers)"))
    if enc_ctx and not any(g.cross is not None for g in spec.groups):
        lacks.append(("--enc-ctx", "no cross-attention (an encoder–decoder model's)"))
    if mla and not any(g.attention.kind == "mla" for g in spec.groups):
        lacks.append((mla, "no MLA layers"))
    if ep and not any(getattr(run.ffn, "n_routed_experts", 0) for run in ffn_runs(spec)):
        lacks.append(("--ep", "no routed experts"))
    if state and not spec.has_states():
        lacks.append(("--state-dtype", "no constant-state layers (linear attention, SSMs)"))
    return lacks


def option_warnings(specs: list[ModelSpec], s: Settings, grid: Sequence[Settings] = ()) -> list[str]:
    """An option a model has nothing for changes nothing: say so, rather than let it pass in silence (--mtp where the
    GLM, Qwen3.5 and MiniMax importers leave the MTP modules out, saying so in the spec's notes; --enc-ctx, the MLA
    options, --ep); `grid`: a sweep's settings, whose tp may vary."""
    mla = mla_options(s.mla_cache, s.mla_schedule)
    return [line for spec in specs for line in _nothing_warnings(spec.name, nothing_for(
        spec, mtp=s.mtp, enc_ctx=s.enc_ctx is not None, mla=mla, ep=s.ep > 1, state=s.state_dtype is not None))] \
        + (["warning: --dp-attention: at tp 1 a replica's attention has one rank to split its sequences over, so "
            "the option changes nothing"] if s.dp_attention and all(at.tp == 1 for at in grid or [s]) else []) \
        + _engine_warnings(specs, s)


def _nothing_warnings(name: str, lacks: list[tuple[str, str]]) -> list[str]:
    """The warnings for options a model has nothing for (nothing_for's pairs)."""
    return [f"warning: {name}: --mtp: its spec has {lack}, so nothing is added" if option == "--mtp" else
            f"warning: {name}: {option}: it has {lack}, so the option changes nothing" for option, lack in lacks]


ROPE_WARN_BYTES = 512 << 20  # a RoPE table this large a GPU is warned of (most models' are 2-128 MiB: not counted)


def _engine_warnings(specs: list[ModelSpec], s: Settings) -> list[str]:
    """What an engine does not serve, said beside the pages counted by its rules anyway: vLLM 0.34.0 and SGLang serve
    Whisper alone of the encoder–decoder models (vLLM removed the others from V1; SGLang's is_encoder_decoder_model),
    neither serves lightning attention (MiniMax-M1: vLLM's registry lists MiniMaxM1ForCausalLM as removed after
    0.23.0; SGLang 0.5.23 has no such model) nor has a model file for OpenELM (neither registry names it; vLLM might
    run its remote code through its Transformers backend, unverified), SGLang none for Falcon and Jamba (its
    Transformers backend may run them, unverified), and vLLM has no cache for some --kv-quant schemes (_vllm_lacks),
    SGLang none for int8, int4 or kvcalc's scaled schemes (_sglang_lacks)."""
    if s.engine not in ("vllm", "sglang"):
        return []
    from kvcalc.costs.engine_files import KNOWN_FAMILIES, rope_table_bytes
    from kvcalc.costs.sglang_pages import sglang_backend, sglang_page

    out = []
    for spec in specs:
        if spec.family not in KNOWN_FAMILIES:  # a hand-written spec's family: it selects the engines' model-file rules
            import difflib

            close = difflib.get_close_matches(spec.family, sorted(KNOWN_FAMILIES), n=1, cutoff=0.75)
            out.append(f"warning: {spec.name}: family {spec.family!r} is none kvcalc knows"
                       + (f" (did you mean {close[0]}?)" if close else "") + "; under --engine a family selects the "
                       "engines' model-file rules (which stages hold the embedding and head, fp32 routers, window "
                       "and state rules), so the plain layout is counted: give the family of the architecture it follows")
        what = None
        if spec.encoder is not None and spec.family != "whisper":
            what = "encoder–decoder model"
        elif any(g.attention.kind == "lightning" for g in spec.layer_groups):
            what = "lightning-attention model (vLLM dropped MiniMax-M1 after 0.23.0)"
        if what is not None:
            out.append(f"warning: {spec.name}: --engine {s.engine}: neither vLLM nor SGLang serves this {what}; its "
                       "pages are counted as the engine's rules would hold them")
        elif s.engine == "sglang" and spec.family in ("falcon", "jamba"):  # no falcon.py or jamba.py in SGLang 0.5.23
            out.append(f"warning: {spec.name}: --engine sglang: SGLang has no model file for {spec.family.capitalize()} "
                       "(its Transformers backend may serve it, unverified); its pages are counted as SGLang's rules "
                       "would hold them")
        elif spec.family == "openelm":
            out.append(f"warning: {spec.name}: --engine {s.engine}: neither vLLM nor SGLang has a model file for "
                       "OpenELM (vLLM may run its remote code through its Transformers backend); its pages are counted "
                       "as the engine's rules would hold them")
        if what is None and (rope := rope_table_bytes(spec, s.engine)) >= ROPE_WARN_BYTES:
            from kvcalc.units import format_bytes

            out.append(f"warning: {spec.name}: --engine {s.engine}: the engine's RoPE cos/sin table, over all "
                       f"{spec.max_context:,} positions (max_position_embeddings) at the rotary width, up to "
                       f"{format_bytes(rope)} a GPU ({'bf16 under vLLM' if s.engine == 'vllm' else 'fp32 under SGLang on CUDA'}), "
                       "is not counted in its weights or memory")
        if s.engine == "vllm" and s.block_size and (raised := _raised_block(spec, s)) is not None:
            out.append(f"warning: {spec.name}: --block-size {s.block_size}: vLLM raises a hybrid model's attention pages "
                       f"to {raised:,} tokens, so that a page holds a layer's constant state "
                       "(Platform.update_block_size_for_backend); its pages are counted at that size")
        if s.engine == "sglang" and s.block_size and (page := sglang_page(spec, s)) != s.block_size:
            backend = sglang_backend(spec, s)
            why = {"dsa": "a DeepSeek Sparse Attention model in 64 tokens whatever the page size asked (its model "
                          "overrides, on CUDA)",
                   "fa4": "it with fa4 on compute capability 10.x, which takes pages of 128 tokens only "
                          "(_fa4_page_constraint)",
                   "triton": "it with Triton on compute capability 10.x, its model override setting pages of 1 "
                             "(model_overrides/qwen3_5.py)"}.get(
                backend, f"it with {backend} on compute capability 10.x, which takes another page size as {page} "
                         "(_mla_backend_page_constraints)")
            out.append(f"warning: {spec.name}: --block-size {s.block_size}: SGLang pages {why}; its pages are counted "
                       f"at {page:,} token{'s' if page != 1 else ''}")
        if s.engine == "sglang" and s.pp > 1 and s.mtp and spec.mtp_layers:  # check_pipeline_parallel_compat
            out.append(f"note: {spec.name}: --engine sglang --pp {s.pp} --mtp: SGLang 0.5.23 serves pipeline "
                       "parallelism with speculative decoding only with SGLANG_ENABLE_PP_SPEC=1 set (without it only as "
                       "a disaggregated prefill node): the figures are for a server started so")
        if s.engine == "sglang" and (lack := _sglang_lacks(s)) is not None:
            out.append(f"warning: {spec.name}: --engine sglang {lack}: SGLang 0.5.23 has no such cache (its "
                       "kv_cache_dtype: auto, fp8_e5m2, fp8_e4m3, mxfp8, bf16, nvfp4, fp4_mx_block16; no per-token, "
                       "per-head or grouped scales): its pages are counted as the dtype and scheme would take them")
        if s.engine == "vllm" and s.kv_quant == "none" and s.kv_dtype in NO_PLAIN_CACHE:
            out.append(f"warning: {spec.name}: --engine vllm --kv-dtype {s.kv_dtype}: vLLM 0.34.0 has no such cache "
                       "(config/cache.py CacheDType: the model's dtype, fp16, bf16, fp8 and its own schemes; its int8 and "
                       "int4 caches carry a scale a token and head: --kv-quant per-head): its pages are counted as the "
                       "plain dtype would take them")
        if s.engine == "vllm" and (lack := _vllm_lacks(spec, s)) is not None:
            out.append(f"warning: {spec.name}: --engine vllm --kv-quant {s.kv_quant}: vLLM 0.34.0 has no such "
                       f"cache{lack} (it has per-tensor fp8, fp8_ds_mla on sparse MLA and per-token-head fp8/int8/int4 on GQA): its "
                       "pages are counted as the scheme would take them")
    return out


def _raised_block(spec: ModelSpec, s: Settings) -> int | None:
    """The page vLLM gives a hybrid model in place of a smaller --block-size, or None where it keeps the one asked."""
    from kvcalc.costs.paged import engine_groups, vllm_hybrid_pages

    hybrid = vllm_hybrid_pages(engine_groups(spec, s), s)
    return hybrid.block if hybrid is not None and hybrid.block != s.block_size else None


# kvcalc's dtypes neither engine holds as a plain cache: no fp64, and int caches only with scales (vLLM's per token
# and head; SGLang's none)
NO_PLAIN_CACHE = frozenset({"int8", "int4", "fp64"})


def _sglang_lacks(s: Settings) -> str | None:
    """The option whose cache SGLang 0.5.23 lacks (arg_groups/fields/model.py kv_cache_dtype's choices: 8-bit float,
    bf16 or the model's dtype, and two FP4 recipes with block scales of their own), or None: an int8 or int4 dtype, or
    a --kv-quant scheme of kvcalc's with per-token, per-head or grouped scales (fp8-ds-mla is its DSA cache)."""
    if s.kv_dtype in NO_PLAIN_CACHE:
        return f"--kv-dtype {s.kv_dtype}"
    if s.kv_quant not in ("none", "fp8-ds-mla"):
        return f"--kv-quant {s.kv_quant}"
    return None


def _vllm_lacks(spec: ModelSpec, s: Settings) -> str | None:
    """Where vLLM 0.34.0 has no cache for the --kv-quant scheme (config/cache.py CacheDType): '' for per-token and
    KIVI's g<G>, which it lacks outright, ' on MLA' for per-head (its {fp8,int8,int4}_per_token_head, Triton backend
    only) on an MLA model, ' for dense MLA' for fp8_ds_mla, which only its sparse backends (DeepSeek-V3.2's) list in
    supported_kv_cache_dtypes on CUDA; None where it has one."""
    if s.kv_quant == "fp8-ds-mla":
        from kvcalc.attention import MLA

        mla = [g.attention for g in spec.groups if isinstance(g.attention, MLA)]
        return " for dense MLA" if mla and not all(a.indexed for a in mla) else None
    if s.kv_quant == "none":
        return None
    if s.kv_quant != "per-head":
        return ""
    return " on MLA" if any(g.attention.kind == "mla" for g in spec.layer_groups) else None


def list_output() -> Output:
    """`list`: every bundled model."""
    from kvcalc.present.columns import LIST_COLUMNS, LIST_KEYS
    from kvcalc.registry import bundled_names, load_model
    from kvcalc.rows import list_rows

    rows = list_rows([load_model(name).spec for name in bundled_names()])
    return Output([Table("list", LIST_COLUMNS, rows, "Bundled models", LIST_KEYS)])


def bounds_note(grid: Sequence[Settings], specs: Sequence[ModelSpec] = (), shortest: int | None = None,
                prefill: bool = True) -> str:
    """The title's words for roofline times: lower bounds, but where 8-bit weights or an fp8 cache run on 8-bit tensor
    cores, which can beat the bf16 peak FLOPs are costed at (README, Roofline time), in any of `grid`'s settings, and
    where a prefill time is shown (`prefill`) whose tokens reach fewer than all of an MoE layer's experts (its traffic
    an upper estimate: cost says so) in some of `grid`'s settings at the `shortest` context (the tokens a rank's
    experts serve follow the layout too)."""
    from kvcalc.costs.traffic import partial_experts
    from kvcalc.dtypes import beyond_bf16_peak

    words = ["lower bounds"]
    if prefill and shortest is not None and any(partial_experts(spec, at.at(shortest)) for at in grid for spec in specs):
        words.append("MoE prefills of few tokens estimates")
    if any(beyond_bf16_peak(at.weights_dtype, at.kv_dtype) for at in grid):
        words.append("compute at the bf16 peak")
    return f"({'; '.join(words)})"

def serving_note(s: Settings, specs: Sequence[ModelSpec] = ()) -> str:
    """The title's words for a quantisation scheme and a paged engine, when asked for: the --block-size asked, and
    beside it the page an engine gives one of `specs` instead (vLLM raises a hybrid's to hold a state, SGLang sets
    DeepSeek Sparse Attention's to 64 and its Blackwell backends theirs, kvcalc.costs.sglang_pages: a warning says
    why)."""
    from kvcalc.costs.cache import cache_plan

    out = f", {s.kv_quant} scales" if s.kv_quant != "none" else ""
    if not s.engine:
        return out
    out += f", {s.engine} pages"
    if not s.block_size:
        return out
    other = {spec.name: block for spec in specs
             if (block := cache_plan(spec, s).block_size) is not None and block != s.block_size}
    if len(specs) == 1 and other:
        return out + f" of {next(iter(other.values())):,} ({s.block_size} asked)"
    given = ", ".join(f"{name}'s {block:,}" for name, block in other.items())
    return out + f" of {s.block_size}" + (f" ({given})" if given else "")


def values_words(grid: Sequence[Settings], name: str) -> str:
    """A setting's value, or the values a sweep takes in braces ('batch {1, 8}', 'tp {1, 2} × pp 1 × dp 1')."""
    values = [f"{v:,}" if isinstance(v, int) else str(v) for v in dict.fromkeys(getattr(at, name) for at in grid)]
    return values[0] if len(values) == 1 else "{" + ", ".join(values) + "}"


def settings_words(specs: Sequence[ModelSpec], grid: Sequence[Settings], prefill: bool = True,
                   no_windows: bool = False, layout: bool = True) -> list[str]:
    """The words for the settings that change a table's figures beyond its dtypes and batch, where they apply (a
    title names them, as cost's does, since no column does): the parallel layout and SGLang's DP attention where
    per-GPU figures are shown (`layout`), attention as dense matrices where a prefill figure is (`prefill`), the MTP
    layers counted (cache and weights), the encoder positions asked (cross-attention's cache), windows ignored. A
    setting a sweep varies is named with all its values."""
    s = grid[0]
    words = []
    if layout and any(at.gpus > 1 or at.ep > 1 for at in grid):
        words.append(f"tp {values_words(grid, 'tp')} × pp {values_words(grid, 'pp')} × dp {values_words(grid, 'dp')}"
                     + (f", ep {values_words(grid, 'ep')}" if any(at.ep > 1 for at in grid) else ""))
    words += ["DP attention"] if layout and s.dp_attention else []
    words += ["attention as dense N×N matrices"] if prefill and s.dense_attn else []
    mtp = [spec for spec in specs if spec.mtp_layers] if s.mtp else []
    if mtp:
        words.append("MTP layers counted, decode steps speculative" if len(mtp) == len(specs) else
                     f"{', '.join(spec.name for spec in mtp)}'s MTP layers counted, its decode steps speculative")
    if s.enc_ctx is not None and any(spec.encoder is not None for spec in specs):
        words.append(f"encoder ctx {s.enc_ctx:,}")
    return words + (["windows ignored"] if no_windows else [])


def settings_note(specs: Sequence[ModelSpec], grid: Sequence[Settings], prefill: bool = True,
                  no_windows: bool = False) -> str:
    """settings_words as a title's tail."""
    return "".join(f", {w}" for w in settings_words(specs, grid, prefill, no_windows))


def state_note(specs: list[ModelSpec], grid: list[Settings], cols: list[Column]) -> str:
    """The title's words for the constant states' dtypes where a state column is shown and a model stores its states
    in other dtypes than the KV cache's (Mamba-2's fp32 SSM state beside a bf16 convolution state: 'fp32+bf16')."""
    return state_words(specs, grid) if any("state" in c.key for c in cols) else ""


def state_words(specs: list[ModelSpec], grid: list[Settings]) -> str:
    """state_note's words, whatever the columns."""
    from kvcalc.costs.cache import cache_plan

    labels: dict[str, dict[str, None]] = {}  # model -> its states' dtypes unlike the cache's
    for spec in specs:
        for at in grid:
            if (plan := cache_plan(spec, at)).state_elements and plan.state_dtype != at.kv_dtype:
                labels.setdefault(spec.name, {})[plan.state_dtype] = None
    if not labels:
        return ""
    if len(specs) == 1:
        return f", states {' or '.join(*labels.values())}"
    return ", states " + "; ".join(f"{name} {' or '.join(d)}" for name, d in labels.items())


def mla_note(specs: list[ModelSpec], s: Settings, decode: bool, cols: list[Column] | None = None) -> str:
    """The title's words for MLA's cache layout (and its decode schedule where decode FLOPs are shown), when a model
    has MLA layers and no column names the layout (the attention column: 'MLA (latent)'): a latent and an expanded
    cache differ about 70× (deepseek-v2 at 128k: 8.44 GiB and 600 GiB), and every other column reads the same."""
    if not any(spec.has_layouts() for spec in specs):
        return ""
    named = cols is not None and any(c.key == "attention_label" for c in cols)
    words = ([] if named else [f"{s.mla_cache} cache"]) + ([f"{s.schedule} decode"] if decode else [])
    return f", MLA {', '.join(words)}" if words else ""


def serving_columns(cols: list[Column], grid: list[Settings], columns: str | None) -> list[Column]:
    """`cols` of a preset (or sweep's default) with, under a parallel layout or an engine, the GPUs, the KV cache per
    GPU and the engine's cache added; column keys named (`columns`) are shown alone (with model and ctx)."""
    from kvcalc.present.columns import PRESETS, choose

    if columns is not None and not all(part.strip().lower() in PRESETS for part in columns.split(",")):
        return cols
    wanted = (["gpus", "kv_cache_bytes_per_gpu"] if any(s.gpus > 1 for s in grid) else []) + \
        (["engine_kv_bytes"] if grid[0].engine else [])
    return cols + [c for key in wanted if key not in [c.key for c in cols] for c in choose(key, False, ())]


def _costs_in_columns(cols: list[Column], chart: str | None) -> bool:
    """Whether a table's columns (or its --chart column) show cost figures."""
    from kvcalc.present.columns import COST_KEYS

    return chart in COST_KEYS or any(c.key in COST_KEYS for c in cols)


# Figures --dense-attn changes: a prefill's FLOPs, its time and the generation that re-runs each prefix (no cache)
DENSE_KEYS = frozenset({"flops_prefill", "prefill_seconds", "flops_generate_uncached"})


def _prefill_in_columns(cols: list[Column], chart: str | None) -> bool:
    """Whether a table's columns (or its --chart column) show the prefill's time."""
    return chart == "prefill_seconds" or any(c.key == "prefill_seconds" for c in cols)


def _dense_in_columns(cols: list[Column], chart: str | None) -> bool:
    """Whether a table's columns (or its --chart column) show a figure --dense-attn changes."""
    return chart in DENSE_KEYS or any(c.key in DENSE_KEYS for c in cols)


# Figures whose value follows MLA's decode schedule (the others that name one, naive and absorbed, say which)
SCHEDULE_KEYS = frozenset({"flops_decode_token", "flops_generate_cached", "decode_intensity", "mla_schedule",
                           "decode_seconds_per_token", "tokens_per_second", "decode_bound"})


def _schedule_in_columns(cols: list[Column], chart: str | None) -> bool:
    """Whether a table's columns (or its --chart column) show a figure that follows MLA's decode schedule, which the
    title then names: not the cache and per-GPU columns a parallel layout adds (a help-text review)."""
    return chart in SCHEDULE_KEYS or any(c.key in SCHEDULE_KEYS for c in cols)


def _costs_shown(cols: list[Column], fmt: str, chart: str | None) -> bool:
    """Whether an output needs the cost figures of its rows: csv and json carry every key; a human format only the
    columns it shows (and the --chart column)."""
    from kvcalc.present.emit import HUMAN, output_format

    return output_format(fmt) not in HUMAN or _costs_in_columns(cols, chart)


def compare_output(loaded: list[LoadedModel], s: Settings, ctxs: list[int], columns: str, explain: bool,
                   hardware: str | None, fmt: str = "json", chart: str | None = None,
                   units: str = "binary") -> Output:
    """`compare`: one row per model and context, with the derivation of each cache when asked (its sizes in `units`,
    as the table's); the cost figures only where `fmt` shows them (`chart`: the --chart column)."""
    from kvcalc.present.columns import JSON_KEYS, choose
    from kvcalc.rows import compare_rows

    cols = serving_columns(choose(columns, hardware is not None), [s], columns)
    specs = [lm.spec for lm in loaded]
    rows, reports = compare_rows(specs, ctxs, s, _costs_shown(cols, fmt, chart))
    origins = [lm for lm in loaded for _ in ctxs]
    for row, lm in zip(rows, origins):
        if lm.windows_removed:  # the rows' spec facts are the model's without its windows: the row says so
            row["no_windows"] = True
    derivations = []
    if explain:  # the derivations' module only when asked (cold start)
        from kvcalc.explain import derivation

        derivations = [derivation(r, lm.origin, lm.config_keys, lm.spec, s.at(r.ctx)) for lm, r in zip(origins, reports)]
    title = (f"KV cache, {s.kv_dtype}, batch {s.batch}" if columns.strip().lower() == "kv" else
             f"Batch {s.batch}, kv {s.kv_dtype}, weights {s.weights_dtype}"
             + (f", {hardware} {bounds_note([s], specs, min(ctxs), _prefill_in_columns(cols, chart))}"
                if hardware else ""))
    title += serving_note(s, specs) + state_note(specs, [s], cols) + mla_note(specs, s, _schedule_in_columns(cols, chart), cols)
    title += settings_note(specs, [s], _dense_in_columns(cols, chart), any(lm.windows_removed for lm in loaded))
    payload = [{**row, "derivation": d} for row, d in zip(only(rows, JSON_KEYS), derivations)] if explain else None
    lines = _derivation_lines(derivations, units)
    table = Table("compare", cols, rows, title, JSON_KEYS, hint=COLUMNS_HINT)
    return Output([table], payload, lines, _load_warnings(loaded) + _ctx_warnings(specs, ctxs)
                  + _gen_warnings(specs, ctxs, [s.gen], cols) + option_warnings(specs, s) + _prefill_notes(specs, ctxs, [s], {c.key for c in cols}))


# the figures that count a prefill's FLOPs (the time: at its roofline)
PREFILL_KEYS = frozenset({"flops_prefill", "prefill_seconds"})


def _prefill_notes(specs: list[ModelSpec], ctxs: list[int], grid: list[Settings], keys: set[str],
                   longest: bool = False) -> list[str]:
    """latent_prefill_notes, where a prefill figure is among the `keys` shown: for each model at each context of `ctxs`
    and settings of `grid`, each distinct note once; `longest`: only at the longest context that has one, with how
    many more do (a sweep's, a plot's: a note a model and setting, not one a row)."""
    from kvcalc.costs.flops import prefill_total

    if not PREFILL_KEYS & keys:
        return []
    out = []
    for s in grid:
        for spec in specs:
            # the contexts with a note: some engine attends some queries absorbed (its text and totals built after)
            noted = [ctx for ctx in ctxs if any(r != () for r in latent_ranges(spec, s.at(ctx)).values())]
            for ctx in ([max(noted)] if longest and noted else noted):
                lines = latent_prefill_notes(spec, s.at(ctx), prefill_total(spec, s.at(ctx)))
                more = len(noted) - 1 if longest else 0
                out += lines[:-1] + [lines[-1] + (f" (so too at {more:,} more of its {len(ctxs):,} contexts)" if more else "")]
    return list(dict.fromkeys(out))


def _derivation_lines(derivations: list[dict], units: str) -> list[str]:
    """The text of each derivation in `units`, a blank line after each (none: no import of kvcalc.explain)."""
    if not derivations:
        return []
    from kvcalc.explain import derivation_lines

    return [line for d in derivations for line in derivation_lines(d, units) + [""]]


# What tells a sweep's rows apart when a setting takes several values: its key in the rows (tp: the GPUs it uses).
VARIED_KEYS = {"batch": "batch", "gen": "gen", "kv_dtype": "kv_dtype", "tp": "gpus"}


def sweep_output(loaded: list[LoadedModel], grid: list[Settings], ctxs: list[int], columns: str | None,
                 hardware: str | None, fmt: str = "json", chart: str | None = None, varied: tuple[str, ...] = ()) -> Output:
    """`sweep`: one row per setting of `grid` (the combinations of the `varied` settings' values), model and context
    over a range, computed as csv and json write them (the cost figures only where `fmt` shows them)."""
    from kvcalc.figures import figures
    from kvcalc.present.columns import IDENTITY, JSON_KEYS, choose
    from kvcalc.present.emit import to_terminal
    from kvcalc.progress import progress_rows
    from kvcalc.rows import iter_compare_rows

    specs = [lm.spec for lm in loaded]
    default = "model,ctx,kv_cache_bytes,flops_prefill,flops_decode_token,decode_bytes_read"
    default += ",flops_decode_token_naive,flops_decode_token_absorbed" if any(sp.has_schedules() for sp in specs) else ""
    default += ",decode_seconds_per_token,tokens_per_second" if hardware else ""
    keys = tuple(VARIED_KEYS[name] for name in varied)
    cols = serving_columns(choose(default if columns is None else columns, hardware is not None, IDENTITY[:1] + keys + IDENTITY[1:]), grid, columns)
    costs = _costs_shown(cols, fmt, chart)
    if costs:
        for s in grid:  # what fails for a model fails at its first row: here, before any row is written
            for spec in specs:
                figures(spec, s.at(ctxs[0]))
    rows = (row for s in grid for row, _ in iter_compare_rows(specs, ctxs, s, costs))
    s = grid[0]
    title = (f"Growth with context, batch {values_words(grid, 'batch')}, kv {values_words(grid, 'kv_dtype')}, "
             f"weights {s.weights_dtype}")
    title += serving_note(s, specs) + state_note(specs, grid, cols) + mla_note(specs, s, _schedule_in_columns(cols, chart), cols)
    title += settings_note(specs, grid, _dense_in_columns(cols, chart))
    title += f", {hardware} {bounds_note(grid, specs, min(ctxs), _prefill_in_columns(cols, chart))}" if hardware else ""
    return Output([Table("sweep", cols, progress_rows(rows, len(grid) * len(specs) * len(ctxs), to_terminal()), title, JSON_KEYS,
                         hint=COLUMNS_HINT)],
                  warnings=_load_warnings(loaded) + _ctx_warnings(specs, ctxs)
                  + _gen_warnings(specs, ctxs, [at.gen for at in grid], cols) + option_warnings(specs, s, grid)
                  # at the sweep's longest context, a note a model and setting (not one a row)
                  + _prefill_notes(specs, ctxs, grid, {c.key for c in cols}, longest=True))


def show_output(lm: LoadedModel, s: Settings, per_layer: bool, explain: bool, units: str) -> Output:
    """`show`: the spec and its cache, then the cache by layer group (or layer)."""
    from kvcalc.costs.cache import kv_cache
    from kvcalc.costs.parallel import check_layout
    from kvcalc.explain import derivation, derivation_lines
    from kvcalc.present.columns import GROUP_COLUMNS, GROUP_KEYS, PAGE_COLUMNS, STATE_COLUMN
    from kvcalc.present.summary import SUMMARY_COLUMNS, SUMMARY_KEYS, summary_rows
    from kvcalc.rows import group_rows

    spec = lm.spec
    check_layout(spec, s)  # as compare's rows do: a layout or flag that does not apply is refused, not passed over
    report = kv_cache(spec, s)
    breakdown = group_rows(report, per_layer)
    summary = summary_rows(lm, report, units, s)
    d = derivation(report, lm.origin, lm.config_keys, spec, s) if explain else {}
    payload: dict[str, Any] = {
        "model": spec.name, "origin": lm.origin, "exceeds_max_context": s.ctx > spec.max_context,
        "spec": spec.model_dump(exclude_none=True), "summary": {r["key"]: r["value"] for r in summary},
        "layers" if per_layer else "groups": breakdown}
    if lm.windows_removed:  # the spec above is the model's without its windows (a key only then: json keeps its keys)
        payload["no_windows"] = True
    if explain:
        payload["derivation"] = d
    title = (f"KV cache by {'layer' if per_layer else 'layer group'} at ctx {s.ctx:,}, batch {s.batch}, {s.kv_dtype}"
             + serving_note(s, [spec]) + settings_note([spec], [s], False, lm.windows_removed))
    chunked = any(g.layer.chunk for g in spec.groups)  # the Chunk column only where some layer has one
    crossed = spec.encoder is not None  # the Encoder positions column only where a layer has cross-attention
    columns = [c for c in GROUP_COLUMNS if (chunked or c.key != "attention_chunk_size")
               and (crossed or c.key != "cross_tokens_held")]
    columns += [STATE_COLUMN] if report.state_elements else []
    columns += PAGE_COLUMNS if s.engine else []
    title += state_note([spec], [s], columns)
    over = {"exceeds_max_context": payload["exceeds_max_context"]}  # csv's flag on every group row (stderr says it)
    tables = [Table("summary", SUMMARY_COLUMNS, summary, f"{spec.name} ({lm.origin})", SUMMARY_KEYS),
              Table("layers" if per_layer else "groups", columns, [{**r, **over} for r in breakdown], title,
                    (["layer"] if per_layer else []) + [k for k in GROUP_KEYS if k != "layer"] + list(over))]
    return Output(tables, payload, derivation_lines(d, units) if explain else [],
                  _load_warnings([lm]) + over_max(spec, s.ctx, f"ctx {s.ctx:,}") + option_warnings([spec], s)
                  + (_rounded_cells(spec.name, breakdown, s.kv_dtype) if s.kv_quant == "none" else [])
                  + _unshown_weights(s))


def _unshown_weights(s: Settings) -> list[str]:
    """show lists weights only per GPU, under a layout of more than one (per_gpu_items): --weights-dtype on one GPU
    changes nothing it shows, said rather than passed over (cost and fit list the weights always)."""
    if s.gpus > 1 or s.weights_dtype == "bf16":
        return []
    return [f"warning: --weights-dtype {s.weights_dtype}: show lists the weights only per GPU under --tp, --pp or --dp "
            "(cost and fit list them always), so the option changes nothing here"]


def _rounded_cells(name: str, rows: list[dict], kv_dtype: str) -> list[str]:
    """A note where a sub-byte dtype packs a layer's elements a token into a part byte: show's per token·layer and per
    layer cells are rounded up, while a group's and the model's totals round once (README: conventions), so the
    cells do not multiply out to the totals."""
    from fractions import Fraction

    from kvcalc.dtypes import dtype_bits

    bits = dtype_bits(kv_dtype)
    odd = next((r for r in rows if r.get("elements_per_token_per_layer", 0) * bits % 8), None)
    if odd is None:
        return []
    exact = Fraction(odd["elements_per_token_per_layer"] * bits, 8)
    return [f"note: {name}: in {kv_dtype} a layer's {odd['elements_per_token_per_layer']:,} elements a token take "
            f"{float(exact):g} bytes: the per token·layer and per-layer cells are rounded up to whole bytes, each "
            "group's total and the model's once"]


PASS_TITLES = {
    "prefill": "Prefill\n(ctx tokens)", "decode_token": "Decode step\n(at ctx)", "generate_cached": "Generate\n(cache)",
    "generate_uncached": "Generate\n(no cache)", "decode_token_naive": "Decode step\nnaive", "decode_token_absorbed":
    "Decode step\nabsorbed", "generate_cached_naive": "Generate (cache)\nnaive", "generate_cached_absorbed":
    "Generate (cache)\nabsorbed",
}


def cost_output(lm: LoadedModel, s: Settings, units: str) -> Output:
    """`cost`: FLOPs by component of each pass, then parameters, memory, traffic and times."""
    from kvcalc.costs.cache import kv_cache
    from kvcalc.costs.flops import crossover_holds
    from kvcalc.costs.parallel import check_layout
    from kvcalc.costs.traffic import partial_experts
    from kvcalc.figures import cost_breakdowns, figures
    from kvcalc.present.summary import SUMMARY_COLUMNS, SUMMARY_KEYS, cost_summary_rows, engine_items, per_gpu_items

    spec = lm.spec
    check_layout(spec, s)  # before any figure: a setting that does not apply is refused by its own rule
    passes = cost_breakdowns(spec, s)
    cache = kv_cache(spec, s)
    summary = cost_summary_rows(figures(spec, s, cache), cache.bytes, units, cache.state_bytes,
                                per_gpu_items(spec, s, cache, units, engine_too=True), crossover_holds(spec),
                                engine_items(cache, units), partial_experts(spec, s),
                                s.engine if s.engine in ("vllm", "sglang") else None, s.kv_dtype,
                                s.mtp and spec.mtp_layers > 0, -(-s.batch // s.dp))
    components = list(dict.fromkeys(k for p in passes.values() for k in p))
    rows = [{"component": c, **{p: passes[p].get(c, 0) for p in passes}} for c in components]
    rows.append({"component": "total", **{p: sum(passes[p].values()) for p in passes}})
    cols = [Column("component", "Component")] + [Column(p, PASS_TITLES[p], "flops") for p in passes]
    payload = {"model": spec.name, "ctx": s.ctx, "gen": s.gen, "batch": s.batch,
               "flops": {p: {**b, "total": sum(b.values())} for p, b in passes.items()},
               "summary": {r["key"]: r["value"] for r in summary}, "exceeds_max_context": s.ctx + s.gen > spec.max_context,
               **cost_settings(spec, s, cache.plan)}
    title = (f"{spec.name}: FLOPs, prompt {s.ctx:,} tokens, {s.gen:,} generated, batch {s.batch}" + mla_note([spec], s, False)
             + (", attention as dense N×N matrices" if s.dense_attn else "")
             + (f", its {spec.mtp_layers} MTP layer{'s' if spec.mtp_layers != 1 else ''} run: a decode step verifies "
                f"{1 + spec.mtp_layers} tokens a sequence" if s.mtp and spec.mtp_layers else ""))
    warnings = _load_warnings([lm]) + over_max(spec, s.ctx + s.gen,
                                               f"the prompt of {s.ctx:,} plus {s.gen:,} generated tokens ({s.ctx + s.gen:,})")
    warnings += option_warnings([spec], s) + latent_prefill_notes(spec, s, sum(passes["prefill"].values()))
    over = {"exceeds_max_context": payload["exceeds_max_context"]}  # csv's flag on every FLOPs row (stderr says it)
    flops = Table("flops", cols, [{**r, **over} for r in rows], title, [c.key for c in cols] + list(over))
    return Output([flops, Table("summary", SUMMARY_COLUMNS, summary, "Memory, traffic and time" + summary_note(spec, s),
                                SUMMARY_KEYS)], payload, warnings=warnings)


def cost_settings(spec: ModelSpec, s: Settings, plan: CachePlan) -> dict[str, Any]:
    """The settings cost's figures assume, for its json (after its own keys): the dtypes and scheme, the layout and
    engine, and where they apply the MLA cache and decode schedule, the engine's page (as it pages this model), the
    states' dtype, the encoder positions and the hardware (left out where they do not)."""
    applies = {**plan.applied(), "mla_schedule": s.schedule if spec.has_schedules() else None, "engine": s.engine,
               "hardware": s.hardware.name if s.hardware is not None else None}
    return {"kv_dtype": s.kv_dtype, "kv_quant": s.kv_quant, "weights_dtype": s.weights_dtype, "tp": s.tp, "pp": s.pp,
            "dp": s.dp, "ep": s.ep, "dp_attention": s.dp_attention, "mtp": s.mtp, "dense_attn": s.dense_attn,
            **{k: v for k, v in applies.items() if v is not None}}


def summary_note(spec: ModelSpec, s: Settings) -> str:
    """The words of cost's summary title for the settings its figures depend on (its FLOPs table's title names the
    prompt, the generated tokens and the batch): dtypes, a scheme's scales, an engine's pages, the states' dtypes,
    MLA's cache and decode schedule, the roofline's bounds."""
    hardware = f", {s.hardware.name} {bounds_note([s], [spec], s.ctx)}" if s.hardware is not None else ""
    return (f": kv {s.kv_dtype}, weights {s.weights_dtype}" + serving_note(s, [spec]) + hardware + state_words([spec], [s])
            + mla_note([spec], s, True))


def latent_prefill_notes(spec: ModelSpec, s: Settings, counted: int) -> list[str]:
    """The note beside an MLA model's prefill (`counted` FLOPs, per head) where an engine attends some or all of its
    queries in the latent space, the absorbed form, and that prefill's total (README, MLA schedules): under --engine
    that engine's, else for DeepSeek Sparse Attention both engines' (kvcalc.costs.prefill_form.absorbed_ranges says
    which queries; none under --dense-attn, whose count is a convention of its own)."""
    from kvcalc.costs.flops import prefill_total
    from kvcalc.units import format_flops

    topk = spec.sparse_topk()
    ranges = latent_ranges(spec, s)
    engines = list(ranges)
    absorbing = [e for e in engines if ranges[e] != ()]
    if not absorbing:
        return []
    names = {"vllm": "vLLM", "sglang": "SGLang"}
    kind = "DeepSeek Sparse Attention" if topk is not None else "MLA"

    def excess(n: int) -> int:  # what attending the first n queries absorbed adds to the per-head count
        return prefill_total(spec, s.at(n), schedule="absorbed") - prefill_total(spec, s.at(n)) if n else 0

    whole = ((0, s.ctx),)
    if len(absorbing) == 2 and ranges["vllm"] == ranges["sglang"] == whole:  # one total, both engines
        both = prefill_total(spec, s, schedule="absorbed")
        return [f"note: {spec.name} at {s.ctx:,} tokens: vLLM and SGLang attend this {kind} prefill in the absorbed "
                f"form, in the latent space: {format_flops(both)} ({both:,} FLOPs), not the per-head form's "
                f"{format_flops(counted)} counted here ({_latent_why(spec, s, 'vllm')}; {_latent_why(spec, s, 'sglang')})"]
    out = []
    for e in absorbing:
        r = ranges[e]
        flops: int | None
        if r == whole:
            flops = prefill_total(spec, s, schedule="absorbed")
            what = f"{names[e]} attends this {kind} prefill in the absorbed form, in the latent space"
        elif r is not None:
            flops = counted + sum(excess(b) - excess(a) for a, b in r)
            spans = ", ".join(f"{a + 1:,}-{b:,}" for a, b in r)
            what = (f"{names[e]} attends queries {spans} of each prompt in the absorbed form, in the latent space, "
                    "the others per head")
        else:
            flops = None
            what = (f"{names[e]} attends some of this batch's prefill forwards in the absorbed form, in the latent "
                    "space, the others per head")
        total = f"{format_flops(flops)} ({flops:,} FLOPs)" if flops is not None else "more FLOPs"
        others = [names[x] for x in engines if x != e and ranges[x] == ()]
        tail = f"; {' and '.join(others)} attends it per head, as counted" if others else ""
        out.append(f"note: {spec.name} at {s.ctx:,} tokens: {what}: {total}, not the per-head form's "
                   f"{format_flops(counted)} counted here ({_latent_why(spec, s, e)}){tail}")
    return out


def latent_ranges(spec: ModelSpec, s: Settings) -> dict[str, tuple[tuple[int, int], ...] | None]:
    """The engines a prefill note speaks for (under --engine its own; else both for DeepSeek Sparse Attention; none
    under --dense-attn or without MLA schedules), each with the queries it attends absorbed
    (kvcalc.costs.prefill_form.absorbed_ranges)."""
    from kvcalc.costs.prefill_form import absorbed_ranges

    if s.dense_attn or not spec.has_schedules():
        return {}
    topk = spec.sparse_topk()
    engines = [s.engine] if s.engine in ("vllm", "sglang") else (["vllm", "sglang"] if topk is not None else [])
    return {e: absorbed_ranges(spec, s, e) for e in engines}


def _latent_why(spec: ModelSpec, s: Settings, engine: str) -> str:
    """Why `engine` attends an MLA prefill in the latent space: its rules as they stand on the settings' GPU
    (kvcalc.costs.prefill_form.absorbed_ranges), for the note."""
    from kvcalc.costs.prefill_form import SGLANG_MLA_CAPTURE, sglang_forwards, sglang_graphs, sglang_mla_backend

    topk = spec.sparse_topk()
    if engine == "vllm":
        return (f"vLLM past its dense MHA prefill of at most top-k {topk:,} tokens, but for the masked MHA it runs on "
                "Blackwell with a bf16 cache, per head up to 32,768 tokens by tp and chunk, not followed here")
    if spec.family == "minicpm3":
        return "SGLang's MiniCPM3 file keeps no kv_b_proj"
    chunk, _ = sglang_forwards(s)
    rules = [f"SGLang cuts a scheduler's prompts into forwards of {chunk:,} tokens"]
    if sglang_graphs(spec, s):
        rules.append(f"attends one of 2 to {SGLANG_MLA_CAPTURE:,} tokens absorbed inside its breakable prefill CUDA "
                     "graph")
    backend = sglang_mla_backend(spec, s)
    eager = {"dsa": f"a DSA forward per head while its keys end within top-k {topk or 0:,}, on a Hopper, Blackwell "
                    "or MI355X GPU with a bf16 or fp8 cache, else absorbed",
             "triton": "its Triton backend per head at a prefix of 0, else absorbed",
             "fa3": "its fa3 backend per head at a prefix of 0 or of 8,192 and more, else absorbed",
             "flashinfer": "its flashinfer backend per head at a prefix of 0 or of 8,192 and more, else absorbed"}
    if backend in eager:
        rules.append(("and eagerly " if len(rules) > 1 else "eagerly ") + eager[backend])
    if s.hardware is None:
        rules.append("as on an 80 GiB Hopper GPU, assumed without --hardware")
    return ", ".join(rules)


def run_output(report: RunReport, lm: LoadedModel | None = None) -> Output:
    """`run`: predicted against measured, then the numerical checks; warnings for what loading the model `lm` said,
    a context past its trained maximum (csv and json: `exceeds_max_context`), an option the model has nothing for
    (as the other commands warn), and a whole-model cache or state left unmeasured."""
    from kvcalc.backend.report import CHECK_COLUMNS, CHECK_KEYS, RESULT_COLUMNS, check_rows, report_payload, result_rows

    s = report.settings
    title = (f"{report.model}: layers {', '.join(map(str, report.layers))}, ctx {s.ctx:,} + {s.decode} decode "
             f"step{'' if s.decode == 1 else 's'}, batch {s.batch}, {s.dtype}")
    warnings = [] if lm is None else _load_warnings([lm])
    if lm is not None:
        total = s.ctx + s.decode
        warnings += over_max(lm.spec, total, f"ctx {s.ctx:,} + {s.decode:,} decode step{'' if s.decode == 1 else 's'} ({total:,})")
        warnings += _nothing_warnings(lm.spec.name, nothing_for(lm.spec, mla=mla_options(s.mla_cache, s.mla_schedule),
                                                                enc_ctx=s.enc_ctx is not None))
    unmeasured = [what for what, row in (("cache", "KV cache, all "), ("constant state", "constant state, all "))
                  if any(r.quantity.startswith(row) and r.measured is None for r in report.rows)]
    if unmeasured:
        warnings.append(f"warning: {report.model}: the layers run ({', '.join(map(str, report.layers))}) leave a layer "
                        f"group out, so the whole model's {' and '.join(unmeasured)} {'is' if len(unmeasured) == 1 else 'are'} "
                        "predicted, not measured: a larger --layers runs a layer of each group")
    return Output([Table("results", RESULT_COLUMNS, result_rows(report), title,
                         ["section", "quantity", "predicted", "measured", "match", "exceeds_max_context"]),
                   Table("checks", CHECK_COLUMNS, check_rows(report), "Numerical checks", CHECK_KEYS)],
                  report_payload(report), warnings=warnings)


def fit_output(lm: LoadedModel, opts: Any, ctxs: list[int] | None, gpus: int | None, reserve: Fraction | None,
               chunk: int | None, units: str = "binary") -> Output:
    """`fit`: one row per context (largest batch), or one row (longest context for the batch)."""
    from dataclasses import replace

    from kvcalc.costs.engine_memory import (
        SGLANG_TOWERS,
        TOWER_FAMILIES,
        default_prefill_chunk,
        default_reserve,
        vllm_extensible,
        with_tower,
    )
    from kvcalc.costs.paged import lookahead
    from kvcalc.errors import KvcalcError
    from kvcalc.fields import as_row, figures_of
    from kvcalc.fit import FitRow, admitted_length, fit

    s = opts.settings(ctxs[0] if ctxs else 1)
    if ctxs and s.batch != 1:
        raise KvcalcError(f"--batch {s.batch} with --ctx: fit solves for the largest batch at each context; give "
                          "--batch without --ctx for the longest context at that batch")
    if gpus is not None and gpus != s.gpus:
        if s.gpus != 1:
            raise KvcalcError(f"--gpus {gpus} differs from --tp {s.tp} × --pp {s.pp} × --dp {s.dp} = {s.gpus}")
        s = replace(s, tp=gpus)  # within LIMITS["tp"]: the command line checks --gpus alone
    assert s.hardware is not None  # the command line requires --hardware
    explicit_chunk = chunk is not None
    chunk = chunk or default_prefill_chunk(s.engine, s.hardware)
    spec = lm.spec
    frac = reserve if reserve is not None else default_reserve(spec, s, s.hardware, chunk)
    try:
        rows = [as_row(fit(spec, s.at(c), s.hardware, frac, chunk, "batch")) for c in ctxs] if ctxs else \
            [as_row(fit(spec, s, s.hardware, frac, chunk, "ctx"))]
    except KvcalcError as exc:  # a layout from --gpus alone: named as the user wrote it, not as --tp
        if gpus is None or opts.settings(1).gpus != 1 or not str(exc).startswith(f"--tp {gpus}:"):
            raise
        raise KvcalcError(f"--gpus {gpus} (tensor parallelism over {gpus}; --tp, --pp and --dp give another layout):"
                          + str(exc)[len(f"--tp {gpus}:"):]) from None
    warnings = _fit_notes(spec, s, rows, ctxs, frac, chunk, units)
    if s.engine == "sglang" and reserve is not None and explicit_chunk:
        warnings.append(f"note: {spec.name}: --prefill-chunk under --engine sglang only sets SGLang's default static "
                        "fraction, which --reserve replaces: it changes nothing here")
    if s.engine == "vllm" and reserve is None and vllm_extensible(s.hardware):
        warnings.append(f"note: {spec.name}: vLLM sizes its cache from the memory it measures free after warmup (its "
                        "extensible KV cache, the default on NVIDIA and AMD GPUs): what it finds taken beyond the "
                        "weights and the activation estimate (the GPU runtime's context, CUDA or HIP graphs, "
                        "communication buffers) and the runtime's total below the preset's memory are not counted "
                        "here; a --reserve (1 − vLLM's "
                        "gpu_memory_utilization) past the margin leaves more")
    if s.engine == "sglang" and reserve is None:
        warnings.append(f"note: {spec.name}: SGLang divides the memory the device reports (its total for the static "
                        "fraction, the memory free once its runtime has started for the pools), a little below the "
                        "preset's, not counted here (README: Hardware presets): the answer is an upper bound by it; a "
                        "--reserve (1 − its --mem-fraction-static) leaves more")
    # vLLM refuses to start where one request of max_model_len does not fit (_check_enough_kv_cache_memory); its
    # admission bound is kvcalc's cache for full attention alone: a window or chunk adds the tokens in flight
    # (max_admission_blocks_per_request) and a state layer a checkpoint page (kvcalc.costs.engine_memory.vllm_admitted)
    plain = all(g.layer.span is None and g.cross is None for g in spec.groups) and not spec.has_states()
    served = spec.served_context or spec.max_context  # vLLM's default max_model_len
    if s.engine == "vllm" and not plain and (admitted := admitted_length(spec, s, s.hardware, frac, chunk)) is not None \
            and admitted < served:
        extra = [(words, source) for has, words, source in (
            (any(g.layer.window for g in spec.groups), "its windows' prefill tokens in flight",
             "max_admission_blocks_per_request"),
            (any(g.layer.chunk for g in spec.groups), "its chunks' prefill tokens in flight",
             "max_admission_blocks_per_request"),
            (any(g.cross is not None for g in spec.groups), "a prefill chunk of encoder input for its cross-attention",
             "CrossAttentionSpec"),
            (spec.has_states(), "its states' blocks", "MambaSpec.max_memory_usage_bytes")) if has]
        sources = ", ".join(dict.fromkeys(source for _, source in extra))
        what = (f"one request's blocks ({' and '.join(words for words, _ in extra)} included: {sources}) do not fit "
                "its pool")
        warnings.append(f"note: {spec.name}: vLLM with its default max_model_len, the model's {served:,} tokens, "
                        f"refuses to start here: {what}" + (f" (at most {admitted:,} tokens do: give vLLM "
                                                            f"--max-model-len {admitted} or less)" if admitted else
                                                            " at any length"))
    if s.engine == "vllm" and plain:
        one = rows[0] if not ctxs and s.batch == 1 else as_row(fit(spec, replace(s, batch=1), s.hardware, frac, chunk,
                                                                     "ctx"))
        # its check counts cdiv(max_model_len, B) pages, without the slots a --mtp step allocates ahead, which stop
        # at max_model_len (kvcalc.costs.paged.lookahead_limit): the sequence that fits plus those slots is admitted
        admitted = one["max_ctx"] + lookahead(spec.mtp_layers, s)
        if 0 < one["max_ctx"] and admitted < served:
            warnings.append(f"note: {spec.name}: vLLM with its default max_model_len, the model's {served:,} "
                            "tokens, refuses to start here: one sequence of that length does not fit its pool (at "
                            f"most {admitted:,} tokens do: give vLLM --max-model-len {admitted} or less)")
    if s.engine == "vllm" and spec.served_context is not None and spec.served_context < spec.max_context:
        warnings.append(f"note: {spec.name}: vLLM serves it at {spec.served_context:,} tokens by default (LongRoPE: "
                        "original_max_position_embeddings); contexts past that need its --max-model-len "
                        f"(up to max_context, {spec.max_context:,})")
    if s.engine == "sglang" and reserve is None and with_tower(spec, SGLANG_TOWERS):
        warnings.append(f"note: {spec.name}: SGLang serves its published checkpoint as multimodal: it trims the static "
                        "fraction for the vision or audio tower (adjust_mem_fraction_for_vlm) and loads the tower's "
                        "weights, neither counted here (a text model's fraction is used; the memory it keeps for its "
                        "embedding or feature cache is: 100 MiB, Qwen3-VL's 1 GiB on a Hopper of 60 GiB or more): "
                        "give --reserve to match")
    elif s.engine in ("vllm", "sglang") and reserve is None and with_tower(spec, TOWER_FAMILIES):
        engine = {"vllm": "vLLM", "sglang": "SGLang"}[s.engine]
        warnings.append(f"note: {spec.name}: {engine} loads the vision tower of the family's multimodal checkpoints "
                        "(Gemma 3 of 4B and more, Llama 4, Gemma 4, Gemma 3n, Qwen3-VL, Qwen3.5, Mistral 3), whose "
                        "weights the "
                        "text spec leaves out: give --reserve to match")
    figs = figures_of(FitRow)
    hide = ({"max_ctx", "batch"} if ctxs else {"max_batch", "ctx"}) | {"exceeds_max_context"}  # stderr says it
    hide |= {"state_bytes_per_gpu"}  # in the KV cache column already (csv and json carry it apart)
    hide |= {"kv_dtype", "kv_quant", "weights_dtype", "engine", "tp", "pp", "dp", "ep", "dp_attention", "mtp", "reserve",
             "prefill_chunk", "mla_cache", "block_size", "state_dtype", "enc_ctx"}  # the settings: the title says them
    cols = [Column.of(f) for f in figs if f.key not in hide and f.key not in ("model", "hardware", "memory_bytes")]
    cols = [Column.of(figs[0])] + cols
    states = ""
    if any(row.get("state_bytes_per_gpu") is not None for row in rows):  # a hybrid: its states are in that column
        cols = [Column(c.key, "KV + states\nper GPU", c.kind) if c.key == "kv_cache_bytes_per_gpu" else c for c in cols]
        states = state_note([spec], [s], [Column("state_bytes_per_gpu", "", "bytes")])
    from kvcalc.costs.parallel import stages
    from kvcalc.units import format_bytes

    held = {p.held_back for p in stages(spec, s)}  # vLLM's null block: no column shows it, so the title says it
    dp_attention = ", DP attention" if s.dp_attention else ""
    title = (f"{spec.name} on {s.gpus}× {opts.hardware_name} (tp {s.tp}, pp {s.pp}, dp {s.dp}{dp_attention}), weights "
             f"{s.weights_dtype}, kv {s.kv_dtype}{serving_note(s, [spec])}{states}{mla_note([spec], s, False)}"
             + (f" ({'up to ' if len(held) > 1 else ''}{format_bytes(max(held), units)} a GPU held back: the pool's "
                "null block)" if max(held) else "")
             + _reserve_note(s, frac, rows[0]["activation_bytes"], units))
    keys = [f.key for f in figs]
    return Output([Table("fit", cols, rows, title, keys)],
                  warnings=_load_warnings([lm]) + (_ctx_warnings([spec], ctxs) if ctxs else []) + option_warnings([spec], s) + warnings)


def _reserve_note(s: Settings, frac: Fraction, acts: int, units: str) -> str:
    """What fit's title says it keeps out of each GPU: the reserved fraction, or under --engine vllm with its
    extensible KV cache the margin that cache keeps free, where it is the larger (engine_memory.budget_bytes)."""
    from kvcalc.costs.engine_memory import budget_bytes, vllm_margin, vllm_requested
    from kvcalc.units import format_bytes

    assert s.hardware is not None  # fit's settings carry the hardware
    margin = vllm_margin(s.hardware, acts) if s.engine == "vllm" else 0
    if margin and budget_bytes(s.hardware, frac, s.engine, acts) < vllm_requested(s.hardware, frac):
        larger = f" (more than the {_percent(frac)}% reserved)" if frac else ""
        return f", vLLM's margin of {format_bytes(margin, units)} kept free{larger}"
    return f", {_percent(frac)}% reserved"


def _fit_notes(spec: ModelSpec, s: Settings, rows: list[dict], ctxs: list[int] | None, frac: Fraction, chunk: int,
               units: str) -> list[str]:
    """What fit's rows cannot say: a window's fall that one sequence more meets below --ctx, the SGLang pool that
    binds, that nothing fits, and an engine's default cap on sequences below --batch."""
    from kvcalc.costs.engine_memory import (
        SGLANG_MAMBA_FULL_MEMORY_RATIO,
        SGLANG_SWA_FULL_TOKENS_RATIO,
        sglang_context_len,
    )
    from kvcalc.costs.paged import state_slots
    from kvcalc.fit import batch_cap, binding_context, request_table, sglang_longest_request, sglang_pool_binding
    from kvcalc.units import format_bytes

    assert s.hardware is not None  # fit's settings carry the hardware
    warnings: list[str] = []
    for row in rows if ctxs else []:
        # the figures are at --ctx; say where one more sequence fails when that is a context below it
        if row["binding"] == "memory" and (x := binding_context(spec, s.at(row["ctx"]), s.hardware, frac, chunk,
                                                                row["max_batch"])) is not None:
            more = row["max_batch"] + 1
            warnings.append(f"note: {spec.name}: {more:,} {'sequence fits' if more == 1 else 'sequences fit'} at "
                            f"{row['ctx']:,} tokens but not at {x:,}, which they pass through: a window's pages rise "
                            "and fall by one as the context grows, and fit counts every context up to --ctx")
    refusals: set[str] = set()
    for row in rows:  # under SGLang 'memory' is one of its static pools: say which, as free bytes can remain
        pool = sglang_pool_binding(spec, s.at(row["ctx"]) if ctxs else s, s.hardware, frac, chunk,
                                   "batch" if ctxs else "ctx", row["max_batch" if ctxs else "max_ctx"]) \
            if row["binding"] == "memory" else None
        if pool is not None and pool[2]:  # SGLang refuses to start at all: every setting alike
            refusals.add(_sglang_refusal_words(spec, s, *pool[:2]))
            continue
        if pool is not None:
            what, sizes, _ = pool
            slots = sizes.slots if sizes is not None else None
            at = f"at {row['ctx']:,} tokens" if ctxs else f"at batch {row['batch']:,}"
            per = state_slots(spec.family, s)
            each = "one a sequence" if per == 1 else \
                f"{per} a sequence (its own and the extra buffer's {per - 1} tracking slot{'s' if per > 2 else ''})"
            words = {"state": f"its state pool: {slots:,} slots (r/(1 + r) of the room after weights and activations, "
                              f"r = --mamba-full-memory-ratio {float(SGLANG_MAMBA_FULL_MEMORY_RATIO):g}), {each}"
                              if slots else "its state pool",
                     "swa": f"its sliding-window pool (--swa-full-tokens-ratio {float(SGLANG_SWA_FULL_TOKENS_RATIO):g} of "
                            "the full pool's tokens)",
                     "kv": f"its token pool (the state pool keeps {slots:,} slots)" if slots else "its token pool"}[what]
            warnings.append(f"note: {spec.name}: {at} SGLang's limit is {words}; the budget left per GPU is what the "
                            "other pools keep")
    warnings += [f"warning: {spec.name}: nothing fits: SGLang refuses to start: {words}" for words in sorted(refusals)]
    kept = s.hardware.memory_bytes * frac  # what SGLang keeps outside its static fraction: activations and graphs
    if (table := request_table(spec, s, s.hardware, frac, chunk)) is not None and table > kept:
        warnings.append(f"warning: {spec.name}: SGLang's request table (req_to_token: max_running_requests + 1 rows of "
                        f"its context_len, {sglang_context_len(spec):,} tokens, in int32) takes {format_bytes(table, units)} a "
                        f"GPU beside its static pools, more than the {format_bytes(int(kept), units)} its static "
                        "fraction leaves for it, activations and graphs: SGLang 0.5.23 runs out of memory at start-up "
                        "unless started with a smaller --context-length or --max-running-requests (the figures assume "
                        "its defaults)")
    if not ctxs and rows and rows[0]["max_ctx"] and (longest := sglang_longest_request(spec, s, s.hardware, frac, chunk)) \
            is not None and rows[0]["max_ctx"] > longest:  # SGLang's own cap on a request, a few tokens below
        warnings.append(f"note: {spec.name}: SGLang serves a request of at most {longest:,} tokens, prompt and output "
                        "(max_req_len: min(context_len, its pool's tokens) − 1, the output stopping a token before "
                        "it, and a page more below the pool's end)")
    if rows and all(row["max_batch" if ctxs else "max_ctx"] == 0 for row in rows) and rows[0]["binding"] == "weights":
        # the weights alone against the budget (the row's Left takes the activations and a token's cache off too)
        short = max(row["weights_bytes_per_gpu"] - (row["memory_bytes"] - row["reserved_bytes"]) // row["gpus"]
                    for row in rows)
        margin = ", or under --engine vllm a smaller --prefill-chunk, whose activations set its margin" \
            if s.engine == "vllm" else ""
        warnings.append(f"warning: {spec.name}: nothing fits: the weights leave the busiest GPU {format_bytes(short, units)}"
                        " over its budget (more GPUs or pipeline stages, a smaller --weights-dtype, or a smaller "
                        f"--reserve{margin})")
    if not ctxs and (cap := batch_cap(spec, s, s.hardware, frac, chunk)) is not None and s.batch > cap[0]:
        states = s.engine == "sglang" and spec.has_states() and cap[1] == "max_running_requests"
        flag = {"pp_max_micro_batch_size": " (--pp-max-micro-batch-size: its pp micro-batches of "
                                           "max(max_running_requests // pp, 1) sequences)"}.get(cap[1], "")
        warnings.append(f"warning: --batch {s.batch:,}: {s.engine} runs at most {cap[0]:,} "
                        f"sequence{'s' if cap[0] != 1 else ''} at once by default "
                        f"({cap[1]}); the rest wait, or raise it{flag}" + (
                            " (with states only up to its state slots over the slots it reserves a request, which a "
                            "larger state pool raises: --mamba-full-memory-ratio, --max-mamba-cache-size)" if states else ""))
    return warnings


def _sglang_refusal_words(spec: ModelSpec, s: Settings, what: str, sizes: SGLangCapacity | None) -> str:
    """Why SGLang's start-up refuses the pools fit found (kvcalc.costs.engine_memory.sglang_refusal), in words."""
    from kvcalc.costs.engine_memory import mamba_ratio
    from kvcalc.costs.paged import sglang_window, state_slots
    from kvcalc.costs.sglang_pages import sglang_page

    if what == "swa" and sizes is not None and sizes.swa_tokens is not None:
        return (f"its sliding-window pool of {sizes.swa_tokens:,} tokens would not hold one request's window and a "
                f"page ({sglang_window(spec):,} + {sglang_page(spec, s):,} tokens: validate_swa_pool_size); more memory, "
                "a smaller --reserve or a larger --swa-full-tokens-ratio")
    ratio = mamba_ratio(state_slots(spec.family, s))
    if sizes is None or sizes.slots is None:  # not one slot: _handle_max_mamba_cache raises before any request cap
        return ("its state pool's share of the memory holds not one sequence's states (_handle_max_mamba_cache: not "
                "enough memory for the state cache); more memory or a smaller --reserve")
    held = f"{sizes.slots:,} slot{'s' if sizes.slots != 1 else ''}"
    return (f"its state pool holds {held}, fewer than the {ratio} it reserves a request (resolve_max_num_reqs: "
            f"max_mamba_cache_size // {ratio} = 0 requests); more memory or a smaller --reserve")


def _percent(frac: Fraction) -> str:
    """A fraction as a percentage: exact where 3 significant digits hold it, trailing zeros dropped (10, 12.5, 0.5),
    else 3 significant digits, half to even (33.3)."""
    from fractions import Fraction

    from kvcalc.units import format_number

    text = format_number(frac * 100)
    if Fraction(text.replace(",", "")) == frac * 100 and "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def import_spec(config: Path, output: Path | None, name: str | None, force: bool = False) -> None:
    """`import`: a config.json as a YAML spec, on stdout or written to `output` (warnings and 'wrote' on stderr)."""
    import typer

    from kvcalc.errors import KvcalcError
    from kvcalc.export import spec_yaml
    from kvcalc.present.emit import warn
    from kvcalc.registry import check_name, load_path

    if name is not None:
        check_name(name)  # before reading anything
    if output is not None and str(output) == "-":  # stdout, as for every table command
        output = None
    if output is not None and output.exists() and output.resolve() == config.resolve():
        raise KvcalcError(f"--output {output}: that is the config being imported; write the spec elsewhere")
    if output is not None and output.suffix.lower() == ".json":  # kvcalc would read it back as a config.json
        raise KvcalcError(f"--output {output}: the spec is YAML; name the file .yaml or .yml")
    if output is not None and output.is_dir():
        raise KvcalcError(f"--output {output}: a folder; give the spec's file name (e.g. {output / 'spec.yaml'})")
    if output is not None and output.is_file():  # a device or FIFO (/dev/null, /dev/stdout) is no file to keep
        if not force:
            raise KvcalcError(f"--output {output}: the file exists; add --force to overwrite it")
    lm = load_path(config, config_only=True)
    for message in lm.warnings:
        warn(message)
    text = spec_yaml(lm.spec, name)
    if output is None:
        typer.echo(text, nl=False)
        return
    from kvcalc.present.outfile import whole_file

    try:
        with whole_file(output) as path:
            path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise KvcalcError(f"{output}: cannot write: {exc.strerror or exc}") from None
    warn(f"wrote {output}")


def hardware_output() -> Output:
    """`hardware`: the bundled presets."""
    from kvcalc.fields import figures_of
    from kvcalc.hardware import HardwareRow, bundled_hardware, hardware_rows, load_hardware

    rows = hardware_rows([load_hardware(name) for name in bundled_hardware()])
    figs = figures_of(HardwareRow)
    wide = ("source", "description", "notes")  # URLs and prose: in csv and json, too wide for a table
    cols = [Column.of(f) for f in figs if f.key not in wide]
    return Output([Table("hardware", cols, rows, "Hardware presets (peak figures, as each preset's source states them "
                         "or its notes say; csv and json carry the part, the notes and the sources)",
                         [f.key for f in figs])])


def dims_output(loaded: list[LoadedModel], kinds: tuple[str, ...]) -> Output:
    """`table dims`: weight shapes, absorbed products, cache and decode FLOPs by attention kind (and per model)."""
    from kvcalc.errors import KvcalcError
    from kvcalc.fields import figures_of
    from kvcalc.tables import DimsRow, dims_rows

    names = [lm.spec.name for lm in loaded]
    if (twice := first_repeat(names)) is not None:  # its columns are keyed by name
        raise KvcalcError(f"table dims: two models are named {twice!r}, whose columns would be one: give one another "
                          "name (its spec's `name:`)")
    own = [f.key for f in figures_of(DimsRow)]
    if clash := next((name for name in names if name in own), None):  # a model's column would overwrite the table's
        raise KvcalcError(f"table dims: a model is named {clash!r}, as the table's own column {clash!r} is, whose "
                          f"cells it would overwrite: give it another name (its spec's `name:`; not {', '.join(own)})")
    rows, models = dims_rows([lm.spec for lm in loaded], kinds)
    columns = [Column.of(f) for f in figures_of(DimsRow)] + [Column(c.key, c.header, "formula") for c in models]
    # shapes in × out, as the code multiplies row vectors (h·W); DeepSeek-V2 §2.1 writes W h, out × in
    title = "Weights (in × out), cache and decode FLOPs by attention kind" + (f": {', '.join(names)}" if names else "")
    return Output([Table("dims", columns, rows, title)], warnings=_load_warnings(loaded) + _other_kinds(loaded))


def _other_kinds(loaded: list[LoadedModel]) -> list[str]:
    """Notes of a model's layers of kinds table dims has no rows for, said rather than dropped in silence."""
    from kvcalc.attention import kind_label
    from kvcalc.tables import KINDS

    notes = []
    for lm in loaded:
        other = sorted({kind_label(g.attention.kind) for g in lm.spec.groups if g.attention.kind not in KINDS
                        and g.attention.kind != "none"})
        if other:
            notes.append(f"note: {lm.spec.name}: its {', '.join(other)} layers are not in this table (it lists "
                         f"{', '.join(k.upper() for k in KINDS)} layers; show gives every group)")
    return notes


def models_output(loaded: list[LoadedModel], s: Settings) -> Output:
    """`table models`: the papers' side-by-side of models."""
    from kvcalc.fields import figures_of
    from kvcalc.tables import ModelsRow, models_rows

    rows = models_rows([lm.spec for lm in loaded], s)
    figs = figures_of(ModelsRow)
    # a context past a model's maximum: stderr says it, and so does a column, since a pasted paper table leaves stderr
    # behind (a review: the default table put Llama 3 70B, trained to 8k, at 128k unmarked); none when no row passes
    over = any(row.get("exceeds_max_context") for row in rows)
    columns = [Column.of(f) for f in figs if over or f.key != "exceeds_max_context"]
    title = f"Models side by side: cache at ctx {s.ctx:,}, {s.kv_dtype}"
    warnings = _load_warnings(loaded) + _ctx_warnings([lm.spec for lm in loaded], [s.ctx])
    return Output([Table("models", columns, rows, title, [f.key for f in figs])], warnings=warnings)


def with_chart(out: Output, key: str, fmt: str, units: str) -> Output:
    """`out` with a terminal bar chart of column `key` of its first table, one bar per row (`--chart`)."""
    from dataclasses import replace

    from kvcalc.errors import KvcalcError
    from kvcalc.present.chart import bar_chart
    from kvcalc.present.columns import CATALOG

    if fmt not in ("table", "markdown"):
        raise KvcalcError(f"--chart draws in the table and markdown formats, not {fmt}")
    column = CATALOG.get(key)
    if column is None or not column.numeric or column.kind == "num":  # "num": a right-aligned label (4/8), no number
        numeric = sorted(k for k, c in CATALOG.items() if c.numeric and c.kind != "num")
        raise KvcalcError(f"--chart {key!r}: choose a numeric column key ({', '.join(numeric)})")
    from kvcalc.units import format_tokens

    rows = out.tables[0].collect()
    if rows and all(row.get(key) is None for row in rows):  # as --columns refuses them: nothing to draw
        from kvcalc.present.columns import HARDWARE_KEYS

        need = " needs --hardware NAME (see 'kvcalc hardware')" if key in HARDWARE_KEYS else ": no row has this figure"
        raise KvcalcError(f"--chart {key}{need}")
    # a sweep's settings that vary across its rows, named in each label
    varying = [(name, key) for name, key in VARIED_KEYS.items() if len({row.get(key) for row in rows}) > 1]
    texts = [f"{row['model']} @ {format_tokens(row['ctx'])}"
             + "".join(f", {VARIED_LABELS[name](row[key])}" for name, key in varying) for row in rows]
    return replace(out, chart=bar_chart(rows, column, texts, units))


# How a bar's label names each setting of VARIED_KEYS, from its key's value in the row.
VARIED_LABELS: dict[str, Callable[[Any], str]] = {
    "batch": lambda v: f"batch {v:,}", "gen": lambda v: f"gen {v:,}", "kv_dtype": lambda v: f"kv {v}",
    "tp": lambda gpus: f"{gpus:,} GPU{'s' if gpus != 1 else ''}"}


def paper_tables(loaded: list[LoadedModel], s: Settings) -> tuple[dict[str, str], list[str]]:
    """`paper`: the dims and models tables as files (name -> text), in LaTeX (a table each), markdown and csv, and the
    warnings for the command to print (a context past a model's trained maximum, as `compare` says)."""
    from kvcalc.present.emit import Destination, render_text
    from kvcalc.tables import KINDS

    out: dict[str, str] = {}
    warnings: list[str] = []
    captions = {"dims": "Weights (in × out), cache per token and decode attention FLOPs by attention kind",
                "models": f"Models side by side, KV cache at {s.ctx:,} tokens ({s.kv_dtype})"}
    for name, output in (("dims", dims_output(loaded, KINDS)), ("models", models_output(loaded, s))):
        warnings += [w for w in output.warnings if w not in warnings]
        output = Output(output.tables)  # warnings are the command's, not the files'
        out[f"{name}.tex"] = render_text(output, "latex", "binary", Destination(captions[name], f"tab:kvcalc-{name}"))
        out[f"{name}.md"] = render_text(output, "markdown", "binary")
        out[f"{name}.csv"] = render_text(output, "csv", "binary")
    return out, warnings


PAPER_README_HEAD = "# kvcalc paper bundle"  # how a bundle's README starts: a folder holding one is rewritten in place
PAPER_FIGURE_CTX = (1024, 1024**2)  # the contexts the bundle's figures span: 1k to 1M, every doubling


def paper_figure_notes(specs: list[ModelSpec]) -> list[str]:
    """What `paper` says of its figures' range: the models it plots past their trained maximum (one note, not one
    warning a context, as the figures are drawn over a fixed range)."""
    hi = PAPER_FIGURE_CTX[1]
    past = [f"{spec.name} ({spec.max_context:,})" for spec in specs if spec.max_context < hi]
    if not past:
        return []
    return [f"note: the figures run to {hi:,} tokens, past the trained maximum of {', '.join(past)}: computed anyway"]


def paper_readme(files: dict[str, str], command: str, version: str, kv_dtype: str = "bf16") -> str:
    """The README of a `paper` bundle: each file, and the command and kvcalc version that made them."""
    from kvcalc.units import format_tokens

    lo, hi = (format_tokens(n) for n in PAPER_FIGURE_CTX)
    span = f"against context, {lo} to {hi} tokens, one sequence"
    what = {
        "dims": "the dimensions table: weight shapes, MLA's absorbed products, cache per token, decode FLOPs",
        "models": "the models table: hidden size, heads, KV heads or latent, head dim, layers, parameters, cache",
        "cache": f"figure: KV cache ({kv_dtype}) {span}", "flops-decode": f"figure: decode FLOPs per step {span}",
    }
    lines = [PAPER_README_HEAD, "", f"Made by kvcalc {version} with:", "", "```sh", command, "```", "",
             "Run the same command to regenerate every file (tables are byte-identical).", "", "| File | What |",
             "|---|---|"]
    for name in files:
        stem, ext = name.rsplit(".", 1)
        lines.append(f"| `{name}` | {what.get(stem, stem)} ({ext}) |")
    figures = any(name.endswith(".pdf") for name in files)
    lines += ["", "The .tex files need `\\usepackage{booktabs,array,graphicx}` (their first line says so; graphicx scales a "
              "table wider than the line down to it)"
              + ("; the figures, graphicx too, for `\\includegraphics{cache.pdf}`." if figures else ".")]
    return "\n".join(lines) + "\n"


APPROX_SHOWN = ("method", "params", "scale", "flops", "flops_ratio", "decode_state_bytes", "rel_error_output",
                "rel_error_matrix", "captured_mass", "recall_at_k")  # the table's columns; csv and json carry every key
SPECTRUM_SHOWN = ("matrix", "scale", "s_1", "rank_90", "rank_99", "rank_999")


def _shown(cls: type, keys: tuple[str, ...]) -> list[Column]:
    """The columns of `cls`'s figures named in `keys`, in field order."""
    from kvcalc.fields import figures_of

    return [Column.of(f) for f in figures_of(cls) if f.key in keys]


def approx_output(rows: list[dict], n: int, d: int, data: str, causal: bool, spectrum: list[dict] | None) -> Output:
    """`approx`: cost and measured error of each method and scale (and, with --spectrum, the singular values)."""
    from kvcalc.approx.evaluate import DATA, ApproxRow, SpectrumRow
    from kvcalc.fields import figures_of

    n, d, d_v, seeds = (rows[0]["n"], rows[0]["d"], rows[0]["d_v"], rows[0]["seeds"]) if rows else (n, d, d, 1)
    mode = "causal" if causal else "non-causal"
    title = (f"Approximate attention against exact ({mode}), one head, n {n:,}, d {d}, d_v {d_v}, data {data}: FLOPs "
             f"and decode state (bf16) per head and sequence; errors are means over {seeds} seed{'s' if seeds != 1 else ''}")
    keys = [f.key for f in figures_of(ApproxRow)]
    tables = [Table("approx", _shown(ApproxRow, APPROX_SHOWN), rows, title, keys)]
    payload: Any = [{k: r[k] for k in keys} for r in rows]
    if spectrum is not None:
        tables.append(Table("spectrum", _shown(SpectrumRow, SPECTRUM_SHOWN), spectrum,
                            f"Singular values ({mode}{'; the scores QKᵀ unmasked' if causal else ''}"
                            f"{'; data seed 0' if data in DATA else ''}): "
                            "rank for 90/99/99.9% of the energy"))
        payload = {"methods": payload, "spectrum": spectrum}
    return Output(tables, payload)


def transmla_output(loaded: list[LoadedModel], ctx: int) -> Output:
    """`approx --transmla`: each GQA model's cache before and after TransMLA's conversion to a 512 + 64 latent."""
    from kvcalc.approx.analytic import TransmlaRow, transmla_row
    from kvcalc.fields import figures_of

    rows = [transmla_row(lm.spec, ctx) for lm in loaded]
    columns = [Column.of(f) for f in figures_of(TransmlaRow) if f.key != "exceeds_max_context"]  # stderr says it
    title = "TransMLA: a GQA model's cache as a 512 + 64 latent (bf16, one sequence, every layer converted)"
    specs = [lm.spec for lm in loaded]
    keys = [f.key for f in figures_of(TransmlaRow)]
    return Output([Table("transmla", columns, rows, title, keys)],
                  warnings=_load_warnings(loaded) + _ctx_warnings(specs, [ctx]))
