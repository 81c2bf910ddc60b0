"""Issue 12 acceptance: every implemented method's counted FLOPs equal its analytic formula at two sizes.

Each NumPy method (kvcalc.approx.numeric) runs with a FlopCounter; its total must equal, exactly, the prefill FLOPs of
its closed form (kvcalc.approx.analytic). The conventions they share:
- only products that sum over an index count (2·m·n·k); softmax, feature nonlinearities, the normaliser's sum
  Σ_j φ(k_j) and sorting are not, while the readout φ(q)·z is;
- causal products count the tri(n) visible pairs a causal kernel executes, even where NumPy forms the masked square;
- Nyström multiplies in the reference order (kernel_1·Z)·(kernel_3·V) (mlpen/Nystromformer);
- LSH counts its hash rotation xR, as Performer counts its feature map;
- TPA's prefill is T6.py's: the factors expanded to per-head Q, K, V, then causal attention per head.

Top-k attention is the oracle sparse method: it must score every pair to choose the kept ones, then mixes k values
a row (min(i, k) for causal row i).
"""

from __future__ import annotations

import numpy as np
import pytest

from kvcalc.approx import numeric as nm
from kvcalc.approx.analytic import cost
from kvcalc.backend.ops import FlopCounter

SIZES = [(32, 8, 4), (64, 16, 12)]  # (n, d, d_v): two sizes, with d_v != d so a swapped dimension shows


def data(n: int, d: int, d_v: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return 0.5 * rng.standard_normal((n, d)), 0.5 * rng.standard_normal((n, d)), rng.standard_normal((n, d_v))


def counted(fn) -> int:
    c = FlopCounter()
    fn(c)
    return c.total()


@pytest.mark.parametrize("n,d,d_v", SIZES)
@pytest.mark.parametrize("causal", [False, True])
def test_exact(n, d, d_v, causal):
    q, k, v = data(n, d, d_v)
    got = counted(lambda c: nm.exact(q, k, v, causal, c))
    assert got == cost("exact", n, d, d_v, causal=causal).prefill_flops


@pytest.mark.parametrize("n,d,d_v", SIZES)
@pytest.mark.parametrize("w", [1, 5, 40, 100])  # 40: w >= n at the first size only; 100: at both
def test_window(n, d, d_v, w):
    q, k, v = data(n, d, d_v)
    assert counted(lambda c: nm.window(q, k, v, w, c)) == cost("window", n, d, d_v, w=w).prefill_flops


@pytest.mark.parametrize("n,d,d_v", SIZES)
@pytest.mark.parametrize("mode", ["random", "svd"])
@pytest.mark.parametrize("k_proj", [4, 16])
def test_linformer(n, d, d_v, mode, k_proj):
    q, k, v = data(n, d, d_v)
    got = counted(lambda c: nm.linformer(q, k, v, k_proj, mode, np.random.default_rng(1), c))
    assert got == cost("linformer", n, d, d_v, k=k_proj).prefill_flops


@pytest.mark.parametrize("n,d,d_v", SIZES)
@pytest.mark.parametrize("m,T", [(4, 0), (4, 3), (8, 6)])
def test_nystrom_iterative_pinv(n, d, d_v, m, T):
    q, k, v = data(n, d, d_v)
    got = counted(lambda c: nm.nystrom(q, k, v, m, iters=T, counter=c))
    assert got == cost("nystrom", n, d, d_v, m=m, T=T).prefill_flops


@pytest.mark.parametrize("n,d,d_v", SIZES)
@pytest.mark.parametrize("causal,form", [(False, "prefix"), (True, "prefix"), (True, "recurrent")])
@pytest.mark.parametrize("r", [6, 24])
def test_performer_linear_forms(n, d, d_v, causal, form, r):
    """The linear forms: non-causal Φ_Q(Φ_KᵀV) (performer-pytorch linear_attention), causal by prefix sums, and the
    token-by-token recurrence; all three cost the same, as the analytic formula says."""
    q, k, v = data(n, d, d_v)
    got = counted(lambda c: nm.performer(q, k, v, r, np.random.default_rng(2), causal, form, c))
    assert got == cost("performer", n, d, d_v, r=r, causal=causal).prefill_flops


@pytest.mark.parametrize("n,d,d_v", SIZES)
@pytest.mark.parametrize("causal", [False, True])
def test_performer_quadratic_form_is_exact_attention_on_the_features(n, d, d_v, causal):
    """form="parallel" forms Φ_QΦ_Kᵀ [n, n] (to return P): not FAVOR+'s linear algorithm, so not its formula, but the
    feature maps plus exact attention's products with r in place of d."""
    q, k, v = data(n, d, d_v)
    r = 6
    got = counted(lambda c: nm.performer(q, k, v, r, np.random.default_rng(2), causal, "parallel", c))
    features = cost("performer", n, d, d_v, r=r).prefill_breakdown["features"]
    assert got == features + cost("exact", n, r, d_v, causal=causal).prefill_flops


@pytest.mark.parametrize("n,d,d_v", SIZES)
@pytest.mark.parametrize("causal", [False, True])
def test_cosformer(n, d, d_v, causal):
    q, k, v = data(n, d, d_v)
    assert counted(lambda c: nm.cosformer(q, k, v, causal, counter=c)) == cost("cosformer", n, d, d_v, causal=causal).prefill_flops


@pytest.mark.parametrize("n,d,n_h,ranks", [(32, 8, 4, (6, 2, 2)), (64, 16, 3, (2, 1, 3))])
def test_tpa_materialised(n, d, n_h, ranks):
    """Per layer (n_h heads), causal: the expansion A·B per token and exact causal attention per head."""
    f = nm.tpa_random_factors(n, n_h, d, ranks, np.random.default_rng(3))
    got = counted(lambda c: nm.tpa_materialised(f, True, c))
    r_q, r_k, r_v = ranks
    assert got == cost("tpa", n, d, d, n_h=n_h, R_Q=r_q, R_K=r_k, R_V=r_v).prefill_flops


@pytest.mark.parametrize("n,d,d_v", SIZES)
@pytest.mark.parametrize("c_len,n_r", [(4, 1), (8, 2)])
@pytest.mark.parametrize("causal", [False, True])
def test_lsh(n, d, d_v, c_len, n_r, causal):
    """Reformer shared-QK LSH with reformer-pytorch's bucket count n_b = n / c: per round the hash 2·n·d·n_b/2 and each
    chunk of c queries against 2c keys (its own chunk and the one before), dense within chunks causal or not."""
    q, _, v = data(n, d, d_v)
    got = counted(lambda c: nm.lsh(q, v, n // c_len, n_r, c_len, np.random.default_rng(4), causal, c))
    assert got == cost("reformer_lsh", n, d, d_v, c=c_len, n_r=n_r).prefill_flops


def test_causal_counts_are_triangular_where_the_square_is_formed():
    """The masked-square forms (exact, Performer's quadratic form, TPA factorised, top-k) count tri(n)/n² of the
    square when causal; top-k's values count Σ_i min(i, k) kept pairs."""
    n, d, d_v, kk = 16, 4, 3, 5
    q, k, v = data(n, d, d_v)
    tri = n * (n + 1) // 2
    assert counted(lambda c: nm.exact(q, k, v, True, c)) == 2 * tri * (d + d_v)
    seen = sum(min(i, kk) for i in range(1, n + 1))
    assert counted(lambda c: nm.topk(q, k, v, kk, True, c)) == 2 * tri * d + 2 * seen * d_v
    assert counted(lambda c: nm.topk(q, k, v, kk, False, c)) == 2 * n * n * d + 2 * n * kk * d_v
    f = nm.tpa_random_factors(n, 2, d, (2, 3, 2), np.random.default_rng(5))
    full, causal = counted(lambda c: nm.tpa(f, False, c)), counted(lambda c: nm.tpa(f, True, c))
    assert causal * n * n == full * tri


@pytest.mark.parametrize("n,d,d_v", SIZES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("k_keep", [3, 40])  # 40: more than n keeps at the first size
def test_topk(n, d, d_v, causal, k_keep):
    q, k, v = data(n, d, d_v)
    got = counted(lambda c: nm.topk(q, k, v, min(k_keep, n), causal, c))
    assert got == cost("topk", n, d, d_v, k=min(k_keep, n), causal=causal).prefill_flops
