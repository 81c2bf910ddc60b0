"""Predict the peak memory of a `kvcalc run` before allocating anything, and say what would fit when it is too much.

The prediction adds, in bytes: the weights of the layers run; their KV caches at the end of the run and after the
prefill (kept for the checks), and one extra copy of the largest, made while a decode step appends to it; and the
largest of the prefill activations of the longest
sequence the run attends over (the recompute check's ctx + decode tokens): the residual stream, the projections,
per-head keys and values, the attention output, and what each prefill thread holds: a band of scores, which the
prefill's tiling keeps bounded (`kvcalc.backend.causal.prefill_tiling`, the executor's own choice), and for MLA's
latent cache the K and V of one chunk of heads. A constant-state layer holds its state (twice, and a copy) instead
of a cache, and its activations: the prefill's per token, a recurrence step's state-sized scratch, and its
parallel-form check (`kvcalc.backend.recurrent.state_activations`). With DeepSeek Sparse Attention the run keeps
every query's top-k (int32) for the checks to follow. It leaves out the interpreter itself.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace

from kvcalc.backend.attention import LayerPlan, layer_entry
from kvcalc.backend.causal import SCORE_CHUNK, prefill_tiling
from kvcalc.backend.ops import HALF_SCRATCH
from kvcalc.backend.recurrent import StatePlan, plan_layer, state_activations
from kvcalc.errors import KvcalcError
from kvcalc.solve import largest_fitting
from kvcalc.spec import ModelSpec, ResolvedGroup
from kvcalc.units import format_bytes

QUERY_BLOCK = 256  # queries per prefill block at most: with 256·g rows a head's products run near BLAS's best


def query_block(window: int | None) -> int:
    """Queries per prefill block at most: QUERY_BLOCK, and no more than the window.

    The executor lowers it (and picks how many KV heads to attend together) so that one band of scores stays
    bounded, knowing the grouping of query heads that it takes from the layer; `plan` predicts the same choice.
    """
    return min(QUERY_BLOCK, window) if window else QUERY_BLOCK


def _matrix_elements(group: ResolvedGroup) -> int:
    """Weights one layer holds: its kind's weight matrices, and its parallel mixer's (norms and biases are small and
    left out)."""
    weights = group.attention.weights(group.layer) + (group.parallel.weights(group.parallel_layer) if group.parallel else ())
    return sum(w.size for w in weights if w.role == "matrix")


def _prefill_threads_bytes(group: ResolvedGroup, p: LayerPlan, tokens: int, batch: int, itemsize: int,
                           workers: int) -> int:
    """What the prefill threads hold, one per chunk of KV heads up to `workers` (`causal.causal_attention`):
    each a band of scores (float16's softmax adds three float32 copies) and a tile's share of p @ v, and what
    the layer builds per chunk of heads (MLA: the chunk's queries, and with its latent cache its K and V)."""
    window = group.sliding_window
    block = query_block(window)  # what the runner passes the layer
    tiling = prefill_tiling(batch, p.kv_heads, p.g, tokens, window, block)
    per_thread = tiling.band(batch, p.g) * (itemsize + (12 if itemsize == 2 else 0))
    per_thread += HALF_SCRATCH if itemsize == 2 else 0  # its float16 products' float64 tiles (ops._half_product)
    per_thread += batch * tiling.chunk * tiling.block * p.g * p.value_dim * itemsize
    per_thread += batch * tiling.chunk * tokens * p.chunk_width * itemsize
    return min(workers, -(-p.kv_heads // tiling.chunk)) * per_thread


@dataclass(frozen=True)
class MemoryPlan:
    """Predicted peak bytes of a run, by part."""

    weights: int
    cache: int
    activations: int

    @property
    def peak(self) -> int:
        return self.weights + self.cache + self.activations


def plan(spec: ModelSpec, layers: list[int], ctx: int, decode: int, batch: int, itemsize: int, mla_cache: str,
         workers: int = 1, enc: int = 0) -> MemoryPlan:
    """Predicted peak memory of running `layers` of `spec` on a prefill of ctx and `decode` steps, with up to
    `workers` prefill threads; `enc` encoder positions for cross-attention layers."""
    by_layer = {i: g for g in spec.groups for i in g.layers}
    total = ctx + decode
    weights = cache = act = largest = 0
    for layer in layers:
        group = by_layer[layer]
        att = group.attention
        p = layer_entry(att.kind)[1](att, group.layer, mla_cache)
        weights += _matrix_elements(group) * itemsize
        if isinstance(p, StatePlan):  # a constant-state layer: its state, the same size at every step
            state = batch * att.constant_state(group.layer) * itemsize
            cache += 2 * state  # at the end, and after the prefill (kept for the checks)
            largest = max(largest, state)  # a decode step builds the new state beside the old
            act = max(act, state_activations(p, spec.d_model, batch, total, itemsize))
            continue
        held = att.tokens_held(group.layer, total)
        per_token = att.cache_formula(group.layer, mla_cache).elements * batch * itemsize
        layer_cache = per_token * held
        # the cache at the end, and the one after the prefill, which the run keeps for its checks
        cache += layer_cache + per_token * att.tokens_held(group.layer, ctx)
        largest = max(largest, layer_cache)
        scores = _prefill_threads_bytes(group, p, total, batch, itemsize, workers) + _index_bytes(group, p, total, batch, itemsize)
        if decode and p.sparse_above is not None:  # each query's top-k past the first k, kept for the checks (int32)
            cache += max(0, total - p.sparse_above) * batch * p.sparse_above * 4
        if group.cross is not None and enc:  # the encoder positions' K/V (held once), weights, and the scores
            cross, cl = group.cross, group.cross_layer
            weights += sum(w.size for w in cross.weights(cl) if w.role == "matrix") * itemsize
            cache += cross.cache_formula(cl, mla_cache).elements * batch * enc * itemsize
            scores += batch * total * (cross.query_heads or 1) * (2 * enc + 2 * (cross.d_h(cl) or 0)) * itemsize
        # 4 · d_model: the run's input, a layer's input, its norm and its output (the residual stream)
        act = max(act, batch * total * (4 * spec.d_model + p.width) * itemsize + scores,
                  # the run's input and the recompute check's output, beside a naive decode step's K and V
                  batch * total * 2 * spec.d_model * itemsize + batch * held * p.rebuilt * itemsize)
        if group.parallel is not None:  # Falcon-H1: the mixer's state beside the KV cache, and its activations
            mixer, ml = group.parallel, group.parallel_layer
            state = batch * mixer.constant_state(ml) * itemsize
            cache += 2 * state  # at the end, and after the prefill (kept for the checks)
            largest = max(largest, layer_cache + state)  # a decode step builds the layer's new cache beside the old
            # the mixer runs after the attention, whose output [b, s, d_model] it holds meanwhile
            act = max(act, state_activations(plan_layer(mixer, ml, mla_cache), spec.d_model, batch, total, itemsize)
                      + batch * total * spec.d_model * itemsize)
    if enc and any(by_layer[i].cross is not None for i in layers):  # the random encoder output the run attends
        act += batch * enc * spec.d_model * itemsize
    if itemsize == 2:  # the main thread's float16 products' float64 tiles (ops._half_product)
        act += HALF_SCRATCH
    return MemoryPlan(weights=weights, cache=cache + largest, activations=act)


def _index_bytes(group: ResolvedGroup, p: LayerPlan, tokens: int, batch: int, itemsize: int) -> int:
    """The indexer's band of one query block (H_I heads' scores and their sum, over at most `tokens` keys), and on
    the top-k path every head's K and V of the prompt and one group of gathered rows (`causal.attend_selected`)."""
    if not p.index_rows:
        return 0
    out = batch * min(query_block(group.sliding_window), tokens) * p.index_rows * tokens * itemsize
    if p.sparse_above is not None and tokens > p.sparse_above:
        out += batch * tokens * p.sparse_width * itemsize + 2 * max(SCORE_CHUNK, batch * p.gather_row) * itemsize
    return out


@dataclass(frozen=True)
class Headroom:
    """Bytes this process may still allocate under one limit, and which limit it is (for the guard's message)."""

    bytes: int
    source: str


def _status() -> dict[str, int]:
    """This process's memory counters from /proc/self/status, in bytes (VmRSS, VmSize, VmData, ...); {} if unknown."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key.startswith("Vm") and rest.strip().endswith("kB"):
                    out[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return out


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # cgroup v2 writes "max" for no limit


def _stat_field(path: str, names: tuple[str, ...]) -> int:
    """The first of `names` in a cgroup memory.stat file (0 if absent)."""
    try:
        with open(path, encoding="ascii") as f:
            fields = dict(line.split()[:2] for line in f if len(line.split()) >= 2)
    except OSError:
        return 0
    for name in names:
        if name in fields and fields[name].isdigit():
            return int(fields[name])
    return 0


def cgroup_headroom(root: str = "/sys/fs/cgroup", proc: str = "/proc/self/cgroup") -> Headroom | None:
    """What the tightest memory cgroup holding this process still allows: limit − usage + reclaimable page cache
    (inactive file pages, as container runtimes count a working set), over this cgroup and its ancestors.
    cgroup v2 (memory.max, memory.current) and v1 (memory.limit_in_bytes, memory.usage_in_bytes)."""
    try:
        with open(proc, encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    best: Headroom | None = None
    for line in lines:
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        files: tuple[str, str, tuple[str, ...]]
        if controllers == "":  # v2: one unified hierarchy
            base, files = root, ("memory.max", "memory.current", ("inactive_file",))
        elif "memory" in controllers.split(","):  # v1: the memory controller's own hierarchy
            base, files = os.path.join(root, "memory"), ("memory.limit_in_bytes", "memory.usage_in_bytes",
                                                         ("total_inactive_file", "inactive_file"))
        else:
            continue
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), -1, -1):  # this cgroup, then each ancestor up to the root
            d = os.path.join(base, *parts[:depth])
            limit, usage = _read_int(os.path.join(d, files[0])), _read_int(os.path.join(d, files[1]))
            if limit is None or usage is None or limit >= 1 << 60:  # no limit at this level
                continue
            free = max(0, limit - usage + _stat_field(os.path.join(d, "memory.stat"), files[2]))
            if best is None or free < best.bytes:
                best = Headroom(free, f"the cgroup limit of {format_bytes(limit)} ({d})")
    return best


def headrooms(max_memory: int | None = None) -> list[Headroom]:
    """Every limit on what a run may still allocate: --max-memory (less what the process already holds), the
    system's MemAvailable, `ulimit -v` (address space: less the process's VmSize), `ulimit -d` (data: less its
    VmData) and a memory cgroup's limit."""
    status = _status()
    out = []
    if max_memory is not None:
        rss = status.get("VmRSS", 0)
        out.append(Headroom(max(0, max_memory - rss), f"--max-memory {format_bytes(max_memory)} less the "
                                                      f"{format_bytes(rss)} this process already holds"))
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    out.append(Headroom(int(line.split()[1]) * 1024, "available memory (MemAvailable)"))
    except (OSError, ValueError, IndexError):
        try:
            out.append(Headroom(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "available memory"))
        except (ValueError, OSError, AttributeError):
            pass
    try:
        import resource
    except ImportError:  # not on this platform (Windows)
        resource = None  # type: ignore[assignment]
    if resource is not None:
        for name, used, what in (("RLIMIT_AS", "VmSize", "ulimit -v"), ("RLIMIT_DATA", "VmData", "ulimit -d")):
            soft = resource.getrlimit(getattr(resource, name))[0]
            if soft != resource.RLIM_INFINITY and soft >= 0:
                held = status.get(used, 0)
                out.append(Headroom(max(0, soft - held), f"{what} {format_bytes(soft)} less the "
                                                         f"{format_bytes(held)} this process already maps"))
    cg = cgroup_headroom()
    if cg is not None:
        out.append(cg)
    return out


def tightest(max_memory: int | None = None) -> Headroom | None:
    """The smallest of `headrooms`, or None if none is known."""
    rooms = headrooms(max_memory)
    return min(rooms, key=lambda h: h.bytes) if rooms else None


def return_freed_memory(threshold: int = 1 << 20) -> bool:
    """Have glibc's malloc serve blocks of `threshold` bytes and more by mmap and trim its heap above that, so
    what a run frees goes back to the system at once. By default glibc raises its mmap threshold to 32 MiB as
    arrays are freed and keeps the freed blocks resident, in every thread's arena: a run's RSS then grows past
    its plan (10-15% in deepseek-v2's prefill) with memory it no longer uses. False where there is no glibc."""
    import ctypes
    import platform

    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":  # mallopt's numbers are glibc's
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
    return bool(mallopt(M_MMAP_THRESHOLD, threshold)) and bool(mallopt(M_TRIM_THRESHOLD, threshold))


@dataclass(frozen=True)
class Request:
    """The size knobs of a run that the guard may shrink."""

    ctx: int
    decode: int
    batch: int
    n_layers: int


def guard(spec: ModelSpec, layer_order: list[int], req: Request, itemsize: int, mla_cache: str, limit: int,
          workers: int = 1, enc: int = 0, source: str = "") -> MemoryPlan:
    """The memory plan of the request, or a KvcalcError saying what would fit under `limit` bytes (`source`: which
    limit that is, for the message)."""
    cost = lambda r: plan(spec, layer_order[: r.n_layers], r.ctx, r.decode, r.batch, itemsize, mla_cache, workers, enc).peak  # noqa: E731
    need = plan(spec, layer_order[: req.n_layers], req.ctx, req.decode, req.batch, itemsize, mla_cache, workers, enc)
    if need.peak <= limit:
        return need
    hints = []
    ctx = largest_fitting(lambda c: cost(replace(req, ctx=c)) <= limit, req.ctx)
    if ctx:
        hints.append(f"--ctx {ctx}")
    batch = largest_fitting(lambda b: cost(replace(req, batch=b)) <= limit, req.batch)
    if batch:
        hints.append(f"--batch {batch}")
    layers = largest_fitting(lambda n: cost(replace(req, n_layers=n)) <= limit, req.n_layers)
    if layers:
        hints.append(f"--layers {layers}")
    decode = largest_fitting(lambda t: cost(replace(req, decode=t)) <= limit, req.decode) if req.decode else 0
    if decode:
        hints.append(f"--decode {decode}")
    fix = f"; each of these alone would fit: {', '.join(hints)}" if hints else ""
    if not hints:  # no single knob is enough: one layer, one sequence, and the longest prompt that then fits
        small = replace(req, n_layers=1, batch=1)
        ctx = largest_fitting(lambda c: cost(replace(small, ctx=c)) <= limit, req.ctx)
        first = spec.groups[spec.group_index_of(layer_order[0])]
        fix = (f"; this would fit: --layers 1 --batch 1 --ctx {ctx}" if ctx else
               f"; not even one layer at ctx 1 fits (layer {layer_order[0]} alone holds "
               f"{format_bytes(_matrix_elements(first) * itemsize)} of weights)")
        if limit <= 0:  # the process already holds the whole limit: no run fits, whatever its size
            fix = "; the process itself already holds more than the limit: raise it"
        if not ctx and req.decode and cost(replace(small, ctx=1, decode=0)) <= limit:  # the decode steps outgrow
            fix = f"; --decode {req.decode:,} alone needs more: the cache grows by one token a step"
        elif not ctx and spec.encoder is not None:  # the cross-attention K/V of every encoder position, at any ctx
            fix += "; its cross-attention caches K/V of --enc-ctx encoder positions at any ctx: a smaller --enc-ctx may fit"
    size = lambda n: format_bytes(n)  # noqa: E731
    what = (f"this run needs about {size(need.peak)} (weights {size(need.weights)}, KV cache {size(need.cache)}, "
            f"activations {size(need.activations)}) but {size(limit)} is available"
            + (f" under {source}" if source else ""))
    raise KvcalcError(f"not running: {what}{fix}")
