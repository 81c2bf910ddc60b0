"""`kvcalc approx`: each approximate method's cost against exact attention and its measured error, on generated or
given Q, K, V (one head), over input scales and seeds. The bridge between the analytic costs (analytic.py) and the
NumPy methods (numeric.py); no I/O but reading an .npz the caller names.

Conventions (also in the README):
- `flops` is the method's analytic prefill cost for the whole sequence (one head), `flops_exact` exact attention's
  in the same mode (causal with --causal); `decode_state_bytes` what decoding the next token keeps, at 2 bytes an
  element (bf16), None for methods that cannot decode.
- Errors are means over seeds: the output's relative Frobenius error against exact attention, and, where the method
  defines an attention matrix, the matrix's; for sparse methods (window, topk) the exact attention mass their kept
  set captures and recall@k of the exact top-k (k = the keys each row keeps). LSH shares queries and keys
  (Reformer), so it is measured against exact attention with keys = queries / ‖queries‖.
- An input scale multiplies Q and K: small scales give flat attention, large ones spiky attention.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvcalc.errors import KvcalcError
from kvcalc.fields import as_row, figure

# CLI name -> (numeric function name, analytic method name, parameter names the CLI takes, causal modes it supports)
MEASURED: dict[str, tuple[str, str, tuple[str, ...], tuple[bool, ...]]] = {
    "exact": ("exact", "exact", (), (False, True)),
    "window": ("window", "window", ("w",), (True,)),
    "topk": ("topk", "topk", ("k",), (False, True)),
    "lsh": ("lsh", "reformer_lsh", ("c", "r"), (False,)),
    "linformer": ("linformer", "linformer", ("k",), (False,)),
    "linformer-svd": ("linformer", "linformer", ("k",), (False,)),
    "nystrom": ("nystrom", "nystrom", ("m", "T"), (False,)),
    "performer": ("performer", "performer", ("r",), (False, True)),
    "cosformer": ("cosformer", "cosformer", (), (False, True)),
}
DEFAULTS = {"nystrom": {"T": 6}, "lsh": {"r": 1}}
PARAM_LIMIT = 16384  # a window, a k, a chunk, landmarks or features: at most --n's own limit
PARAM_LIMITS = {("nystrom", "T"): 100, ("lsh", "r"): 64}  # pseudo-inverse iterations (exact by about 20); hash rounds
DATA = ("gaussian", "clustered", "spiky")
BYTES_PER_ELEMENT = 2  # bf16 decode state
MAX_N = 16384  # approx materialises n × n attention matrices
MAX_INPUT = 2**24  # values of Q, K or V each (n × d, float64: 128 MiB apiece)
MAX_ARRAY = MAX_N * MAX_N  # elements of the largest array one method holds (exact's n × n at the largest n: 2 GiB)
MAX_SPECTRUM = 8192  # --spectrum's full SVDs are O(n³): about 30 s each at n = 4k on two cores, 8× per doubling
# float64 n × n arrays a measurement holds at its peak beside a method's own largest array: exact's scores and
# probabilities, its output's reference, the method's matrix and its difference (peak RSS at n = 4k measured
# 4.1-5.5 × n² · 8 bytes over the methods, 2026-12-04)
PEAK_SQUARES = 5
NPZ_ARRAYS = ("q", "k", "v")  # the arrays an .npz given to --data holds, and nothing else
NPZ_SHAPES = "q [n, d], k [n, d], v [n, d_v]"


@dataclass(frozen=True)
class Method:
    """A method as asked on the command line: its name and integer parameters."""

    name: str
    params: dict[str, int]

    @property
    def label(self) -> str:
        """The parameters as asked, in the method's order: 'm=64 T=6'."""
        return " ".join(f"{k}={self.params[k]}" for k in MEASURED[self.name][2] if k in self.params)

    @property
    def option(self) -> str:
        """The method as --method writes it: 'nystrom:m=64/T=6'."""
        return self.name + "".join(f"{':' if i == 0 else '/'}{p.replace(' ', '')}" for i, p in
                                   enumerate(self.label.split()))


@dataclass(frozen=True)
class ApproxRow:
    """One row of `approx`: a method at one input scale, its analytic cost against exact and its measured errors."""

    method: str = figure("Method", "text", "the method's name, as --method takes it")
    params: str = figure("Params", "text", "its parameters as asked, e.g. 'm=64 T=6' (empty: none)")
    n: int = figure("n", "tokens", "sequence length")
    d: int = figure("d", "int", "query/key head dim")
    d_v: int = figure("d_v", "int", "value head dim")
    scale: float = figure("Scale", "sig", "the input scale multiplying Q and K (small: flat attention, large: spiky)")
    data: str = figure("Data", "text", "the inputs: gaussian, clustered, spiky, or the .npz file given")
    causal: bool = figure("Causal", "bool", "causal (decoder) attention was measured")
    seeds: int = figure("Seeds", "int", "random inputs the errors are averaged over")
    flops: int = figure("FLOPs", "flops", "the method's analytic prefill FLOPs, whole sequence, one head")
    flops_exact: int = figure("Exact\nFLOPs", "flops", "exact attention's prefill FLOPs in the same mode")
    flops_ratio: float = figure("vs\nexact", "ratio", "flops / flops_exact")
    decode_state_bytes: int | None = figure("Decode\nstate", "bytes",
                                            "what decoding the next token keeps, bf16 (left out: the method cannot decode)")
    rel_error_output: float = figure("Output\nerror", "sig", "mean relative Frobenius error of the output against exact")
    rel_error_matrix: float | None = figure("Matrix\nerror", "sig",
                                            "mean relative Frobenius error of the attention matrix (methods that define one)")
    captured_mass: float | None = figure("Captured\nmass", "sig", "mean exact attention mass the kept keys hold (sparse methods)")
    recall_at_k: float | None = figure("Recall\n@k", "sig", "mean recall of the exact top-k keys (sparse methods)")


@dataclass(frozen=True)
class SpectrumRow:
    """One row of `approx --spectrum`: the singular values of one matrix at one input scale."""

    matrix: str = figure("Matrix", "text", "the attention matrix, or the scores QKᵀ")
    scale: float = figure("Scale", "sig", "the input scale multiplying Q and K")
    n: int = figure("n", "tokens", "sequence length")
    d: int = figure("d", "int", "query/key head dim")
    s_1: float = figure("Largest\nsingular value", "sig", "the largest singular value")
    rank_90: int = figure("Rank for\n90%", "int", "singular values holding 90% of the energy (sum of squares)")
    rank_99: int = figure("Rank for\n99%", "int", "singular values holding 99% of the energy")
    rank_999: int = figure("Rank for\n99.9%", "int", "singular values holding 99.9% of the energy")
    singular_values: list[float] = figure("Singular values", "floats", "the largest singular values (up to 16), largest first")


def parse_methods(text: str) -> list[Method]:
    """`linformer:k=256,nystrom:m=64/T=6,performer:r=256` -> Methods; a KvcalcError names any mistake."""
    out = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            raise KvcalcError(f"--method {text!r}: an empty method between commas")
        name, _, rest = item.partition(":")
        name = name.strip().lower()
        if name not in MEASURED:
            raise KvcalcError(f"--method {item!r}: unknown method {name!r}; choose from {', '.join(MEASURED)}")
        params = dict(DEFAULTS.get(name, {}))
        given: set[str] = set()
        for pair in (p for p in rest.split("/") if p.strip()):
            key, eq, value = pair.partition("=")
            key = key.strip()
            if not eq or key not in MEASURED[name][2]:
                raise KvcalcError(f"--method {item!r}: {name} takes {', '.join(MEASURED[name][2]) or 'no parameters'} "
                                  f"as key=value, '/'-separated")
            if key in given:
                raise KvcalcError(f"--method {item!r}: {key} is given twice")
            given.add(key)
            value = value.strip()
            if not (value.isascii() and value.isdigit() and len(value) <= 20):  # int() takes '1_0' and other digits
                raise KvcalcError(f"--method {item!r}: {key} must be a whole number in the digits 0-9, got {value!r}")
            params[key] = int(value)
            limit = PARAM_LIMITS.get((name, key), PARAM_LIMIT)
            if not 1 <= params[key] <= limit:
                raise KvcalcError(f"--method {item!r}: {key} must be at least 1 and at most {limit:,}")
        missing = [p for p in MEASURED[name][2] if p not in params]
        if missing:
            raise KvcalcError(f"--method {item!r}: {name} needs {', '.join(missing)} (e.g. {name}:{missing[0]}=64)")
        if Method(name, params) in out:  # it would be measured twice, as two rows
            raise KvcalcError(f"--method {text!r}: {item} is there twice")
        out.append(Method(name, params))
    if not out:
        raise KvcalcError("--method: name at least one method, e.g. performer:r=256")
    return out


def is_npz(path: Path) -> bool:
    """Whether `path` is a regular file that opens as a zip archive (an .npz, whatever its name); a FIFO is not opened."""
    try:
        if not path.is_file():
            return False
        with open(path, "rb") as f:
            return f.read(4) == b"PK\x03\x04"
    except OSError:
        return False


def load_npz(path: str) -> tuple[Any, Any, Any]:
    """Q, K, V of one head from an .npz with arrays q [n, d], k [n, d], v [n, d_v]: every header is checked (names,
    dtypes, shapes, sizes) before any data is read."""
    import numpy as np

    from kvcalc.approx import npzfile
    from kvcalc.yamlfile import check_file

    what = f"--data {path}"
    if not path:  # Path('') is the current folder
        raise KvcalcError("--data: an empty path; give gaussian, clustered, spiky or an .npz file")
    if Path(path).is_symlink() and not Path(path).exists():  # a loop of links, or one to nothing
        raise KvcalcError(f"{what}: a symbolic link that leads to no file (a loop, or a missing target)")
    if not Path(path).exists() and not path.lower().endswith(".npz"):  # a misspelled name more likely than a file
        raise KvcalcError(f"{what}: no such file, nor one of the generated inputs ({', '.join(DATA)})")
    if check_file(Path(path), what, limit=2**32, wanted="an .npz file") == 0:  # a regular file (a FIFO would block), 4 GiB at most
        raise KvcalcError(f"{what}: an empty file, not an .npz archive ({NPZ_SHAPES})")
    with npzfile.open_archive(path, NPZ_ARRAYS, what) as archive:
        found = npzfile.members(archive, NPZ_ARRAYS, NPZ_SHAPES, what)
        heads = [npzfile.read_header(archive, name, info, what) for name, info in found.items()]
        check_shapes(heads[0].shape, heads[1].shape, heads[2].shape, what)
        for head in heads:
            npzfile.check_length(head, what)
        q, k, v = (npzfile.read_data(archive, head, what) for head in heads)
    bad = [name for name, a in zip(NPZ_ARRAYS, (q, k, v)) if not np.all(np.isfinite(a))]
    if bad:
        raise KvcalcError(f"{what}: {', '.join(bad)} {'holds' if len(bad) == 1 else 'hold'} NaN or infinite "
                          "values; every value must be finite")
    if not np.any(v):
        raise KvcalcError(f"{what}: v is all zeros: every output is 0, and a relative error has no meaning")
    return q, k, v


def check_shapes(q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...], what: str) -> None:
    """q and k [n, d], v [n, d_v], every size at least 1 and within check_size's bounds; from the headers alone."""
    if len(q) != 2 or k != q or len(v) != 2 or v[0] != q[0]:
        raise KvcalcError(f"{what}: q and k must be [n, d] and v [n, d_v] of one head; got {q}, {k}, {v}")
    if min(*q, *v) < 1:
        raise KvcalcError(f"{what}: q {q} and v {v}: n, d and d_v must each be at least 1")
    check_size(q[0], q[1], v[1], what)


def check_size(n: int, d: int, d_v: int, what: str) -> None:
    """The inputs approx can hold: n <= 16k (it materialises n × n matrices), n × max(d, d_v) <= 2^24 values."""
    if n > MAX_N:
        raise KvcalcError(f"{what}: n = {n:,}: approx materialises n × n attention matrices; n may be at most 16k")
    if n * max(d, d_v) > MAX_INPUT:
        raise KvcalcError(f"{what}: n = {n:,} with d/d_v {max(d, d_v):,}: n × d may be at most 2^24 (16,777,216) "
                          "values (Q, K and V are held in float64)")


def check_spectrum(n: int) -> None:
    """--spectrum's bound: its full SVDs of n × n matrices take O(n³) time."""
    if n > MAX_SPECTRUM:
        raise KvcalcError(f"--spectrum at n = {n:,}: it takes full SVDs of n × n matrices, O(n³) (about 30 s each at "
                          f"n = 4k on two cores, 8× more per doubling); n may be at most {MAX_SPECTRUM:,} with it")


def predicted_peak(methods: list[Method], n: int, d_v: int, causal: bool) -> int:
    """Bytes a measurement holds at its peak, about: PEAK_SQUARES float64 n × n arrays and what the most demanding of
    its methods holds (held_at_peak; at least n × n), each run's arrays freed before the next."""
    own = max(max(held_at_peak(m, n, d_v, causal) for m in methods), n * n)
    return 8 * (PEAK_SQUARES * n * n + own)


def check_memory(methods: list[Method], n: int, d_v: int, causal: bool) -> None:
    """A measurement that would not fit in the memory this process may still take (MemAvailable, ulimits, a cgroup)
    is refused before it starts, naming the n that fits: past it the kernel kills the process without a word."""
    from kvcalc.backend.memory import tightest
    from kvcalc.solve import largest_fitting
    from kvcalc.units import format_bytes

    need = predicted_peak(methods, n, d_v, causal)
    room = tightest()
    if room is None or need <= room.bytes:
        return
    fits = largest_fitting(lambda m: predicted_peak(methods, m, d_v, causal) <= room.bytes, n)
    hint = f"use a smaller --n (n = {fits:,} fits)" if fits else "free some memory"
    raise KvcalcError(f"approx at n = {n:,} needs about {format_bytes(need)} at its peak ({PEAK_SQUARES} float64 "
                      f"n × n arrays and its methods' largest), more than the {format_bytes(room.bytes)} of "
                      f"{room.source}; {hint}")


def largest_array(method: Method, n: int, d_v: int, causal: bool) -> int:
    """Elements of the largest array a method's NumPy run holds beside exact's n × n: Reformer's attention matrix
    of each hash round (r × n × n) and the Performer's causal prefix sums of φ(k) ⊗ [v, 1] (n × r × (d_v + 1))."""
    p = method.params
    if method.name == "lsh":
        return p["r"] * n * n
    if method.name == "performer" and causal:
        return n * p["r"] * (d_v + 1)
    return n * n


def held_at_peak(method: Method, n: int, d_v: int, causal: bool) -> int:
    """Elements a method's NumPy run holds at its peak beside exact's n × n: its largest array, and for the causal
    Performer its terms φ(k) ⊗ [v, 1] beside their prefix sums (numeric._linear_readout) and the features φ(q), φ(k),
    n × r each."""
    if method.name == "performer" and causal:
        return 2 * largest_array(method, n, d_v, causal) + 2 * n * method.params["r"]
    return largest_array(method, n, d_v, causal)


def _data(kind: str, n: int, d: int, d_v: int, scale: float, seed: int):
    import numpy as np

    from kvcalc.approx import numeric

    rng = np.random.default_rng(seed)
    if kind in DATA:
        return getattr(numeric, kind)(n, d, d_v, scale, rng)
    q, k, v = load_npz(kind)
    return scale * q, scale * k, v


def _shape(kind: str, n: int, d: int, d_v: int) -> tuple[int, int, int]:
    if kind in DATA:
        return n, d, d_v
    q, _, v = load_npz(kind)
    return q.shape[0], q.shape[1], v.shape[1]


def _run(method: Method, q, k, v, causal: bool, seed: int, reference: tuple | None = None):
    """(output, attention matrix or None, reference output, reference matrix, kept count or None); `reference`: exact
    attention on (q, k, v) when already computed (every method but LSH, whose keys are the unit queries, shares it)."""
    import numpy as np

    from kvcalc.approx import numeric

    rng = np.random.default_rng(10_000 + seed)
    p = method.params
    if method.name == "lsh":
        norms = np.linalg.norm(q, axis=1, keepdims=True)
        if not np.all(norms > 0):
            row = int(np.argmin(norms[:, 0] > 0))
            raise KvcalcError(f"--method {method.option}: q's row {row} is all zeros, and LSH's keys are the unit "
                              "queries q/‖q‖ (Reformer's shared QK), which a zero row has none of")
        qn = q / norms  # shared QK: the keys are the unit queries (Reformer §3)
        ref, ref_p = numeric.exact(q, qn, v, causal)
        n = q.shape[0]
        out, mat = numeric.lsh(q, v, n_buckets=max(1, n // p["c"]), n_rounds=p["r"], chunk=p["c"], rng=rng)
        return out, mat, ref, ref_p, None
    ref, ref_p = reference if reference is not None else numeric.exact(q, k, v, causal)
    if method.name == "exact":
        out, mat = numeric.exact(q, k, v, causal)
        return out, mat, ref, ref_p, None
    if method.name == "window":
        out, mat = numeric.window(q, k, v, p["w"])
        return out, mat, ref, ref_p, p["w"]
    if method.name == "topk":
        out, mat = numeric.topk(q, k, v, p["k"], causal)
        return out, mat, ref, ref_p, p["k"]
    if method.name in ("linformer", "linformer-svd"):
        out, mat = numeric.linformer(q, k, v, p["k"], mode="svd" if method.name.endswith("svd") else "random", rng=rng)
        return out, mat, ref, ref_p, None
    if method.name == "nystrom":
        out, mat = numeric.nystrom(q, k, v, p["m"], iters=p["T"])
        return out, mat, ref, ref_p, None
    if method.name == "performer":
        out, mat = numeric.performer(q, k, v, p["r"], rng=rng, causal=causal, form="prefix" if causal else "parallel")
        return out, mat, ref, ref_p, None
    out, mat = numeric.cosformer(q, k, v, causal)
    return out, mat, ref, ref_p, None


def _analytic(method: Method, n: int, d: int, d_v: int, causal: bool):
    from kvcalc.approx.analytic import cost

    name = MEASURED[method.name][1]
    p = method.params
    args: dict[str, int | bool] = {}
    if name == "exact":
        args = {"causal": causal}
    elif name == "topk":
        args = {"k": p["k"], "causal": causal}
    elif name == "window":
        args = {"w": p["w"]}
    elif name == "reformer_lsh":
        args = {"c": p["c"], "n_r": p["r"]}
    elif name == "linformer":
        args = {"k": p["k"]}
    elif name == "nystrom":
        args = {"m": p["m"], "T": p["T"]}
    elif name == "performer":
        args = {"r": p["r"], "causal": causal}
    elif name == "cosformer":
        args = {"causal": causal}
    try:
        c = cost(name, n, d, d_v, **args)
    except KvcalcError as exc:  # 'reformer_lsh: c = 64: ...' is the library's name; the command line's is lsh:c=64
        raise KvcalcError(f"--method {method.option}: {str(exc).partition(': ')[2]}") from None
    return c.prefill_flops, c


def evaluate(methods: list[Method], n: int, d: int, d_v: int, scales: list[float], data: str, seeds: int,
             causal: bool, hooks: Any = None, spectrum: bool = False) -> list[dict]:
    """One row per method and scale: costs against exact and the errors, averaged over `seeds`; `hooks` (start and
    advance, as the runner's: kvcalc.progress.BarHooks) hear of each run; `spectrum`: spectrum_rows follows, so its
    bound is checked here, before any run."""
    from statistics import fmean

    import numpy as np

    from kvcalc.approx import numeric
    from kvcalc.approx.analytic import cost

    n, d, d_v = _shape(data, n, d, d_v)
    check_size(n, d, d_v, "--n, --d" if data in DATA else f"--data {data}")
    for m in methods:
        if largest_array(m, n, d_v, causal) > MAX_ARRAY:
            raise KvcalcError(f"--method {m.option} at n = {n:,}, d_v {d_v:,}: its run would hold an array of "
                              f"{largest_array(m, n, d_v, causal):,} values, more than {MAX_ARRAY:,} (exact's n × n "
                              "at n = 16k); use a smaller n or parameter")
        if m.name == "topk" and m.params["k"] > n:
            raise KvcalcError(f"--method topk:k={m.params['k']}: k must be at most n = {n:,} (the keys there are)")
        if m.name == "linformer-svd" and m.params["k"] > d + d_v:  # past the rank, an arbitrary null-space basis
            raise KvcalcError(f"--method linformer-svd:k={m.params['k']}: k must be at most d + d_v = {d + d_v:,}, the "
                              "rank [K V] can have: the singular vectors past it are any basis LAPACK picks of the rest, "
                              "and the attention matrix's error would depend on that choice")
        if causal not in MEASURED[m.name][3]:
            mode = "causal" if causal else "non-causal"
            raise KvcalcError(f"{m.name} has no {mode} form here ({'drop' if causal else 'add'} --causal)")
    if spectrum:
        check_spectrum(n)
    check_memory(methods, n, d_v, causal)
    exact = cost("exact", n, d, d_v, causal=causal)
    rows = []
    if hooks is not None:
        hooks.start("approx runs", len(methods) * len(scales) * seeds)
    costs = []  # per method: its FLOPs and the bytes its decoding keeps (None: it cannot decode)
    for m in methods:
        flops, c = _analytic(m, n, d, d_v, causal)
        # what decoding keeps: the method's causal form, whatever mode is measured
        state = c if c.state_kind != "none" or True not in MEASURED[m.name][3] else _analytic(m, n, d, d_v, True)[1]
        costs.append((flops, state.state_elements * BYTES_PER_ELEMENT if state.state_kind != "none" else None))
    # errors per (method, scale): output, matrix, captured mass, recall@k, over the seeds
    errors: dict[tuple[int, int], tuple[list, list, list, list]] = {}
    for si, scale in enumerate(scales):  # each seed's data and exact attention once, shared by the methods (not LSH's own)
        for seed in range(seeds):
            q, k, v = _data(data, n, d, d_v, scale, seed)
            reference = None
            for i, m in enumerate(methods):
                out_err, mat_err, mass, recall = errors.setdefault((i, si), ([], [], [], []))
                try:
                    with np.errstate(all="ignore"):  # a non-finite output is refused below, with one message
                        out, mat, ref, ref_p, kept = _run(m, q, k, v, causal, seed, None if m.name == "lsh" else reference)
                except MemoryError:  # numpy's _ArrayMemoryError among them
                    raise KvcalcError(f"--method {m.option}: ran out of memory at n = {n:,}; use a smaller n or "
                                      "parameter") from None
                if hooks is not None:
                    hooks.advance("approx runs")
                if not (np.all(np.isfinite(ref)) and np.all(np.isfinite(ref_p))):  # q·k past float64's range
                    raise KvcalcError(f"--method {m.option} at --scale {scale:g}: exact attention itself is not "
                                      "finite on this data (a score q·k overflows float64), so there is nothing to "
                                      "measure against; use a smaller --scale")
                if not np.all(np.isfinite(out)):
                    raise KvcalcError(f"--method {m.option} at --scale {scale:g}: its output is not finite (its "
                                      "float64 arithmetic under- or overflows at this scale); use a smaller --scale")
                if not np.any(ref):  # v's rows cancel under the weights: ‖exact‖ = 0 divides the error
                    raise KvcalcError(f"--method {m.option} at --scale {scale:g}: exact attention's output is all "
                                      "zeros on this data (v's rows cancel under its weights), so a relative error "
                                      "has no meaning")
                if m.name != "lsh":
                    reference = (ref, ref_p)
                out_err.append(numeric.rel_frobenius(out, ref))
                if mat is not None:
                    mat_err.append(numeric.rel_frobenius(mat, ref_p))
                if kept is not None and mat is not None:
                    mass.append(numeric.captured_mass(mat, ref_p))
                    recall.append(numeric.recall_at_k(mat != 0, ref_p, kept))
                del out, mat  # before the next method's run allocates its own
    for i, m in enumerate(methods):
        flops, state_bytes = costs[i]
        for si, scale in enumerate(scales):
            out_err, mat_err, mass, recall = errors[(i, si)]
            rows.append(as_row(ApproxRow(
                method=m.name, params=m.label, n=n, d=d, d_v=d_v, scale=scale, data=data, causal=causal, seeds=seeds,
                flops=flops, flops_exact=exact.prefill_flops, flops_ratio=flops / exact.prefill_flops,
                decode_state_bytes=state_bytes, rel_error_output=fmean(out_err),
                rel_error_matrix=fmean(mat_err) if mat_err else None, captured_mass=fmean(mass) if mass else None,
                recall_at_k=fmean(recall) if recall else None)))
    return rows


def spectrum_rows(n: int, d: int, scales: list[float], data: str, seed: int, causal: bool,
                  hooks: Any = None) -> list[dict]:
    """The singular values of the attention matrix and of QKᵀ at each scale, and the ranks for 90/99/99.9% energy;
    `hooks` hear of each scale's SVDs."""
    from kvcalc.approx import numeric

    n, d, d_v = _shape(data, n, d, d)
    check_spectrum(n)
    rows = []
    if hooks is not None:
        hooks.start("spectrum SVDs", len(scales))
    for scale in scales:
        q, k, _ = _data(data, n, d, d_v, scale, seed)
        sp = numeric.spectrum(q, k, causal)
        for name, svals, ranks in (("attention", sp.attention, sp.rank_attention), ("scores QKᵀ", sp.scores, sp.rank_scores)):
            rows.append(as_row(SpectrumRow(matrix=name, scale=scale, n=n, d=d, s_1=float(svals[0]), rank_90=ranks[0.9],
                                           rank_99=ranks[0.99], rank_999=ranks[0.999],
                                           singular_values=[float(x) for x in svals[:16]])))
        if hooks is not None:
            hooks.advance("spectrum SVDs")
    return rows


# The README's table of costs for one concrete setting (a test keeps the README equal to it)
README_SETTING = (4096, 128)  # n, d = d_v
README_METHODS: list[tuple[str, str, dict[str, int | bool]]] = [
    ("exact (causal)", "exact", {"causal": True}), ("exact (non-causal)", "exact", {"causal": False}),
    ("window w=512", "window", {"w": 512}),
    ("Longformer w=512, g=16", "longformer", {"w": 512, "g": 16}), ("BigBird b=64, r=3", "bigbird", {"b": 64, "r": 3}),
    ("Reformer LSH c=64, 2 rounds", "reformer_lsh", {"c": 64, "n_r": 2}), ("Linformer k=256", "linformer", {"k": 256}),
    ("Nyström m=64, T=6", "nystrom", {"m": 64, "T": 6}), ("Performer r=256 (causal)", "performer", {"r": 256, "causal": True}),
    ("cosFormer (causal)", "cosformer", {"causal": True}), ("Loki r=32, k=512", "loki", {"r": 32, "k": 512}),
]


def readme_cost_table() -> str:
    """The README's cost table: each method at n = 4096, d = d_v = 128, one head (kvcalc.approx.analytic)."""
    from kvcalc.approx.analytic import cost

    n, d = README_SETTING
    lines = ["| Method | Prefill FLOPs | Decode FLOPs at n | Decode state (elements) |", "|---|---:|---:|---:|"]
    for label, method, params in README_METHODS:
        c = cost(method, n, d, d, **params)
        decode = f"{c.decode_flops:,}" if c.decode_flops is not None else "– (no causal decode)"
        state = f"{c.state_elements:,} ({c.state_kind})" if c.state_kind != "none" else "–"
        lines.append(f"| {label} | {c.prefill_flops:,} | {decode} | {state} |")
    return "\n".join(lines)
