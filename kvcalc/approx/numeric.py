"""NumPy reference implementations of approximate attention for one head, with every matrix product counted.

Each method takes one head's q [s, d], k [t, d], v [t, e] (float64; s = t = n) and returns (out [s, e], P), where P
[s, t] is the attention matrix the method implies (rows are the weights given to each value; None where a method has
none worth forming). Every matrix product goes through a `FlopCounter` (2·m·n·k per product; `einsum` counts each
term; `count` the stated elementwise work), so the analytic costs of issue 12 can be checked against executed FLOPs.
Elementwise work (exp, softmax, masks) is not counted unless a comment says so.
Causal products are counted as a causal kernel executes them (issue 12 acceptance: counted = analytic, whose causal
prefill sums over the tri(n) = n(n+1)/2 visible pairs, kvcalc.approx.analytic): where a method forms the masked
[s, t] product densely for clarity, it runs through a scratch counter and `_count_causal` books tri(n)/n² of it.

Legend: s query position, t key position, d q/k head dim, e value head dim, r random features, m landmarks,
w window, c chunk, j projected length (Linformer k), h head (TPA), a/b/f TPA ranks R_Q/R_K/R_V.
Scores are scaled by 1/√d as in softmax attention; the linear-attention kernels (Performer, cosFormer) use their
papers' own scalings, stated where they are built.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kvcalc.attention.base import keys_seen, tri
from kvcalc.backend.ops import FlopCounter

Result = tuple[np.ndarray, "np.ndarray | None"]


def _counter(counter: FlopCounter | None) -> FlopCounter:
    return counter if counter is not None else FlopCounter()


def _count_causal(c: FlopCounter, dense: FlopCounter, n: int) -> None:
    """Book into `c` what a causal kernel executes of the dense [n, n]-pair products counted in `dense`: tri(n) of
    the n² (query, key) pairs (each such product's count is a multiple of n², so the result is exact)."""
    for component, flops in dense.by_component.items():
        assert flops % (n * n) == 0, (component, flops, n)
        c.count(component, flops // (n * n) * tri(n))


def _softmax_rows(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; -inf entries get weight 0 (a row must keep one finite entry)."""
    e = np.exp(scores - np.max(scores, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def _causal_mask(n: int) -> np.ndarray:
    return np.tril(np.ones((n, n), dtype=bool))  # [s, t]: key t visible to query s when t <= s


def scores(q: np.ndarray, k: np.ndarray, counter: FlopCounter | None = None) -> np.ndarray:
    """QKᵀ/√d: [s, d], [t, d] -> [s, t]."""
    return _counter(counter).matmul("approx/scores", q, k.T) / np.sqrt(q.shape[-1])


def attention_matrix(q: np.ndarray, k: np.ndarray, causal: bool = False, counter: FlopCounter | None = None) -> np.ndarray:
    """softmax(QKᵀ/√d), causally masked if asked: [s, d], [t, d] -> [s, t]."""
    z = scores(q, k, counter)
    if causal:
        z = np.where(_causal_mask(z.shape[0]), z, -np.inf)
    return _softmax_rows(z)


# --- exact and sparse -------------------------------------------------------------------------------------------


def exact(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False, counter: FlopCounter | None = None) -> Result:
    """softmax(QKᵀ/√d)V: [s, d], [t, d], [t, e] -> [s, e], P [s, t].

    Counts 2·n²·(d + e) FLOPs, or causal 2·tri(n)·(d + e): the masked square is computed densely here but counted
    as a causal kernel (FlashAttention's causal mode, `window(w=n)`) executes it, the visible pairs only.
    """
    c = _counter(counter)
    run = FlopCounter() if causal else c  # causal: dense products on a scratch counter, booked triangularly below
    p = attention_matrix(q, k, causal, run)
    out = run.matmul("approx/values", p, v)
    if causal:
        _count_causal(c, run, q.shape[0])
    return out, p


def window(q: np.ndarray, k: np.ndarray, v: np.ndarray, w: int, counter: FlopCounter | None = None) -> Result:
    """Causal sliding window: query i sees keys max(0, i-w+1)..i (w keys including itself): -> [s, e], P [s, t].

    Row by row, so the counted FLOPs are exactly 2·(d + e)·Σ_i min(i+1, w) (= 4d[w(w+1)/2 + (n-w)w] when e = d, w <= n).
    """
    c = _counter(counter)
    n = q.shape[0]
    out = np.zeros((n, v.shape[1]))
    p = np.zeros((n, n))
    for i in range(n):
        lo = max(0, i - w + 1)
        row = _softmax_rows(scores(q[i : i + 1], k[lo : i + 1], c))  # [1, d], [w_i, d] -> [1, w_i]
        out[i] = c.matmul("approx/values", row, v[lo : i + 1])[0]
        p[i, lo : i + 1] = row[0]
    return out, p


def topk(q: np.ndarray, k: np.ndarray, v: np.ndarray, k_keep: int, causal: bool = False, counter: FlopCounter | None = None) -> Result:
    """The oracle sparse method: keep each row's k_keep largest scores (of the visible ones), softmax over them.

    Counts the full score matrix (2·n²·d, the oracle must see every score) and the sparse values product 2·n·k·e;
    causal, as a causal kernel runs them: the visible scores 2·tri(n)·d and 2·Σ_i min(i, k)·e (rows with fewer than
    k visible keys gather only those). Returns out [s, e] and P [s, t] (zero off the kept set); `topk_indices` gives the kept set itself.
    """
    c = _counter(counter)
    run = FlopCounter() if causal else c  # causal: counted as executed, below
    z = scores(q, k, run)
    if causal:
        z = np.where(_causal_mask(z.shape[0]), z, -np.inf)
        _count_causal(c, run, z.shape[0])
    idx = topk_indices(z, k_keep)  # [s, k]
    kept = np.take_along_axis(z, idx, axis=1)  # [s, k]; -inf where a causal row has fewer than k visible keys
    w = _softmax_rows(kept)
    out = run.einsum("approx/values", "sk,ske->se", w, v[idx])  # v[idx]: [s, k, e]
    if causal:
        c.count("approx/values", 2 * keys_seen(z.shape[0], idx.shape[1]) * v.shape[1])  # Σ_i min(i, k) kept pairs
    p = np.zeros_like(z)
    np.put_along_axis(p, idx, w, axis=1)
    return out, p


def topk_indices(matrix: np.ndarray, k_keep: int) -> np.ndarray:
    """Column indices of each row's k_keep largest entries, largest first (ties to the lower index): [s, t] -> [s, k].

    What a stable argsort of -matrix keeps, found without sorting the rows: each row's k-th largest value (a
    partition), every entry above it, the lowest-indexed entries equal to it until k are kept, then those k sorted."""
    rows, cols = matrix.shape
    k_keep = min(k_keep, cols)
    if k_keep == 0:
        return np.zeros((rows, 0), dtype=np.intp)
    kth = np.partition(matrix, cols - k_keep, axis=1)[:, cols - k_keep, None]
    above, tied = matrix > kth, matrix == kth
    room = k_keep - above.sum(axis=1, keepdims=True)  # the tied entries each row still takes, lowest index first
    kept = above | (tied & (np.cumsum(tied, axis=1) <= room))
    idx = np.nonzero(kept)[1].reshape(rows, k_keep)  # ascending column order
    order = np.argsort(-np.take_along_axis(matrix, idx, axis=1), axis=1, kind="stable")
    return np.take_along_axis(idx, order, axis=1)


# --- LSH (Reformer) ---------------------------------------------------------------------------------------------


def lsh_buckets(x: np.ndarray, n_buckets: int, rng: np.random.Generator, counter: FlopCounter | None = None) -> np.ndarray:
    """Angular LSH (Kitaev et al. 2020, §2; Andoni et al. 2015): h(x) = argmax([xR; -xR]) for a random R [d, n_b/2].

    One bucket (n_buckets = 1) puts every vector in bucket 0. [s, d] -> [s] ints in 0..n_buckets-1.
    Counts the rotation xR, 2·s·d·n_b/2: the method's own product, as Performer's feature map is (reformer-pytorch
    hash_vectors einsum 'btf,bfhi->bhti'; kvcalc.approx.analytic.reformer_lsh "hash").
    """
    if n_buckets == 1:
        return np.zeros(x.shape[0], dtype=np.int64)
    if n_buckets % 2:
        raise ValueError(f"n_buckets must be 1 or even, got {n_buckets}")
    rot = _counter(counter).matmul("approx/hash", x, rng.standard_normal((x.shape[1], n_buckets // 2)))  # [s, n_b/2]
    return np.argmax(np.concatenate([rot, -rot], axis=1), axis=1)


def lsh(
    qk: np.ndarray,
    v: np.ndarray,
    n_buckets: int,
    n_rounds: int,
    chunk: int,
    rng: np.random.Generator | None = None,
    causal: bool = False,
    counter: FlopCounter | None = None,
) -> Result:
    """Reformer shared-QK LSH attention: [s, d] (shared queries/keys), [t, e] -> [s, e], P [s, t].

    What runs, per round (Kitaev et al. 2020, §2–3): keys are the unit-normalised queries k_j = q_j/‖q_j‖; both are
    hashed with one angular LSH; positions are sorted by (bucket, position) and cut into chunks of `chunk`; each chunk's
    queries attend to the keys of their own chunk and of the previous chunk (cyclically, as reformer-pytorch's
    look-one-back; no look-back when there is one chunk), restricted to keys in the query's own bucket (and, if causal,
    at or before its position). A token may attend to itself (the paper masks self unless nothing else is visible: not
    done here, so that one bucket equals exact attention on (q, q/‖q‖)). Rounds are combined with weights
    softmax over rounds of each round's log-sum-exp; a key found in several rounds is counted once per round (no
    de-duplication, as reformer-pytorch by default).
    Requires n % chunk == 0 or chunk >= n. Counts 2·c·(2c)·(d + e) per chunk and round (c·c·... with one chunk), dense
    within each chunk pair even if causal (reformer-pytorch masks there too), and the hash 2·n·d·n_b/2 per round.
    """
    c = _counter(counter)
    rng = rng if rng is not None else np.random.default_rng(0)
    n, d = qk.shape
    chunk = min(chunk, n)
    if n % chunk:
        raise ValueError(f"n = {n} is not a multiple of chunk = {chunk}")
    k = qk / np.linalg.norm(qk, axis=1, keepdims=True)
    n_chunks = n // chunk
    outs, lses = np.zeros((n_rounds, n, v.shape[1])), np.zeros((n_rounds, n))
    ps = np.zeros((n_rounds, n, n))
    for r in range(n_rounds):
        buckets = lsh_buckets(qk, n_buckets, rng, c)
        order = np.argsort(buckets * n + np.arange(n), kind="stable")  # by bucket, then position
        for ci in range(n_chunks):
            qi = order[ci * chunk : (ci + 1) * chunk]  # [c] query positions
            ki = qi if n_chunks == 1 else np.concatenate([qi, order[((ci - 1) % n_chunks) * chunk :][:chunk]])  # [c or 2c]
            z = scores(qk[qi], k[ki], c)  # [c, d], [c2, d] -> [c, c2]
            visible = buckets[qi][:, None] == buckets[ki][None, :]
            if causal:
                visible &= ki[None, :] <= qi[:, None]
            z = np.where(visible, z, -np.inf)  # each query sees itself, so no row is empty
            peak = np.max(z, axis=1, keepdims=True)
            lse = peak[:, 0] + np.log(np.sum(np.exp(z - peak), axis=1))
            w = np.exp(z - lse[:, None])  # [c, c2]
            outs[r, qi] = c.matmul("approx/values", w, v[ki])
            lses[r, qi] = lse
            np.add.at(ps[r], (qi[:, None], ki[None, :]), w)
    weight = _softmax_rows(lses.T).T  # [rounds, s]: each round's share of the query's total mass
    out = np.einsum("rs,rse->se", weight, outs)
    return out, np.einsum("rs,rst->st", weight, ps)


# --- low rank ---------------------------------------------------------------------------------------------------


def linformer(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    k_proj: int,
    mode: str = "random",
    rng: np.random.Generator | None = None,
    counter: FlopCounter | None = None,
) -> Result:
    """Linformer (Wang et al. 2020): softmax(Q(EK)ᵀ/√d)(FV) with E, F [j, t] projecting along the sequence.

    mode "random": E, F independent with N(0, 1/j) entries (the paper's JL projection, Thm 1).
    mode "svd": E = F = U_jᵀ, U_j the top-j left singular vectors of the [t, d+e] matrix [K V]: the rank-j
    projection along the sequence that keeps the most of the attention's inputs K and V (Eckart–Young; a
    data-dependent oracle, not something a trained Linformer has).
    Returns out [s, e] and the implied P = softmax(Q(EK)ᵀ/√d) F [s, t]. Counts 2·j·n·(d + e) for EK and FV,
    and 2·n·j·(d + e) for the scores and values.
    """
    c = _counter(counter)
    n = k.shape[0]
    if mode == "random":
        rng = rng if rng is not None else np.random.default_rng(0)
        e_proj = rng.standard_normal((k_proj, n)) / np.sqrt(k_proj)
        f_proj = rng.standard_normal((k_proj, n)) / np.sqrt(k_proj)
    elif mode == "svd":
        u = np.linalg.svd(np.concatenate([k, v], axis=1), full_matrices=True)[0][:, :k_proj]  # [t, j]
        # a singular vector's sign is LAPACK's choice, and flipping one flips a score column and its value row
        # together, which the softmax does not undo: each is signed so its entries sum to >= 0 (a pooling along
        # the sequence, as Linformer's projections act), so the error does not depend on the LAPACK build
        e_proj = f_proj = (u * np.where(u.sum(axis=0) < 0, -1.0, 1.0)).T
    else:
        raise ValueError(f"mode must be 'random' or 'svd', got {mode!r}")
    k_low = c.matmul("approx/project", e_proj, k)  # [j, t], [t, d] -> [j, d]
    v_low = c.matmul("approx/project", f_proj, v)  # [j, t], [t, e] -> [j, e]
    p_low = _softmax_rows(scores(q, k_low, c))  # [s, j]
    return c.matmul("approx/values", p_low, v_low), p_low @ f_proj


def segment_means(x: np.ndarray, m: int) -> np.ndarray:
    """Nyströmformer landmarks: means of m equal consecutive segments: [t, d] -> [m, d] (n % m == 0)."""
    n = x.shape[0]
    if n % m:
        raise ValueError(f"n = {n} is not a multiple of m = {m} landmarks")
    return x.reshape(m, n // m, x.shape[1]).mean(axis=1)


def iterative_pinv(a: np.ndarray, iters: int, counter: FlopCounter | None = None) -> np.ndarray:
    """Moore–Penrose pseudo-inverse by the Nyströmformer iteration (Xiong et al. 2021 §3; Razavi et al. 2014).

    Z_0 = Aᵀ / (‖A‖_1 ‖A‖_∞); Z ← ¼ Z (13I − AZ(15I − AZ(7I − AZ))). Four m×m products per iteration: 8·m³ FLOPs.
    [m, m] -> [m, m].
    """
    c = _counter(counter)
    eye = np.eye(a.shape[0])
    z = a.T / (np.max(np.sum(np.abs(a), axis=0)) * np.max(np.sum(np.abs(a), axis=1)))
    for _ in range(iters):
        az = c.matmul("approx/pinv", a, z)
        inner = c.matmul("approx/pinv", az, 7 * eye - az)
        inner = c.matmul("approx/pinv", az, 15 * eye - inner)
        z = 0.25 * c.matmul("approx/pinv", z, 13 * eye - inner)
    return z


def nystrom(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, m: int, iters: int = 6, exact_pinv: bool = False, counter: FlopCounter | None = None
) -> Result:
    """Nyströmformer (Xiong et al. 2021): softmax(QK̃ᵀ) Z softmax(Q̃Kᵀ) V with segment-means landmarks Q̃, K̃ [m, d].

    Z = pinv(softmax(Q̃K̃ᵀ)) by `iters` iterations of `iterative_pinv`, or numpy's SVD pinv (exact_pinv, uncounted).
    With m = n each segment is one token, every kernel is P itself, and P P⁺ P = P gives exact attention.
    Non-causal. Returns out [s, e] and P̂ = F Z B [s, t] (formed outside the counter). Counts 2n·m·d twice (F, B),
    2m²d (A), 2n·m² (F·Z), 2·n·m·e (B V), 2n·m·e ((FZ)·BV), plus 8·iters·m³: the product order of the reference,
    (kernel_1 · iterative_inv(kernel_2)) · (kernel_3 · V) (mlpen/Nystromformer NystromAttention.forward;
    lucidrains/nystrom-attention (attn1 @ attn2_inv) @ (attn3 @ v)), not the cheaper F·(Z·BV).
    """
    c = _counter(counter)
    q_land, k_land = segment_means(q, m), segment_means(k, m)
    f = _softmax_rows(scores(q, k_land, c))  # [s, m]
    a = _softmax_rows(scores(q_land, k_land, c))  # [m, m]
    b = _softmax_rows(scores(q_land, k, c))  # [m, t]
    z = np.linalg.pinv(a) if exact_pinv else iterative_pinv(a, iters, c)
    bv = c.matmul("approx/values", b, v)  # [m, e]
    out = c.matmul("approx/values", c.matmul("approx/values", f, z), bv)  # reference order, see above
    return out, f @ z @ b


# --- kernels and random features --------------------------------------------------------------------------------


def orthogonal_gaussian(r: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """FAVOR+ projection W [r, d]: stacked d×d blocks with orthonormal rows, each row rescaled to the norm of a
    d-dim Gaussian vector, so rows are marginally N(0, I_d) but orthogonal within a block (Choromanski et al. 2021,
    §2.4; google-research performer/fast_attention, scaling=0)."""
    blocks = []
    for _ in range(-(-r // d)):
        qmat, rmat = np.linalg.qr(rng.standard_normal((d, d)))
        blocks.append((qmat * np.sign(np.diag(rmat))).T)  # sign fix: Haar-uniform rotation
    w = np.concatenate(blocks)[:r]
    return np.linalg.norm(rng.standard_normal((r, d)), axis=1)[:, None] * w


def favor_log_features(x: np.ndarray, w: np.ndarray, counter: FlopCounter | None = None) -> np.ndarray:
    """log of the positive random features before their 1/√r: Wx' − ‖x'‖²/2 with x' = x/d^¼. [s, d] -> [s, r];
    counts 2·s·r·d."""
    xs = x / x.shape[1] ** 0.25
    proj = _counter(counter).matmul("approx/features", xs, w.T)  # [s, r]
    return proj - 0.5 * np.sum(xs * xs, axis=1, keepdims=True)


def favor_features(x: np.ndarray, w: np.ndarray, is_query: bool, counter: FlopCounter | None = None) -> np.ndarray:
    """Positive random features φ(x) = exp(Wx' − ‖x'‖²/2)/√r with x' = x/d^¼, so E[φ(q)·φ(k)] = exp(q·k/√d).

    A query row's features are divided by exp(its max), the keys' by exp(the max over all keys and features)
    (performer-pytorch softmax_kernel: data_dash − max per query, − max over the keys): each factor is common to a
    query's numerator and denominator, so it cancels. [s, d], [r, d] -> [s, r]; counts 2·s·r·d.
    """
    proj = favor_log_features(x, w, counter)
    proj -= np.max(proj, axis=1, keepdims=True) if is_query else np.max(proj)
    return np.exp(proj) / np.sqrt(w.shape[0])


def key_shifts(log_k: np.ndarray, causal: bool) -> np.ndarray:
    """What each key's features are divided by, as a log [t]: the max over every key's log-features, or (causal) the
    running max over the keys up to it, so that a query's visible keys never all underflow against a later, larger
    key (an audit found NaN outputs at --scale 16). A query's readout rescales the keys before it to its own shift,
    exp(shift_j − shift_i) <= 1: one factor common to its numerator and denominator."""
    top = np.max(log_k, axis=1)
    return np.maximum.accumulate(top) if causal else np.full(top.shape, np.max(top))


def performer(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    r: int,
    rng: np.random.Generator | None = None,
    causal: bool = False,
    form: str = "parallel",
    counter: FlopCounter | None = None,
) -> Result:
    """Performer FAVOR+ (Choromanski et al. 2021) with r positive orthogonal random features: -> [s, e], P or None.

    out_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / φ(q_i)ᵀ Σ_j φ(k_j), the sums over all j, or j <= i if causal. Forms:
    "parallel" the quadratic form: forms Φ_Q Φ_Kᵀ [s, t] (masked if causal) and returns it normalised as P;
    "prefix" the linear form, causal by prefix sums over t of φ(k_t) ⊗ [v_t, 1] (Katharopoulos et al. 2020);
    "recurrent" token by token with a running state S [r, e] and normaliser z [r] (the decode form).
    The "prefix" and "recurrent" forms return P = None.
    """
    c = _counter(counter)
    w = orthogonal_gaussian(r, q.shape[1], rng if rng is not None else np.random.default_rng(0))
    phi_q, log_k = favor_features(q, w, True, c), favor_log_features(k, w, c)  # [s, r], [t, r]
    shift = key_shifts(log_k, causal)
    phi_k = np.exp(log_k - shift[:, None]) / np.sqrt(r)
    if form == "parallel":  # quadratic: 2·n²·(r + e), or causal 2·tri(n)·(r + e) (counted as executed, see exact)
        run = FlopCounter() if causal else c
        a = run.matmul("approx/scores", phi_q, phi_k.T)  # [s, t]
        if causal:  # key j to query i's shift, exp(shift_j − shift_i); 0 past the diagonal
            a = a * np.exp(np.where(_causal_mask(a.shape[0]), shift[None, :] - shift[:, None], -np.inf))
        p = a / np.sum(a, axis=1, keepdims=True)
        out = run.matmul("approx/values", p, v)
        if causal:
            _count_causal(c, run, a.shape[0])
        return out, p
    v1 = np.concatenate([v, np.ones((v.shape[0], 1))], axis=1)  # [t, e+1]: the last column gives the normaliser
    if form == "prefix":
        num = _linear_readout(phi_q, phi_k, v1, causal, c, shift)
    elif form == "recurrent":
        num = _recurrent_readout(phi_q, phi_k, v1, causal, c, shift)
    else:
        raise ValueError(f"form must be 'parallel', 'prefix' or 'recurrent', got {form!r}")
    return num[:, :-1] / num[:, -1:], None


def _linear_readout(phi_q: np.ndarray, phi_k: np.ndarray, v1: np.ndarray, causal: bool, c: FlopCounter,
                    shift: np.ndarray | None = None) -> np.ndarray:
    """Φ_Q (Φ_Kᵀ V1), or with causal prefix sums Σ_{j<=i} φ(k_j) ⊗ v1_j: [s, r], [t, r], [t, e+1] -> [s, e+1].

    v1 = [V, 1]: its last column gives the normaliser state z = Σ_j φ(k_j), a sum and not a product, so it is formed
    uncounted (performer-pytorch linear_attention: k.sum(dim=-2); OpenNLPLab/cosFormer: torch.sum(k_, axis=1));
    the readout φ(q)·z is a product and is counted. Counts 4·s·r·e + 2·s·r, causal or not: the state's multiplies
    and adds are Φ_Kᵀ V's 2·t·r·e (kvcalc.approx.analytic.performer "kv", "mix", "norm"). `shift` (causal): each
    key's features were divided by exp(shift_j), non-decreasing; the sum up to i is rescaled to exp(shift_i) where
    the shift grows (`key_shifts`; a stabiliser, uncounted).
    """
    v = v1[:, :-1]  # [t, e]
    if not causal:
        state = c.matmul("approx/state", phi_k.T, v)  # [r, e]
        return c.matmul("approx/values", phi_q, np.concatenate([state, np.sum(phi_k, axis=0)[:, None]], axis=1))
    outer = c.einsum("approx/state", "tr,te->tre", phi_k, v)  # [t, r, e]: one multiply per term
    c.count("approx/state", outer.size)  # the cumulative sum's adds, one per term (n·r·e)
    terms = np.concatenate([outer, phi_k[:, :, None]], axis=2)  # z's terms beside: its prefix sums are uncounted
    del outer  # at most two arrays of [t, r, e + 1] at once (evaluate.held_at_peak counts them)
    starts = [0] if shift is None else [0, *np.flatnonzero(np.diff(shift) > 0) + 1]  # where the shift grows
    prefix = np.empty_like(terms)
    for a, b in zip(starts, [*starts[1:], len(terms)]):
        np.cumsum(terms[a:b], axis=0, out=prefix[a:b])  # into place: no third array
        if a:  # the sums before, rescaled from the previous shift to this run's
            assert shift is not None
            prefix[a:b] += prefix[a - 1] * np.exp(shift[a - 1] - shift[a])
    return c.einsum("approx/values", "sr,sre->se", phi_q, prefix)


def _recurrent_readout(phi_q: np.ndarray, phi_k: np.ndarray, v1: np.ndarray, causal: bool, c: FlopCounter,
                       shift: np.ndarray | None = None) -> np.ndarray:
    """Token by token: S ← S + φ(k_i) v_iᵀ, out_i = φ(q_i)ᵀ S. Causal only: [s, r], [t, r], [t, e] -> [s, e]. With
    `shift` (see _linear_readout) S is rescaled where the keys' shift grows, as a streaming decoder would."""
    if not causal:
        raise ValueError("the recurrent form is the causal one")
    state = np.zeros((phi_k.shape[1], v1.shape[1]))  # [r, e+1]: S and, in the last column, z
    out = np.zeros((phi_q.shape[0], v1.shape[1]))
    for i in range(phi_q.shape[0]):
        if shift is not None and i and shift[i] > shift[i - 1]:
            state *= np.exp(shift[i - 1] - shift[i])  # a stabiliser, uncounted
        # S += φ(k_i) v_iᵀ: counted 2·r·e, its multiplies and the adds into S (analytic performer decode "S += φ(k)vᵀ")
        state[:, :-1] += c.matmul("approx/state", phi_k[i][:, None], v1[i][None, :-1])
        state[:, -1] += phi_k[i]  # z += φ(k_i): a sum, not counted (as in _linear_readout)
        out[i] = c.matmul("approx/values", phi_q[i][None, :], state)[0]
    return out


def cosformer(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False, eps: float = 1e-6, counter: FlopCounter | None = None) -> Result:
    """cosFormer (Qin et al. 2022): ReLU features re-weighted by cos(π/2·(i − j)/M), M = n, positions 1..n.

    cos(π(i−j)/2M) = cos(πi/2M)cos(πj/2M) + sin(πi/2M)sin(πj/2M), so the linear form runs on [φ(q)·cos, φ(q)·sin]
    [s, 2d] against [φ(k)·cos, φ(k)·sin] [t, 2d] (OpenNLPLab/cosFormer; no 1/√d: the kernel is its own). The
    denominator is clamped at eps, as there. Causal by prefix sums. Returns out [s, e] and the implied P [s, t]
    (formed outside the counter from the quadratic form).
    """
    c = _counter(counter)
    n = q.shape[0]
    angle = np.pi / 2 * np.arange(1, n + 1)[:, None] / n  # [s, 1]
    fq, fk = np.maximum(q, 0.0), np.maximum(k, 0.0)
    phi_q = np.concatenate([fq * np.cos(angle), fq * np.sin(angle)], axis=1)  # [s, 2d]
    phi_k = np.concatenate([fk * np.cos(angle), fk * np.sin(angle)], axis=1)  # [t, 2d]
    v1 = np.concatenate([v, np.ones((n, 1))], axis=1)
    num = _linear_readout(phi_q, phi_k, v1, causal, c)
    out = num[:, :-1] / np.maximum(num[:, -1:], eps)
    a = phi_q @ phi_k.T
    if causal:
        a = np.where(_causal_mask(n), a, 0.0)
    return out, a / np.maximum(np.sum(a, axis=1, keepdims=True), eps)


# --- Tensor Product Attention -----------------------------------------------------------------------------------


class TPAFactors(NamedTuple):
    """One layer's TPA factors (Zhang et al. 2025, §3.1): X_t = (1/R) Σ_r a_r(x_t) ⊗ b_r(x_t) for X in Q, K, V.

    a_q [s, R_Q, h], b_q [s, R_Q, d]; a_k [t, R_K, h], b_k [t, R_K, d]; a_v [t, R_V, h], b_v [t, R_V, d].
    """

    a_q: np.ndarray
    b_q: np.ndarray
    a_k: np.ndarray
    b_k: np.ndarray
    a_v: np.ndarray
    b_v: np.ndarray


def tpa_random_factors(n: int, n_heads: int, head_dim: int, ranks: tuple[int, int, int], rng: np.random.Generator) -> TPAFactors:
    """Gaussian TPA factors of ranks (R_Q, R_K, R_V), standing in for the factor projections of x_t."""
    shapes = [(n, ranks[0], n_heads), (n, ranks[0], head_dim), (n, ranks[1], n_heads), (n, ranks[1], head_dim)]
    shapes += [(n, ranks[2], n_heads), (n, ranks[2], head_dim)]
    return TPAFactors(*(rng.standard_normal(s) for s in shapes))


def tpa_materialise(f: TPAFactors, counter: FlopCounter | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The expanded Q, K, V [h, n, d]: X[h, t] = (1/R) Σ_r a[t, r, h] b[t, r]. Counts 2·n·h·d·(R_Q + R_K + R_V), the
    per-token A (h × R) · B (R × d) products of tensorgi/TPA model/T6.py CPLinear (analytic tpa "factors")."""
    c = _counter(counter)
    pairs = ((f.a_q, f.b_q), (f.a_k, f.b_k), (f.a_v, f.b_v))
    expand = [c.einsum("approx/factors", "trh,trd->htd", a, b) / a.shape[1] for a, b in pairs]
    return expand[0], expand[1], expand[2]


def tpa_materialised(f: TPAFactors, causal: bool = False, counter: FlopCounter | None = None) -> np.ndarray:
    """TPA by expanding Q, K, V and running exact attention per head, as T6.py's prefill: -> [h, s, d]."""
    qh, kh, vh = tpa_materialise(f, counter)
    return np.stack([exact(qh[h], kh[h], vh[h], causal, counter)[0] for h in range(qh.shape[0])])


def tpa(f: TPAFactors, causal: bool = False, counter: FlopCounter | None = None) -> np.ndarray:
    """TPA's factorised attention: scores and values contracted through the factors, Q, K, V never formed: -> [h, s, d].

    q_s·k_t (head h) = (1/R_Q R_K) Σ_{a,b} a_q[s,a,h] a_k[t,b,h] (b_q[s,a]·b_k[t,b]). Counts 2·n²·R_Q·R_K·d (the
    b-products, shared by all heads), 2·n²·R_Q·R_K·h and 2·n²·R_Q·h (head mixing), h·n²·R_V (weights × a_v) and
    2·h·n²·R_V·d (values), or causal tri(n)/n² of all that (counted as executed, see exact). RoPE on b_q, b_k (T6) is left out: it does not change the factorised/materialised identity.
    """
    c = _counter(counter)
    run = FlopCounter() if causal else c  # causal: every product here is over (s, t) pairs; booked triangularly
    n, r_q, d = f.b_q.shape
    r_k = f.b_k.shape[1]
    bb = run.matmul("approx/scores", f.b_q.reshape(n * r_q, d), f.b_k.reshape(n * r_k, d).T)  # [s·a, t·b]
    bb = bb.reshape(n, r_q, n, r_k).transpose(0, 2, 1, 3)  # [s, t, a, b]
    mixed = run.einsum("approx/scores", "stab,tbh->stah", bb, f.a_k)  # [s, t, a, h]
    z = run.einsum("approx/scores", "stah,sah->hst", mixed, f.a_q) / (r_q * r_k * np.sqrt(d))
    if causal:
        z = np.where(_causal_mask(n), z, -np.inf)
    p = _softmax_rows(z)  # [h, s, t]
    weighted = run.einsum("approx/values", "hst,tfh->hstf", p, f.a_v)  # [h, s, t, R_V]
    out = run.einsum("approx/values", "hstf,tfd->hsd", weighted, f.b_v) / f.a_v.shape[1]
    if causal:
        _count_causal(c, run, n)
    return out


# --- error metrics and spectrum ---------------------------------------------------------------------------------


def rel_frobenius(approx: np.ndarray, reference: np.ndarray) -> float:
    """‖approx − reference‖_F / ‖reference‖_F (0 when both are zero)."""
    diff, ref = float(np.linalg.norm(approx - reference)), float(np.linalg.norm(reference))
    return diff / ref if ref else (0.0 if diff == 0 else float("inf"))


def captured_mass(kept: np.ndarray, exact_matrix: np.ndarray) -> float:
    """Mean over rows of the exact attention mass on the kept set: Σ_{j kept} P_ij / Σ_j P_ij.

    `kept` is a boolean mask [s, t], or an approximate attention matrix whose nonzero entries are the kept set.
    """
    mask = kept if kept.dtype == bool else kept != 0
    return float(np.mean(np.sum(np.where(mask, exact_matrix, 0.0), axis=1) / np.sum(exact_matrix, axis=1)))


def recall_at_k(kept: np.ndarray, exact_matrix: np.ndarray, k: int) -> float:
    """Mean over rows of |kept_i ∩ top-k_i| / |top-k_i|, top-k_i the row's k largest exact entries among its nonzero
    ones (a causal row with fewer than k visible keys has fewer). `kept`: indices [s, k'] or a boolean mask [s, t]."""
    top = topk_indices(exact_matrix, k)
    relevant = np.take_along_axis(exact_matrix, top, axis=1) > 0  # [s, k]
    if kept.dtype == bool:
        hit = np.take_along_axis(kept, top, axis=1)
    else:
        hit = np.array([np.isin(top[i], kept[i]) for i in range(top.shape[0])])
    return float(np.mean(np.sum(hit & relevant, axis=1) / np.maximum(np.sum(relevant, axis=1), 1)))


ENERGY_FRACTIONS = (0.9, 0.99, 0.999)


def rank_for_energy(s: np.ndarray, fraction: float) -> int:
    """Smallest r with Σ_{i<r} s_i² >= fraction·Σ_i s_i² (s sorted descending, as numpy's SVD returns them)."""
    energy = np.cumsum(s.astype(np.float64) ** 2)
    return int(np.searchsorted(energy, fraction * energy[-1], side="left")) + 1


class Spectrum(NamedTuple):
    """Singular values of the attention matrix P and of the scores QKᵀ, and the ranks for each energy fraction."""

    attention: np.ndarray  # [min(s, t)]
    scores: np.ndarray  # [min(s, t)]
    rank_attention: dict[float, int]
    rank_scores: dict[float, int]


def spectrum(q: np.ndarray, k: np.ndarray, causal: bool = False) -> Spectrum:
    """The survey's low-rank evidence on given data: singular values of P = softmax(QKᵀ/√d) and of QKᵀ (V plays no
    part), with `rank_for_energy` at 90%, 99% and 99.9%."""
    s_attn = np.linalg.svd(attention_matrix(q, k, causal), compute_uv=False)
    s_scores = np.linalg.svd(q @ k.T, compute_uv=False)
    return Spectrum(
        s_attn,
        s_scores,
        {f: rank_for_energy(s_attn, f) for f in ENERGY_FRACTIONS},
        {f: rank_for_energy(s_scores, f) for f in ENERGY_FRACTIONS},
    )


# --- data -------------------------------------------------------------------------------------------------------

Data = tuple[np.ndarray, np.ndarray, np.ndarray]


def gaussian(n: int, d: int, d_v: int, scale: float, rng: np.random.Generator) -> Data:
    """q, k with N(0, scale²) entries (scores q·k/√d then have standard deviation scale²), v with N(0, 1)."""
    return scale * rng.standard_normal((n, d)), scale * rng.standard_normal((n, d)), rng.standard_normal((n, d_v))


def clustered(n: int, d: int, d_v: int, scale: float, rng: np.random.Generator, n_clusters: int = 8, spread: float = 0.3) -> Data:
    """Queries and keys near n_clusters shared unit-variance centres (noise `spread`), times scale: attention is
    block-structured, each query favouring the keys of its own cluster."""
    centres = rng.standard_normal((n_clusters, d))
    q = centres[rng.integers(n_clusters, size=n)] + spread * rng.standard_normal((n, d))
    k = centres[rng.integers(n_clusters, size=n)] + spread * rng.standard_normal((n, d))
    return scale * q, scale * k, rng.standard_normal((n, d_v))


def spiky(n: int, d: int, d_v: int, scale: float, rng: np.random.Generator, noise: float = 0.1) -> Data:
    """Each query has one matching key (a random permutation of the queries plus `noise`), times scale: its score
    ≈ scale²·√d stands out of the others (≈ scale²), so as scale grows each row's mass goes to one key."""
    q = rng.standard_normal((n, d))
    k = q[rng.permutation(n)] + noise * rng.standard_normal((n, d))
    return scale * q, scale * k, rng.standard_normal((n, d_v))


def low_rank(n: int, d: int, rank: int, rng: np.random.Generator, d_v: int | None = None) -> Data:
    """q = G_Q B, k = G_K B with G [n, rank] Gaussian and B [rank, d] orthonormal rows: QKᵀ = G_Q G_Kᵀ has rank
    exactly `rank` (almost surely, rank <= min(n, d)); v [n, d_v or d] Gaussian."""
    basis = np.linalg.qr(rng.standard_normal((d, rank)))[0].T  # [rank, d]
    q = rng.standard_normal((n, rank)) @ basis
    k = rng.standard_normal((n, rank)) @ basis
    return q, k, rng.standard_normal((n, d_v if d_v is not None else d))
