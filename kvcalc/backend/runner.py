"""`kvcalc run`: build layers at a model's real dims, run prefill and cached decoding, and measure against the analytic model.

Measured: FLOPs from the products executed, cache shapes and bytes from the arrays held, wall time.
Predicted: kvcalc's analytic cache and FLOP model for the same layers and settings. A run passes when every pair
matches exactly and every numerical check is within its dtype's tolerance.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from kvcalc.attention import MLA, AttentionKind, Heads, Layer, Work
from kvcalc.attention.recurrent import Recurrent
from kvcalc.backend import checks
from kvcalc.backend.attention import NOT_RUN, Cache, LatentAttention, layer_entry, with_cross
from kvcalc.backend.memory import Request, guard, query_block, return_freed_memory, tightest
from kvcalc.backend.ops import FlopCounter
from kvcalc.backend.parallel import attention_part, mixer_group, parts, state_part, with_parallel
from kvcalc.backend.recurrent import state_checks
from kvcalc.backend.stack import stack_decode, stack_prefill
from kvcalc.backend.threads import available_cores, one_blas_thread, threads_used, usable_workers
from kvcalc.costs.cache import kv_cache
from kvcalc.costs.flops import _cross as cross_flops
from kvcalc.costs.flops import decode_work, layer_attention_flops, prefill_work
from kvcalc.errors import KvcalcError
from kvcalc.settings import Settings, resolve_schedule
from kvcalc.spec import ModelSpec, ResolvedGroup
from kvcalc.units import format_bytes

DTYPES = {"float32": (np.float32, "fp32"), "float16": (np.float16, "fp16"), "float64": (np.float64, "fp64")}
# Relative error allowed between computations that are equal in exact arithmetic (max |a - b| / max |b|).
TOLERANCE = {"float64": 1e-10, "float32": 1e-4, "float16": 2e-2}


@dataclass(frozen=True)
class RunSettings:
    """What `kvcalc run` was asked for; layers None means one layer of each layer group."""

    ctx: int = 128
    decode: int = 4
    batch: int = 1
    layers: int | None = None
    dtype: str = "float32"
    mla_cache: str = "latent"
    mla_schedule: str | None = None
    seed: int = 0
    max_memory: int | None = None
    rope_demo: bool = False
    threads: int | None = None  # prefill attention threads; None: every core this process may use
    enc_ctx: int | None = None  # encoder positions cross-attention layers attend; None: the model's source_len

    @property
    def workers(self) -> int:
        """Prefill threads the run uses: those asked for (or every core), if the BLAS thread count can be set."""
        return usable_workers(self.threads or available_cores())

    @property
    def schedule(self) -> str:
        return resolve_schedule(self.mla_cache, self.mla_schedule)


@dataclass(frozen=True)
class Row:
    """One line of the report: a quantity, its predicted and measured values, and whether they match."""

    section: str
    quantity: str
    predicted: object
    measured: object
    kind: str = "int"  # int | shape | bytes | flops | seconds | rate
    # False only where there is nothing to compare: a timing (no prediction), or a whole-model total while a layer
    # group was not run (no measurement). Elsewhere a missing side is a mismatch: a predicted tensor the run does
    # not hold, or a held tensor nothing predicts.
    compared: bool = True

    @property
    def match(self) -> bool | None:
        if not self.compared:
            return None
        return self.predicted is not None and self.measured is not None and self.predicted == self.measured


@dataclass
class RunReport:
    """Everything a run found: comparison rows, numerical checks, timings and the memory plan."""

    model: str
    settings: RunSettings
    layers: list[int]
    rows: list[Row] = field(default_factory=list)
    checks: list[checks.Check] = field(default_factory=list)
    predicted_peak_bytes: int = 0
    exceeds_max_context: bool = False  # ctx + decode steps pass the model's trained maximum (run anyway)

    @property
    def ok(self) -> bool:
        return all(r.match is not False for r in self.rows) and all(c.passed for c in self.checks)

    @property
    def mismatches(self) -> list[Row]:
        return [r for r in self.rows if r.match is False]


def _runs(group: ResolvedGroup) -> bool:
    """Whether a run builds this group's layers: not the kinds NOT_RUN names (the generic 'linear' state of a size
    without structure, a projection that holds nothing), nor KV-shared ones (Gemma 3n's last layers: they hold nothing
    and read an earlier layer's cache, which the backend does not model). Mamba, DeltaNet, KDA and lightning layers
    run."""
    return group.attention.kind not in NOT_RUN and not group.layer.kv_shared


def layer_order(spec: ModelSpec) -> list[int]:
    """Layers in the order a run takes them: the first layer of each group, then the rest in model order."""
    runs = [g for g in spec.groups if _runs(g)]
    firsts = [g.layers[0] for g in runs]
    return firsts + [i for g in runs for i in g.layers if i not in firsts]


def build_layer(group: ResolvedGroup, rng, s: RunSettings, rope: str = "decoupled"):
    """A NumPy layer with random weights at the group's real dims (beside its parallel mixer and with its
    cross-attention block, if any)."""
    dtype = DTYPES[s.dtype][0]

    def build(g: ResolvedGroup):
        return layer_entry(g.attention.kind)[0](g, rng, dtype, s.mla_cache, query_block(g.sliding_window), rope, s.workers)

    return with_cross(group, with_parallel(group, build(group), build), rng, dtype)


def encoder_tokens(spec: ModelSpec, s: RunSettings) -> int:
    """Encoder positions the cross-attention layers attend: --enc-ctx, else the model's source_len (0: no encoder)."""
    return Settings(ctx=1, enc_ctx=s.enc_ctx).encoder_tokens(spec.encoder.source_len if spec.encoder else None)


class _Quiet:
    def start(self, name: str, total: int) -> None: ...
    def advance(self, name: str) -> None: ...


def _rotated(att: AttentionKind, layer: Layer) -> tuple[str, int] | None:
    """The field and width of the dimension the backend applies RoPE to in a layer of `att`: MHA/GQA/MQA's head_dim
    (GroupedQueryAttention rotates whole heads), MLA's decoupled qk_rope_head_dim; None for kinds without RoPE."""
    if isinstance(att, MLA):
        return "qk_rope_head_dim", att.qk_rope_head_dim
    if isinstance(att, Heads):
        return "head_dim", att.d_h(layer)
    return None


def run(spec: ModelSpec, s: RunSettings, progress=None) -> RunReport:
    """Run the attention layers of `spec` for real and compare everything measurable with the analytic model."""
    progress = progress or _Quiet()
    if s.dtype not in DTYPES:
        raise KvcalcError(f"unsupported dtype {s.dtype!r}: choose float32, float16 or float64")
    for g in spec.groups:
        if _runs(g):  # a kind without a NumPy layer fails before anything is allocated
            layer_entry(g.attention.kind)
            if g.parallel is not None:
                layer_entry(g.parallel.kind)
            for att, layer in ((g.attention, g.layer), (g.parallel, g.parallel_layer)):
                if att is not None and (rotated := _rotated(att, layer)) is not None and rotated[1] % 2:
                    raise KvcalcError(f"kvcalc run: {spec.name}: layer group {g.label!r} has {rotated[0]} "
                                      f"{rotated[1]}, an odd dimension, which the NumPy backend's RoPE does not run (it "
                                      "rotates pairs of channels); the analytic figures (show, compare) count it")
            if g.layer.chunk and g.attention.kind == "mla":  # LatentAttention has no chunk mask
                raise KvcalcError(f"kvcalc run: {spec.name}: layer group {g.label!r} is MLA with chunked attention "
                                  f"(attention_chunk_size {g.layer.chunk}), which the NumPy backend does not run; "
                                  "the analytic figures (show, compare) count it")
    order = layer_order(spec)
    if not order:
        kept = "; ".join(f"{g.label!r} is " + ("KV-shared" if g.layer.kv_shared else g.attention.kind) for g in spec.groups)
        raise KvcalcError(f"kvcalc run: {spec.name}: no layer the NumPy backend runs ({kept}: it runs neither "
                          f"{' nor '.join(NOT_RUN)} layers, nor KV-shared ones); the analytic figures (show, compare) "
                          "count them")
    n_layers = s.layers or len([g for g in spec.groups if _runs(g)])
    if n_layers > len(order):
        raise KvcalcError(f"--layers {n_layers}: {spec.name} has only {len(order)} attention layers")
    itemsize = np.dtype(DTYPES[s.dtype][0]).itemsize
    room = tightest(s.max_memory)
    enc = encoder_tokens(spec, s)
    mem = guard(spec, order, Request(s.ctx, s.decode, s.batch, n_layers), itemsize, s.mla_cache,
                room.bytes if room else 1 << 62, s.workers, enc, room.source if room else "")
    return_freed_memory()  # so the RSS follows what the run holds, which is what the plan bounds
    try:
        return _execute(spec, s, order, n_layers, enc, mem.peak, progress)
    except MemoryError:  # NumPy's _ArrayMemoryError among them: the plan was right but the system gave less
        raise KvcalcError(f"ran out of memory: the allocator refused although the plan ({format_bytes(mem.peak)}) "
                          f"was within {room.source if room else 'the known limits'}; try a smaller --ctx, --batch or "
                          f"--layers, or --max-memory below what is free") from None
    except RuntimeError as e:
        if "thread" not in str(e):
            raise
        raise KvcalcError(f"could not start the prefill threads ({e}): try --threads 1") from None


def _execute(spec: ModelSpec, s: RunSettings, order: list[int], n_layers: int, enc: int, peak: int,
             progress) -> RunReport:
    """The run itself, once the guard has let it through."""
    schedule = s.schedule
    by_layer = {i: g for g in spec.groups for i in g.layers}
    ids = sorted(order[:n_layers])
    rng = np.random.default_rng(s.seed)
    dtype = DTYPES[s.dtype][0]
    layers = [build_layer(by_layer[i], rng, s) for i in ids]
    x0 = rng.standard_normal((s.batch, s.ctx + s.decode, spec.d_model)).astype(dtype)
    if enc:  # the encoder is not run: a random output of its enc_ctx positions stands in for it
        memory = rng.standard_normal((s.batch, enc, spec.d_model)).astype(dtype)
        for layer in layers:
            layer.memory = memory

    report = RunReport(spec.name, s, ids, predicted_peak_bytes=peak,
                       exceeds_max_context=s.ctx + s.decode > spec.max_context)
    for layer in layers:  # DeepSeek Sparse Attention: every query's top-k, which the recompute checks follow
        if s.decode and isinstance(att := attention_part(layer), LatentAttention) and att.index:
            att.chosen = {}
    fc = FlopCounter()
    progress.start("prefill", sum(layer.prefill_blocks(s.batch, s.ctx) for layer in layers))
    for layer in layers:
        layer.on_block = lambda: progress.advance("prefill")
    t0 = time.perf_counter()
    with threads_used() as threads:
        caches = stack_prefill(fc, layers, x0[:, : s.ctx])[1]  # the output is not kept: memory
    prefill_seconds = time.perf_counter() - t0
    for layer in layers:
        layer.on_block = None  # the checks' recomputations are not part of the run
    prefill_flops = Counter(fc.by_component)
    after_prefill = list(caches)

    progress.start("decode", s.decode)
    fc_dec, outputs, history = FlopCounter(), [], []
    t0 = time.perf_counter()
    # a decode step's products are matrix-vector ones, bound by memory: a multithreaded BLAS only adds its threads'
    # hand-offs, and with the arrays mmapped (return_freed_memory) their page-table work: llama3-70b's layer took
    # 0.6-0.85 s a step on 2 BLAS threads of a busy 2-core machine, 60-70 ms on one (benchmarks/run_decode.py)
    with one_blas_thread():
        for j in range(s.decode):
            out, caches = stack_decode(fc_dec, layers, caches, x0[:, s.ctx + j : s.ctx + j + 1], schedule)
            outputs.append(out)
            history.append([_held(c) for c in caches])
            progress.advance("decode")
    decode_seconds = time.perf_counter() - t0

    _compare(report, spec, s, ids, by_layer, after_prefill, caches, history, prefill_flops, Counter(fc_dec.by_component), schedule)
    del caches  # measured: the checks below recompute from the prefill's caches, one set of their own at most
    _timing_rows(report, prefill_flops, fc_dec.by_component, prefill_seconds, decode_seconds, s.decode, threads[0])
    if s.decode:
        report.checks += checks.run_checks(spec, s, layers, x0, outputs, after_prefill, schedule, TOLERANCE[s.dtype])
    if s.rope_demo or any(by_layer[i].attention.schedules for i in ids):
        report.checks += checks.rope_demo(spec, s, TOLERANCE[s.dtype])
    report.checks += [checks.gqa_equals_mha(s, TOLERANCE[s.dtype])]
    report.checks += checks.heads_variant_checks(spec, s, TOLERANCE[s.dtype])
    # each constant-state layer's own check, a parallel layer's mixer among them
    states = {i: mixer_group(g) if g.parallel is not None else g for i, g in by_layer.items()}
    report.checks += state_checks([state_part(layer) for layer in layers], ids, states, s.batch, s.ctx, s.decode, s.seed,
                                  TOLERANCE[s.dtype])
    return report


def _held(cache: Cache) -> tuple[int, int]:
    """Bytes a layer's cache holds: its attention's (or a constant-state layer's state), and its parallel mixer's."""
    own, mixer = parts(cache)
    return own.nbytes, mixer.nbytes


def _compare(report, spec, s, ids, by_layer, after_prefill, final, history, prefill_measured, decode_measured, schedule):
    total = s.ctx + s.decode
    enc = encoder_tokens(spec, s)
    at = Settings(ctx=s.ctx, batch=s.batch, kv_dtype=DTYPES[s.dtype][1], mla_cache=s.mla_cache, enc_ctx=enc or None)
    for n, (layer, cache, last) in enumerate(zip(ids, after_prefill, final)):
        group = by_layer[layer]
        if isinstance(group.attention, Recurrent):  # a constant state instead of a KV cache
            _state_rows(report, spec, s, layer, group, cache, last, [sizes[n][0] for sizes in history])
            continue
        _kv_rows(report, spec, s, at, layer, group, parts(cache)[0], parts(last)[0], [sizes[n][0] for sizes in history])
        if group.parallel is not None:  # the mixer's state beside the KV cache (Falcon-H1)
            _state_rows(report, spec, s, layer, mixer_group(group), parts(cache)[1], parts(last)[1],
                        [sizes[n][1] for sizes in history], "mixer/")
    measured_total = _scaled_total(spec, ids, by_layer, final)
    report.rows.append(Row("cache", f"KV cache, all {spec.n_layers} layers, at ctx {total:,} (= kvcalc compare)",
                           kv_cache(spec, at.at(total)).bytes, measured_total, "bytes",
                           compared=measured_total is not None))  # None: a group with a cache was not run
    _state_total_row(report, spec, s, ids, by_layer, final)
    prefill_pred: Counter[str] = Counter()
    decode_pred: Counter[str] = Counter()
    for layer in ids:
        group = by_layer[layer]
        prefill_pred.update(layer_attention_flops(group, prefill_work(group, s.ctx), "naive"))
        prefill_pred.update(cross_flops(group, s.ctx, enc, 1, "naive"))  # K/V of the encoder output, once
        for t in range(s.ctx + 1, total + 1):
            decode_pred.update(layer_attention_flops(group, decode_work(group, t, s.mla_cache), schedule))
            decode_pred.update(cross_flops(group, 1, enc, 0, schedule))
        if group.parallel is not None:  # the mixer beside the attention: the same tokens, no keys (costs.flops.forward)
            mixer = mixer_group(group)
            prefill_pred.update(layer_attention_flops(mixer, Work(s.ctx, 0, 0), "naive"))
            decode_pred.update({k: s.decode * v for k, v in layer_attention_flops(mixer, Work(1, 0, 0), schedule).items()})
    for label, pred, got in (("prefill", prefill_pred, prefill_measured), (f"{s.decode} decode step{'' if s.decode == 1 else 's'}", decode_pred, decode_measured)):
        for comp in sorted(set(pred) | set(got)):
            report.rows.append(Row("flops", f"{label} {comp}", s.batch * pred.get(comp, 0), got.get(comp, 0), "flops"))
        report.rows.append(Row("flops", f"{label} total", s.batch * sum(pred.values()), sum(got.values()), "flops"))


def _kv_rows(report, spec, s, at: Settings, layer, group, cache, last, sizes):
    """An attention layer's KV cache (a parallel mixer's state left out): its tensors' shapes (the kind's
    `cache_shapes`, and the cross-attention's) after the prefill and at the end, and its bytes after the prefill and
    after every decode step (kvcalc's bytes per layer at that many tokens)."""
    enc = at.enc_ctx or 0

    def per_layer_bytes(tokens):
        return kv_cache(spec, at.at(tokens)).groups[group.index].bytes_per_layer

    for when, c, tokens in (("after prefill", cache, s.ctx), ("at the end", last, s.ctx + s.decode)):
        held = group.attention.tokens_held(group.layer, tokens)
        shapes = dict(group.attention.cache_shapes(group.layer, s.batch, held, s.mla_cache))
        if group.cross is not None:  # the encoder positions' K/V, the same at every step
            shapes.update({f"cross/{name}": shape for name, shape in
                           group.cross.cache_shapes(group.cross_layer, s.batch, enc, s.mla_cache).items()})
        _shape_rows(report, "cache", f"layer {layer} ", when, shapes, c)
    report.rows.append(Row("cache", f"layer {layer} bytes after prefill", per_layer_bytes(s.ctx), cache.nbytes, "bytes"))
    for j, size in enumerate(sizes):
        report.rows.append(Row("cache", f"layer {layer} bytes after decode step {j + 1}", per_layer_bytes(s.ctx + j + 1),
                               size, "bytes"))


def _shape_rows(report, section: str, label: str, when: str, shapes: dict, c: Cache) -> None:
    """A row per tensor predicted (its shape, or None if the cache lacks it) and per tensor held that nothing
    predicts (predicted None): both of the latter are mismatches."""
    for name in [*shapes, *(n for n in c.tensors if n not in shapes)]:
        got = tuple(c.tensors[name].shape) if name in c.tensors else None
        report.rows.append(Row(section, f"{label}{name} shape {when}", shapes.get(name), got, "shape"))


def _scaled_total(spec, ids, by_layer, final: list[Cache]) -> int | None:
    """Measured bytes of one run layer per group, times that group's layer count (None if a group was not run)."""
    measured: dict[int, int] = {}
    for layer, cache in zip(ids, final):
        measured.setdefault(by_layer[layer].index, parts(cache)[0].nbytes)  # a parallel mixer's state apart
    total = 0
    for g in spec.groups:
        if isinstance(g.attention, Recurrent) or g.layer.kv_shared:  # no KV cache of its own (states: apart)
            continue
        if g.index not in measured:
            return None
        total += measured[g.index] * len(g.layers)
    return total


def _state_settings(s: RunSettings, tokens: int) -> Settings:
    """kvcalc's settings for the run's states: stored at the run's dtype (--state-dtype)."""
    dtype = DTYPES[s.dtype][1]
    return Settings(ctx=tokens, batch=s.batch, kv_dtype=dtype, state_dtype=dtype, mla_cache=s.mla_cache)


def _state_rows(report, spec, s, layer, group, cache, last, sizes, prefix=""):
    """A constant-state layer (or a parallel layer's mixer, as its own group, its arrays named `prefix`...): its state
    arrays' shapes (the kind's `state_shapes`) after the prefill and at the end, and its bytes after the prefill and
    after every decode step, the same each time (kvcalc's state per layer)."""
    for when, c in (("after prefill", cache), ("at the end", last)):
        _shape_rows(report, "state", f"layer {layer} {prefix}", when, group.attention.state_shapes(group.layer, s.batch), c)
    g = kv_cache(spec, _state_settings(s, s.ctx)).groups[group.index]
    want = g.state_bytes // g.n_layers
    report.rows.append(Row("state", f"layer {layer} state bytes after prefill", want, cache.nbytes, "bytes"))
    for j, size in enumerate(sizes):
        report.rows.append(Row("state", f"layer {layer} state bytes after decode step {j + 1}", want, size, "bytes"))


def _state_total_row(report, spec, s, ids, by_layer, final: list[Cache]) -> None:
    """The constant states of all layers: one run layer's measured state per group, times the group's layers (None
    if a group with a state was not run), against kvcalc's state bytes (`kvcalc compare --state-dtype`)."""
    stateful = [g for g in spec.groups if (isinstance(g.attention, Recurrent) and g.attention.constant_state(g.layer))
                or (g.parallel is not None and g.parallel.constant_state(g.parallel_layer))]
    if not stateful:
        return
    measured: dict[int, int] = {}
    for layer, cache in zip(ids, final):
        state = parts(cache)[1] if by_layer[layer].parallel is not None else cache  # a parallel mixer's state
        measured.setdefault(by_layer[layer].index, state.nbytes)
    total: int | None = sum(measured[g.index] * len(g.layers) for g in stateful if g.index in measured)
    if any(g.index not in measured for g in stateful):
        total = None
    dtype = DTYPES[s.dtype][1]
    report.rows.append(Row("state", f"constant state, all {spec.n_layers} layers (= kvcalc compare --state-dtype {dtype})",
                           kv_cache(spec, _state_settings(s, s.ctx + s.decode)).state_bytes, total, "bytes",
                           compared=total is not None))


def _timing_rows(report, prefill_flops, decode_flops, prefill_seconds, decode_seconds, steps, threads):
    p, d = sum(prefill_flops.values()), sum(decode_flops.values())
    report.rows += [  # measured only: kvcalc predicts no times
        Row("time", "prefill attention threads", None, threads, compared=False),
        Row("time", "prefill wall time", None, prefill_seconds, "seconds", compared=False),
        Row("time", "prefill GFLOP/s", None, p / prefill_seconds / 1e9 if prefill_seconds else None, "rate",
            compared=False),
    ]
    if steps:
        report.rows += [
            Row("time", "decode wall time per step", None, decode_seconds / steps, "seconds", compared=False),
            Row("time", "decode GFLOP/s", None, d / decode_seconds / 1e9 if decode_seconds else None, "rate",
                compared=False),
        ]
