"""Analytic costs of approximate attention: hand-derived closed forms at small sizes, and the identities between methods."""

from __future__ import annotations

from fractions import Fraction

import pytest

from kvcalc.approx.analytic import METHODS, cost, exact, longformer, transmla_saving, window
from kvcalc.errors import KvcalcError
from kvcalc.registry import load_model

N, D, DV = 8, 4, 2  # a small head: every value below is worked by hand


def test_exact_closed_forms():
    c = cost("exact", N, D, DV, causal=True)
    assert c.prefill_flops == 432  # pairs 8·9/2 = 36; 2·36·4 + 2·36·2
    assert c.decode_flops == 2 * N * D + 2 * N * DV == 96  # one query over 8 keys
    assert (c.state_kind, c.state_elements) == ("kv", 48)  # 8 tokens × (4 + 2)
    full = cost("exact", N, D, DV, causal=False)
    assert full.prefill_flops == 768 and full.decode_flops is None  # 64 pairs × 2·(4 + 2)
    assert (full.state_kind, full.state_elements) == ("none", 0)


def test_exact_causal_decode_at_context_n():
    for n, d, d_v in ((1, 1, 1), (4096, 128, 128), (1000, 192, 128)):
        assert exact(n, d, d_v).decode_flops == 2 * n * d + 2 * n * d_v


def test_window_closed_forms():
    c = cost("window", N, D, DV, w=3)
    assert c.prefill_flops == 252  # Σ min(i, 3) = 1+2+3 + 5·3 = 21 pairs; 21·2·6
    assert (c.decode_flops, c.state_elements) == (36, 18)  # 3 keys: 2·3·6; 3 tokens × 6
    band = cost("window", N, D, DV, w=2, causal=False)  # one key each side: 8 + 2·7 = 22 pairs
    assert band.prefill_flops == 264 and band.decode_flops is None


def test_longformer_closed_form():
    # w = 2 (one key each side), g = 1 global token: its row sees 8 keys, the 7 local rows see it (7), and the band
    # among the 7 local positions has 7 + 2·6 = 19 pairs: 34 pairs, 34·2·(4 + 2)
    assert cost("longformer", N, D, DV, w=2, g=1).prefill_flops == 408


def test_bigbird_itc_closed_form():
    # n = 16, b = 2: 8 blocks; g = 2 global (first, last) see all 8; q[1] and q[6] see {0, 7} ∪ window (4) + r;
    # q[2..5] see 2 + 3 + r. r = 1: 8 + 8 + 5 + 5 + 4·6 = 50 block pairs of 2×2 pairs: 200 pairs, 200·2·6
    c = cost("bigbird", 16, D, DV, b=2, r=1)
    assert c.prefill_flops == 2400 and c.decode_flops is None and not c.causal
    # the paper's ITC count for nb blocks: 2·nb (global rows) + 2·(4 + r) + (nb − 4)(5 + r)
    nb, b, r = 64, 64, 3
    assert cost("bigbird", nb * b, D, DV, b=b, r=r).prefill_flops == (2 * nb + 2 * (4 + r) + (nb - 4) * (5 + r)) * b * b * 2 * (D + DV)
    # an odd g (a mutation review: only g = 2 was tried): g = 3 puts ⌈3/2⌉ = 2 global blocks first and 1 last, {0, 1, 7}
    # of 8; they see all 8; q[2] and q[6] see 5 blocks + r, q[3..5] 6 + r: 24 + 6 + 7 + 7 + 7 + 6 = 57 block pairs
    assert cost("bigbird", 64, 8, 8, b=8, r=1, g=3).prefill_flops == 57 * 8 * 8 * 2 * (8 + 8) == 116_736


def test_reformer_closed_form():
    # c = 2 → n_b = 4 buckets; 2 rounds: hash 2·8·4·(4/2) = 128 each; scores 2·8·(2c = 4)·4 = 256; mix 2·8·4·2 = 128
    c = cost("reformer_lsh", N, D, DV, c=2, n_r=2)
    assert c.prefill_breakdown == {"hash": 256, "scores": 512, "mix": 256}
    assert c.decode_flops == 2 * (2 * 4 * 2 + 2 * 4 * 6) == 128  # per round: hash the query, 2c = 4 keys
    assert (c.state_kind, c.state_elements) == ("kv", 48)


def test_linformer_closed_form():
    c = cost("linformer", N, D, DV, k=2)
    # E·K 2·2·8·4 = 128, F·V 2·2·8·2 = 64, scores 2·8·2·4 = 128, mix 2·8·2·2 = 64
    assert c.prefill_breakdown == {"proj_k": 128, "proj_v": 64, "scores": 128, "mix": 64}
    assert (c.causal, c.decode_flops, c.state_kind, c.state_elements) == (False, None, "none", 0)


def test_linformer_k_equals_n_has_exact_products():
    n, d, d_v = 64, 16, 8
    lin, ex = cost("linformer", n, d, d_v, k=n), cost("exact", n, d, d_v, causal=False)
    assert {k: lin.prefill_breakdown[k] for k in ("scores", "mix")} == ex.prefill_breakdown
    assert lin.prefill_breakdown["proj_k"] == 2 * n * n * d  # plus E·K and F·V, n × n projections


def test_nystrom_closed_form():
    c = cost("nystrom", N, D, DV, m=2, T=1)
    # Q·K̃ᵀ 2·8·2·4 = 128; Q̃·K̃ᵀ 2·2·2·4 = 32; Q̃·Kᵀ 128; one iteration: 4 products of 2³: 4·2·8 = 64;
    # kernel_1·Z 2·8·2·2 = 64; kernel_3·V 2·2·8·2 = 64; mix 2·8·2·2 = 64
    assert c.prefill_flops == 128 + 32 + 128 + 64 + 64 + 64 + 64 == 544
    assert cost("nystrom", 4096, 64, 64, m=64, T=6).prefill_breakdown["pinv"] == 6 * 8 * 64**3  # the table's 8Tm³


def _linear_in_n(method: str, base: int, **params: int) -> None:
    f = [cost(method, k * base, 64, 32, **params).prefill_flops for k in (1, 2, 3, 4)]
    assert f[1] - f[0] == f[2] - f[1] == f[3] - f[2] > 0


def test_nystrom_and_performer_prefill_linear_in_n():
    _linear_in_n("nystrom", 256, m=32, T=6)
    _linear_in_n("performer", 100, r=64)
    _linear_in_n("performer", 100, r=64, causal=False)
    _linear_in_n("linformer", 256, k=32)
    _linear_in_n("cosformer", 100)


def test_performer_closed_form():
    c = cost("performer", N, D, DV, r=3)
    # features 2·2·8·4·3 = 384; φ(K)ᵀV 2·8·3·2 = 96; φ(Q)S 96; φ(Q)z 2·8·3 = 48
    assert c.prefill_flops == 624
    assert c.decode_flops == 2 * 2 * 4 * 3 + 2 * 3 * 2 * 2 + 2 * 3 == 78
    assert (c.state_kind, c.state_elements) == ("fixed", 3 * 2 + 3)  # S: r × d_v, z: r
    assert cost("performer", N, D, DV, r=3, causal=False).prefill_flops == 624  # prefix sums cost what K'ᵀV does
    big = cost("performer", 1 << 20, D, DV, r=3)
    assert big.state_elements == c.state_elements  # fixed: independent of n


def test_cosformer_closed_form():
    c = cost("cosformer", N, D, DV)
    # 2d = 8 features: k_ᵀV 2·8·8·2 = 256, q_·kv 256, q_·Σk_ 2·8·8 = 128
    assert c.prefill_flops == 640
    assert (c.decode_flops, c.state_kind, c.state_elements) == (80, "fixed", 8 * 2 + 8)  # 2d(d_v + 1)


def test_loki_closed_form():
    c = cost("loki", N, D, DV, r=2, k=3)
    assert c.prefill_flops == 432 + 2 * 8 * 4 * 4  # exact causal + rotating 8 keys by P (4 × 4)
    # q and k rotated 2·2·16 = 64; approximate scores 2·8·2 = 32; top 3: 2·3·4 + 2·3·2 = 36
    assert c.decode_flops == 132
    assert c.state_elements == exact(N, D, DV).state_elements


def test_tpa_closed_form():
    c = cost("tpa", N, 4, 4, n_h=2, R_Q=3, R_K=1, R_V=2)
    # factors 2·8·2·4·(3 + 1 + 2) = 768; 2 heads × causal (36 pairs) 2·36·4 scores and 2·36·4 mixing = 1152
    assert c.prefill_flops == 768 + 1152
    assert c.decode_flops == 2 * 8 * (3 * 1 * 4 + 2 * 3 * 1 + 2 * 1 + 2 * 2 * 4) == 576
    assert c.state_elements == N * (1 + 2) * (2 + 4) and c.heads == 2  # (R_K + R_V)(n_h + d_h) per token


def test_mla_decode_absorbed_deepseek_v3():
    # DeepSeek-V3: n_h 128, qk 128 + 64, v 128, d_c 512, d_R 64; absorbed decode at context n
    n = 1000
    c = cost("mla", n, 192, 128, n_h=128, d_c=512, d_R=64)
    assert c.decode_flops == 2 * 128 * 128 * 512 + 2 * n * 128 * (2 * 512 + 64) + 2 * 128 * 512 * 128
    assert c.state_elements == n * 576
    assert cost("transmla", n, 128, 128, n_h=32).state_elements == n * 576


def test_window_at_least_n_is_exact_causal():
    for n, w in ((8, 8), (8, 100), (1, 1), (4096, 4096)):
        wc, ex = window(n, 64, 32, w=w), exact(n, 64, 32)
        assert (wc.prefill_flops, wc.decode_flops, wc.state_elements) == (ex.prefill_flops, ex.decode_flops, ex.state_elements)
    assert window(8, 4, 2, w=14, causal=False).prefill_flops == exact(8, 4, 2, causal=False).prefill_flops  # 7 each side


def test_longformer_without_globals_is_window():
    for causal, w in ((True, 5), (False, 4)):
        lf, wn = longformer(50, 16, 8, w=w, g=0, causal=causal), window(50, 16, 8, w=w, causal=causal)
        assert (lf.prefill_flops, lf.decode_flops, lf.state_elements) == (wn.prefill_flops, wn.decode_flops, wn.state_elements)


def test_causal_states_at_wide_windows_equal_exact():
    n = 37
    ex = exact(n, 16, 8).state_elements
    for c in (cost("window", n, 16, 8, w=n), cost("window", n, 16, 8, w=10 * n),
              cost("longformer", n, 16, 8, w=n, g=0, causal=True), cost("loki", n, 16, 8, r=4, k=n)):
        assert c.causal and c.state_kind == "kv" and c.state_elements == ex


def test_every_method_answers():
    params = {"topk": {"k": 8}, "window": {"w": 4}, "longformer": {"w": 4, "g": 1}, "bigbird": {"b": 8, "r": 1}, "reformer_lsh": {"c": 8, "n_r": 2},
              "linformer": {"k": 16}, "nystrom": {"m": 8}, "loki": {"r": 8, "k": 8}, "performer": {"r": 16}, "tpa": {"n_h": 4, "R_Q": 6, "R_K": 2, "R_V": 2},
              "mla": {"n_h": 4, "d_c": 32, "d_R": 8}, "transmla": {"n_h": 4}}
    for name in METHODS:
        d = 128 if name == "transmla" else 16  # TransMLA's RoPE key alone is 64 wide
        c = cost(name, 64, d, d, **params.get(name, {}))
        assert c.method == name and c.prefill_flops > 0 and c.source
        assert (c.decode_flops is None) == (not c.causal) == (c.state_kind == "none")


def test_transmla_llama3_8b():
    s = transmla_saving(load_model("llama3-8b").spec)
    assert s.gqa_per_token == 2 * 8 * 128 == 2048  # 2·n_kv·d_h per token and layer
    assert s.latent_per_token == 512 + 64
    assert s.ratio == Fraction(2048, 576) == Fraction(32, 9)
    assert s.saving == Fraction(1472, 2048)  # 71.9%: TransMLA's "reduces Llama-3-8B's KV cache by 72%"


@pytest.mark.parametrize(("method", "params", "message"), [
    ("flash", {}, "unknown method 'flash'; known: bigbird, cosformer,"),
    ("linformer", {}, "linformer: missing parameter k; it needs k"),
    ("linformer", {"k": 4, "m": 2}, "linformer: unknown parameter m; it takes k"),
    ("linformer", {"k": 0}, "linformer: k = 0: must be an integer >= 1"),
    ("linformer", {"k": 9}, "linformer: k = 9: must be at most n = 8"),
    ("nystrom", {"m": 3}, "nystrom: m = 3: must divide n = 8"),
    ("window", {"w": True}, "window: w = True: must be an integer >= 1"),
    ("window", {"w": 3, "causal": False}, "window: w = 3: must be even without causal"),
    ("longformer", {"w": 2, "g": 1, "causal": True}, "longformer: g = 1: must be 0 with causal"),
    ("reformer_lsh", {"c": 3, "n_r": 1}, "reformer_lsh: c = 3: 2·c must divide n = 8"),
    ("bigbird", {"b": 2, "r": 2}, "bigbird: r = 2: too large: n/b = 4 blocks must be at least g + w + r = 7"),
    ("performer", {"r": 4, "causal": 1}, "performer: causal = 1: must be true or false"),
    ("loki", {"r": 5, "k": 2}, "loki: r = 5: must be at most d = 4"),
])
def test_errors_name_method_parameter_and_rule(method, params, message):
    with pytest.raises(KvcalcError) as err:
        cost(method, N, D, DV, **params)
    assert message in str(err.value)


def test_bad_sizes_and_models():
    with pytest.raises(KvcalcError, match=r"exact: n = 0: must be an integer >= 1"):
        cost("exact", 0, D, DV)
    with pytest.raises(KvcalcError, match=r"transmla: deepseek-v3 has mla attention"):
        transmla_saving(load_model("deepseek-v3").spec)
