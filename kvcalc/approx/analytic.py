"""Analytic costs of approximate attention (issue 12 item 1): prefill FLOPs, decode FLOPs and decode state per method.

Conventions (those of kvcalc.costs.flops):
- FLOPs, not MACs: an m×k by k×n product costs 2·m·n·k. Only products that sum over an index are counted; softmax,
  feature nonlinearities (exp, ReLU, cos/sin reweighting), row norms (FAVOR+'s ‖x‖², LSH's unit keys), running sums
  of vectors (the normaliser Σφ(k)), sorting and top-k selection are left out. A running sum of outer products
  (Σφ(k)vᵀ, a causal linear method's state) is the product Φ_Kᵀ V position by position: counted, 2·r·d_v a position.
- One sequence, one head (`heads` = 1), attention only: no Q/K/V/O projections, but the method's own products
  (Linformer's E·K, Nyström's landmark kernels and pseudo-inverse, Performer's feature maps, Loki's PCA rotation).
  TPA and MLA share factors across heads, so theirs are per layer: all `heads` = n_h heads together.
- Causal prefill: query i (1-based) sees i keys, Σ = n(n+1)/2. A decode step at context n is the token at position n,
  attending causally to n keys, itself included; its state is what one head keeps to decode the next token.
- d is the query/key dim, d_v the value dim; state is in elements, not bytes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from kvcalc.attention.base import keys_seen, tri
from kvcalc.attention.gqa import Heads
from kvcalc.costs.cache import per_token_formula
from kvcalc.errors import KvcalcError
from kvcalc.fields import as_row, figure
from kvcalc.spec import ModelSpec

StateKind = Literal["kv", "fixed", "none"]


@dataclass(frozen=True)
class MethodCost:
    """What one method costs at sequence length n: prefill and decode FLOPs and the state decoding keeps."""

    method: str
    params: dict[str, int]
    n: int  # sequence length (prefill) / context (decode)
    d: int  # query/key dim
    d_v: int  # value dim
    prefill_breakdown: dict[str, int]  # FLOPs by product; prefill_flops is their sum
    decode_flops: int | None  # one token at context n; None: the method cannot decode causally
    causal: bool
    state_kind: StateKind  # "kv": a cache growing with n; "fixed": a constant state; "none": no decoding
    state_elements: int
    source: str
    heads: int = 1  # heads the numbers cover: 1, or n_h for TPA and MLA (per layer)

    @property
    def prefill_flops(self) -> int:
        """The whole sequence's attention FLOPs."""
        return sum(self.prefill_breakdown.values())


# ---------------------------------------------------------------- parameter checks


def _need(method: str, name: str, value: object, ok: bool, rule: str) -> None:
    """Raise a KvcalcError naming the method, the parameter and its rule unless `ok`."""
    if not ok:
        raise KvcalcError(f"{method}: {name} = {value!r}: {rule}")


def _ints(method: str, minimum: int = 1, **values: object) -> None:
    """Each value must be an int (not a bool) of at least `minimum`."""
    for name, v in values.items():
        ok = isinstance(v, int) and not isinstance(v, bool) and v >= minimum
        _need(method, name, v, ok, f"must be an integer >= {minimum}")


def _flag(method: str, name: str, value: object) -> None:
    _need(method, name, value, isinstance(value, bool), "must be true or false")


def _dims(method: str, n: int, d: int, d_v: int) -> None:
    _ints(method, n=n, d=d, d_v=d_v)


def _pairs_cost(pairs: int, d: int, d_v: int) -> dict[str, int]:
    """Scores QKᵀ and mixing PV over `pairs` query–key pairs."""
    return {"scores": 2 * pairs * d, "mix": 2 * pairs * d_v}


# ---------------------------------------------------------------- exact and sparse patterns


def exact(n: int, d: int, d_v: int, *, causal: bool = True) -> MethodCost:
    """Exact softmax attention: the reference every method is measured against."""
    _dims("exact", n, d, d_v)
    _flag("exact", "causal", causal)
    pairs = tri(n) if causal else n * n  # causal: query i sees i keys
    return MethodCost("exact", {}, n, d, d_v, _pairs_cost(pairs, d, d_v),
                      2 * n * d + 2 * n * d_v if causal else None,  # one query over n keys
                      causal, "kv" if causal else "none", n * (d + d_v) if causal else 0,
                      "Vaswani et al. 2017 §3.2.1; kvcalc.costs.flops conventions")


def topk(n: int, d: int, d_v: int, *, k: int, causal: bool = False) -> MethodCost:
    """The oracle sparse method: every score, then each row's k largest mixed (the ideal a sparse method approaches)."""
    _dims("topk", n, d, d_v)
    _ints("topk", k=k)
    _flag("topk", "causal", causal)
    pairs = tri(n) if causal else n * n
    kept = sum(min(i, k) for i in range(1, n + 1)) if causal else n * min(k, n)  # query i sees min(i, k) kept keys
    return MethodCost("topk", {"k": k}, n, d, d_v, {"scores": 2 * pairs * d, "mix": 2 * kept * d_v},
                      2 * n * d + 2 * min(k, n) * d_v if causal else None, causal,
                      "kv" if causal else "none", n * (d + d_v) if causal else 0,
                      "top-k attention as an oracle (every score is needed to choose the k): Gupta et al. 2021")


def _band(n: int, h: int) -> int:
    """Pairs (i, j) of an n-token sequence with |i − j| <= h: n on the diagonal, 2(n − δ) at each offset δ <= h."""
    h = min(h, n - 1)
    return n + 2 * h * n - h * (h + 1)


def window(n: int, d: int, d_v: int, *, w: int, causal: bool = True) -> MethodCost:
    """Sliding-window attention: causal, each query sees its last w keys (itself included); not causal, w/2 each side."""
    _dims("window", n, d, d_v)
    _ints("window", w=w)
    _flag("window", "causal", causal)
    if not causal:
        _need("window", "w", w, w % 2 == 0, "must be even without causal: w/2 keys each side (Longformer §3.1)")
        pairs = _band(n, w // 2)
    else:
        pairs = keys_seen(n, w)  # Σ min(i, w) = w(w+1)/2 + (n − w)·w for n >= w
    seen = min(n, w)
    return MethodCost("window", {"w": w}, n, d, d_v, _pairs_cost(pairs, d, d_v),
                      2 * seen * (d + d_v) if causal else None, causal,
                      "kv" if causal else "none", seen * (d + d_v) if causal else 0,
                      "Mistral 7B §2 (causal, w keys); Longformer §3.1 (w/2 each side); lucidrains/local-attention")


def longformer(n: int, d: int, d_v: int, *, w: int, g: int, causal: bool = False) -> MethodCost:
    """Longformer: a sliding window plus g global tokens (the first g positions) that see and are seen by all."""
    _dims("longformer", n, d, d_v)
    _ints("longformer", w=w)
    _ints("longformer", 0, g=g)
    _flag("longformer", "causal", causal)
    _need("longformer", "g", g, g <= n, f"must be at most n = {n}")
    if causal:  # Longformer §4.1: autoregressive LM uses the causal (dilated) window only, no global tokens
        _need("longformer", "g", g, g == 0, "must be 0 with causal: global attention is bidirectional (Longformer §4.1)")
        base = window(n, d, d_v, w=w, causal=True)
        return MethodCost("longformer", {"w": w, "g": 0}, n, d, d_v, base.prefill_breakdown, base.decode_flops, True,
                          "kv", base.state_elements, "Longformer (Beltagy et al. 2020) §4.1: causal sliding window")
    _need("longformer", "w", w, w % 2 == 0, "must be even: w/2 keys each side (Longformer §3.1)")
    # global rows see all n keys; each local row sees the g global keys and its band among the n − g local positions
    pairs = g * n + (n - g) * g + _band(n - g, w // 2)
    return MethodCost("longformer", {"w": w, "g": g}, n, d, d_v, _pairs_cost(pairs, d, d_v), None, False, "none", 0,
                      "Longformer (Beltagy et al. 2020) §3.1: window w/2 each side, symmetric global attention; "
                      "counts the pattern's pairs, not HF's chunked kernel")


def bigbird(n: int, d: int, d_v: int, *, b: int, r: int, w: int = 3, g: int = 2) -> MethodCost:
    """BigBird ITC block-sparse attention: g global blocks, a window of w blocks and r random blocks per query block."""
    _dims("bigbird", n, d, d_v)
    _ints("bigbird", b=b, w=w, g=g)
    _ints("bigbird", 0, r=r)
    _need("bigbird", "b", b, n % b == 0, f"must divide n = {n} (blocks of b tokens)")
    _need("bigbird", "w", w, w % 2 == 1, "must be odd: the query's block and (w−1)/2 blocks each side")
    nb = n // b
    _need("bigbird", "r", r, nb >= g + w + r, f"too large: n/b = {nb} blocks must be at least g + w + r = {g + w + r}")
    # ITC as google-research/bigbird bigbird_block_sparse_attention: global blocks are the first ⌈g/2⌉ and last ⌊g/2⌋
    # (g = 2: first and last); they attend every block. Other query blocks attend the union of the global blocks and
    # their window (clipped at the ends) plus r random blocks outside both: q[1] meets 4 + r blocks, q[2:-2] 5 + r.
    glob = set(range((g + 1) // 2)) | set(range(nb - g // 2, nb))
    blocks = 0
    for q in range(nb):
        near = {j for j in range(q - w // 2, q + w // 2 + 1) if 0 <= j < nb}
        blocks += nb if q in glob else len(glob | near) + r
    pairs = blocks * b * b  # each block pair is b queries × b keys
    return MethodCost("bigbird", {"b": b, "r": r, "w": w, "g": g}, n, d, d_v, _pairs_cost(pairs, d, d_v), None, False,
                      "none", 0, "BigBird (Zaheer et al. 2020) App. D, ITC; google-research/bigbird core/attention.py")


def reformer_lsh(n: int, d: int, d_v: int, *, c: int, n_r: int) -> MethodCost:
    """Reformer LSH attention, shared QK: n_r hash rounds, each sorting into chunks of c that see their own and the previous chunk."""
    _dims("reformer_lsh", n, d, d_v)
    _ints("reformer_lsh", c=c, n_r=n_r)
    _need("reformer_lsh", "c", c, n % (2 * c) == 0, f"2·c must divide n = {n} (reformer-pytorch: an even bucket count n/c)")
    n_b = n // c  # reformer-pytorch LSHAttention: n_buckets = seqlen // bucket_size
    out = {
        "hash": n_r * 2 * n * d * (n_b // 2),  # x·R with R of d × n_b/2 per round (Reformer §3, Andoni et al.)
        "scores": n_r * 2 * n * 2 * c * d,  # each query meets 2c keys: its chunk and the one before (look_one_back)
        "mix": n_r * 2 * n * 2 * c * d_v,
    }
    # decode assumes balanced buckets (c keys each): hash the new query, then 2c keys per round; data-dependent
    # otherwise. The buckets are the n / c of a model of length n (a decoder keeps its model's: HF's LSHSelfAttention
    # hashes the new query into num_buckets beside the cached keys' past_buckets)
    decode = n_r * (2 * d * (n_b // 2) + 2 * min(n, 2 * c) * (d + d_v))
    return MethodCost("reformer_lsh", {"c": c, "n_r": n_r}, n, d, d_v, out, decode, True, "kv", n * (d + d_v),
                      "Reformer (Kitaev et al. 2020) §2–3; lucidrains/reformer-pytorch LSHAttention (hash_vectors, "
                      "look_one_back); state: shared QK and V (the keys' n·n_r bucket ids beside, integers, not counted)")


# ---------------------------------------------------------------- low rank


def linformer(n: int, d: int, d_v: int, *, k: int) -> MethodCost:
    """Linformer: keys and values projected along the sequence to k rows (E·K, F·V), then attention over k."""
    _dims("linformer", n, d, d_v)
    _ints("linformer", k=k)
    _need("linformer", "k", k, k <= n, f"must be at most n = {n}")
    out = {
        "proj_k": 2 * k * n * d,  # E (k × n) · K (n × d), Linformer §4 eq. 7
        "proj_v": 2 * k * n * d_v,  # F (k × n) · V (n × d_v)
        "scores": 2 * n * k * d,  # Q · (EK)ᵀ: n × k
        "mix": 2 * n * k * d_v,  # P̄ · FV
    }
    return MethodCost("linformer", {"k": k}, n, d, d_v, out, None, False, "none", 0,
                      "Linformer (Wang et al. 2020) §4; lucidrains/linformer LinformerSelfAttention")


def nystrom(n: int, d: int, d_v: int, *, m: int, T: int = 6) -> MethodCost:
    """Nyströmformer: m segment-mean landmarks, softmax kernels through them, and T Moore–Penrose iterations."""
    _dims("nystrom", n, d, d_v)
    _ints("nystrom", m=m)
    _ints("nystrom", 0, T=T)
    _need("nystrom", "m", m, n % m == 0, f"must divide n = {n} (segment means of n/m tokens, mlpen/Nystromformer)")
    # mlpen/Nystromformer NystromAttention.forward: X = (kernel_1 @ iterative_inv(kernel_2)) @ (kernel_3 @ V)
    out = {
        "kernel_1": 2 * n * m * d,  # Q · K̃ᵀ: n × m
        "kernel_2": 2 * m * m * d,  # Q̃ · K̃ᵀ: m × m
        "kernel_3": 2 * m * n * d,  # Q̃ · Kᵀ: m × n
        # Z ← ¼ Z (13I − AZ(15I − AZ(7I − AZ))): four m×m×m products per iteration (Xiong et al. 2021 §3)
        "pinv": T * 4 * 2 * m**3,
        "kernel_1_pinv": 2 * n * m * m,  # kernel_1 · Z
        "kernel_3_v": 2 * m * n * d_v,  # kernel_3 · V
        "mix": 2 * n * m * d_v,  # (kernel_1 Z) · (kernel_3 V)
    }
    return MethodCost("nystrom", {"m": m, "T": T}, n, d, d_v, out, None, False, "none", 0,
                      "Nyströmformer (Xiong et al. 2021) §3; mlpen/Nystromformer iterative_inv")


def loki(n: int, d: int, d_v: int, *, r: int, k: int) -> MethodCost:
    """Loki: keys cached in their PCA basis; decode scores all keys with r dims, then exact attention on the top k."""
    _dims("loki", n, d, d_v)
    _ints("loki", r=r, k=k)
    _need("loki", "r", r, r <= d, f"must be at most d = {d} (PCA components of the keys)")
    out = _pairs_cost(tri(n), d, d_v)  # prefill is exact causal attention (Loki sparsifies decoding only)
    out["rotate_k"] = 2 * n * d * d  # the prompt's keys into the PCA basis before caching
    top = min(k, n)
    decode = (2 * d * d * 2  # the new query and key rotated by P (d × d)
              + 2 * n * r  # approximate scores on the first r dims of every cached key
              + 2 * top * d + 2 * top * d_v)  # exact scores and mixing on the top k
    return MethodCost("loki", {"r": r, "k": k}, n, d, d_v, out, decode, True, "kv", n * (d + d_v),
                      "Loki (Singhania et al. 2024) Alg. 1; hpcgroup/loki methods/pca_topk")


# ---------------------------------------------------------------- kernels and random features


def performer(n: int, d: int, d_v: int, *, r: int, causal: bool = True) -> MethodCost:
    """Performer FAVOR+: positive random features φ of r dims, then linear attention (prefix sums when causal)."""
    _dims("performer", n, d, d_v)
    _ints("performer", r=r)
    _flag("performer", "causal", causal)
    out = {
        "features": 2 * 2 * n * d * r,  # Q·Ω and K·Ω, Ω of d × r (performer-pytorch softmax_kernel)
        "kv": 2 * n * r * d_v,  # φ(K)ᵀV, or causal: n outer products φ(k_i)v_iᵀ into the running S
        "mix": 2 * n * r * d_v,  # φ(Q)·S
        "norm": 2 * n * r,  # φ(Q)·z, z = Σ φ(k_j) (a sum, not counted)
    }
    decode = 2 * 2 * d * r + 2 * r * d_v + 2 * r * d_v + 2 * r  # φ(q), φ(k), S += φ(k)vᵀ, φ(q)ᵀS, φ(q)ᵀz
    return MethodCost("performer", {"r": r}, n, d, d_v, out, decode if causal else None, causal,
                      "fixed" if causal else "none", r * d_v + r if causal else 0,  # S (r × d_v) and z (r)
                      "Performer (Choromanski et al. 2021) §2.2–2.6; lucidrains/performer-pytorch "
                      "softmax_kernel, linear_attention, causal_linear_attention")


def cosformer(n: int, d: int, d_v: int, *, causal: bool = True) -> MethodCost:
    """cosFormer: ReLU features reweighted by cos and sin of the position (2d dims), then linear attention."""
    _dims("cosformer", n, d, d_v)
    _flag("cosformer", "causal", causal)
    f = 2 * d  # q_ = [q·sin, q·cos]: OpenNLPLab/cosFormer concatenates, 2d features
    out = {"kv": 2 * n * f * d_v, "mix": 2 * n * f * d_v, "norm": 2 * n * f}  # k_ᵀV; q_·kv_; q_·Σk_
    decode = 2 * f * d_v + 2 * f * d_v + 2 * f  # kv_ += k_vᵀ, q_ᵀkv_, q_ᵀz
    return MethodCost("cosformer", {}, n, d, d_v, out, decode if causal else None, causal,
                      "fixed" if causal else "none", f * d_v + f if causal else 0,  # kv_ (2d × d_v), z (2d); M fixed
                      "cosFormer (Qin et al. 2022) §3.3 eq. 11; OpenNLPLab/cosFormer cosformer.py (forward)")


# ---------------------------------------------------------------- shared factors: TPA, MLA, TransMLA


def tpa(n: int, d: int, d_v: int, *, n_h: int, R_Q: int, R_K: int, R_V: int) -> MethodCost:
    """Tensor Product Attention (per layer, n_h heads): Q, K, V as rank-R sums of head ⊗ token factors; the cache holds the factors."""
    _dims("tpa", n, d, d_v)
    _ints("tpa", n_h=n_h, R_Q=R_Q, R_K=R_K, R_V=R_V)
    _need("tpa", "d_v", d_v, d_v == d, f"must equal d = {d}: TPA's B factors share head_dim")
    # prefill, tensorgi/TPA model/T6.py CPLinear: q = A_q (n_h × R_Q) · B_q (R_Q × d_h) per token, likewise k, v; then
    # causal scaled_dot_product_attention over n_h heads
    out = {"factors": 2 * n * n_h * d * (R_Q + R_K + R_V)}
    out.update({k: n_h * v for k, v in _pairs_cost(tri(n), d, d_v).items()})
    # decode, tensorgi/TPA decode/flashtpa_decode_torch.py generalised to R_K, R_V: per cached token
    # B_q·B_kᵀ (R_Q·R_K·d), A_q with it (n_h·R_Q·R_K), with A_k (n_h·R_K), and the output through B_v (n_h·R_V·d_v)
    decode = 2 * n * (R_Q * R_K * d + n_h * R_Q * R_K + n_h * R_K + n_h * R_V * d_v)
    return MethodCost("tpa", {"n_h": n_h, "R_Q": R_Q, "R_K": R_K, "R_V": R_V}, n, d, d_v, out, decode, True, "kv",
                      n * (R_K + R_V) * (n_h + d),  # A_K, B_K, A_V, B_V per token (TPA paper §3.2)
                      "TPA (Zhang et al. 2025) §3; tensorgi/TPA model/T6.py, decode/flashtpa_decode_torch.py", n_h)


def mla(n: int, d: int, d_v: int, *, n_h: int, d_c: int, d_R: int) -> MethodCost:
    """Multi-head latent attention (per layer, n_h heads): a latent of d_c and a shared RoPE key of d_R per token."""
    _dims("mla", n, d, d_v)
    _ints("mla", n_h=n_h, d_c=d_c, d_R=d_R)
    _need("mla", "d_R", d_R, d_R < d, f"must be less than d = {d} (d = qk_nope_head_dim + d_R)")
    d_n = d - d_R  # qk_nope_head_dim
    # prefill as every engine runs it: up-project the latent to per-head K_nope and V, then causal attention
    out = {"kv_up": 2 * n * d_c * n_h * (d_n + d_v)}
    out.update({k: n_h * v for k, v in _pairs_cost(tri(n), d, d_v).items()})
    # decode, absorbed (DeepSeek-V2 §2.1.3; DeepSeek-V3 inference/model.py attn_impl "absorb"): W_UK into the query,
    # scores on the latent and the RoPE key, mixing in the latent, W_UV after
    decode = 2 * n_h * d_n * d_c + 2 * n * n_h * (2 * d_c + d_R) + 2 * n_h * d_c * d_v
    return MethodCost("mla", {"n_h": n_h, "d_c": d_c, "d_R": d_R}, n, d, d_v, out, decode, True, "kv", n * (d_c + d_R),
                      "DeepSeek-V2 §2.1; deepseek-ai/DeepSeek-V3 inference/model.py MLA", n_h)


TRANSMLA_KV_LORA_RANK = 512  # fxmeng/TransMLA transmla/converter.py --kv-lora-rank default, used for Llama-3-8B
TRANSMLA_QK_ROPE_HEAD_DIM = 64  # the same converter's --qk-mqa-dim default: the decoupled RoPE key


def transmla(n: int, d: int, d_v: int, *, n_h: int) -> MethodCost:
    """A GQA model converted by TransMLA: MLA with the converter's latent of 512 and RoPE key of 64.

    d is the converted model's q·k head dim, d_nope + 64, as in `mla`: TransMLA keeps the GQA head_dim as d_nope and
    adds the RoPE key, so Llama-3-8B (head_dim 128) converts to d = 192, d_v = 128 (an audit: passing the GQA head_dim
    as d counts d_nope = 64)."""
    cost = mla(n, d, d_v, n_h=n_h, d_c=TRANSMLA_KV_LORA_RANK, d_R=TRANSMLA_QK_ROPE_HEAD_DIM)
    return MethodCost("transmla", {"n_h": n_h}, n, d, d_v, cost.prefill_breakdown, cost.decode_flops, True, "kv",
                      cost.state_elements, "TransMLA (Meng et al. 2025); fxmeng/TransMLA transmla/converter.py", n_h)


@dataclass(frozen=True)
class TransMLASaving:
    """The cache per token and layer of a GQA model before and after TransMLA's conversion (elements)."""

    model: str
    gqa_per_token: int  # 2·n_kv·d_h
    latent_per_token: int  # kv_lora_rank + qk_rope_head_dim
    ratio: Fraction  # gqa / latent

    @property
    def saving(self) -> Fraction:
        """The fraction of the cache the conversion removes (Llama-3-8B: 1 − 576/2048)."""
        return 1 - Fraction(self.latent_per_token, self.gqa_per_token)


def transmla_saving(spec: ModelSpec, kv_lora_rank: int = TRANSMLA_KV_LORA_RANK,
                    qk_rope_head_dim: int = TRANSMLA_QK_ROPE_HEAD_DIM) -> TransMLASaving:
    """The cache saving of converting `spec`'s GQA/MHA attention to a latent of kv_lora_rank + qk_rope_head_dim."""
    _ints("transmla", kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope_head_dim)
    if spec.learned_positions:  # TransMLA (Meng et al. 2025) splits RoPE into the decoupled key d_R
        raise KvcalcError(f"transmla: {spec.name} has learned absolute positions, no RoPE: TransMLA's conversion "
                          f"keeps a {qk_rope_head_dim}-dim RoPE key beside the latent, for RoPE models")
    if any(g.cross is not None for g in spec.groups):
        raise KvcalcError(f"transmla: {spec.name} has cross-attention, whose encoder cache TransMLA does not convert")
    widths = set()
    for group in spec.groups:
        if not isinstance(group.attention, Heads):
            raise KvcalcError(f"transmla: {spec.name} has {group.attention.kind} attention; TransMLA converts MHA/GQA/MQA")
        d_h = group.attention.d_h(group.layer)
        if d_h % qk_rope_head_dim:  # the converter folds each head's RoPE dims by collapse = d_h // qk_mqa_dim and
            # asserts qk_mqa_dim · collapse == head_dim (fxmeng/TransMLA transmla/lora_qkv.py)
            raise KvcalcError(f"transmla: {spec.name}'s head_dim {d_h} is not a multiple of the {qk_rope_head_dim}-dim "
                              f"RoPE key: TransMLA's converter folds each head's RoPE dims into it (collapse = "
                              f"head_dim // {qk_rope_head_dim}) and cannot convert this model")
        widths.add(per_token_formula(group).elements)  # 2·n_kv·d_h (DeepSeek-V2 Table 1)
    if len(widths) != 1:
        raise KvcalcError(f"transmla: {spec.name}'s layers cache different widths {sorted(widths)}; give a uniform model")
    gqa = widths.pop()
    latent = kv_lora_rank + qk_rope_head_dim
    if latent >= gqa:
        raise KvcalcError(f"transmla: {spec.name} caches {gqa:,} elements a token and layer (2·n_kv·d_h), no more than "
                          f"the {kv_lora_rank} + {qk_rope_head_dim} = {latent:,} of TransMLA's latent: the conversion "
                          "would not shrink its cache")
    return TransMLASaving(spec.name, gqa, latent, Fraction(gqa, latent))


@dataclass(frozen=True)
class TransmlaRow:
    """One row of `approx --transmla`: a model's bf16 cache before and after the conversion, per token and at ctx."""

    model: str = figure("Model", "text", "the model's name")
    n_layers: int = figure("Layers", "int", "its layers, every one converted")
    gqa_per_token: int = figure("GQA per\ntoken·layer", "int", "cache elements a token adds to one layer now: 2·n_kv·d_h")
    latent_per_token: int = figure("Latent per\ntoken·layer", "int", "after the conversion: d_c + d_R = 512 + 64")
    kv_bytes_per_token: int = figure("KV per\ntoken", "bytes", "cache bytes a token adds over all layers now (bf16)")
    latent_bytes_per_token: int = figure("Latent per\ntoken", "bytes", "the same after the conversion")
    ctx: int = figure("Ctx", "tokens", "the context of the next columns (--n)")
    kv_cache_bytes: int = figure("KV cache\nat ctx", "bytes",
                                 "one sequence's cache at ctx now (a windowed layer holds min(ctx, W) tokens)")
    latent_cache_bytes: int = figure("Latent cache\nat ctx", "bytes", "the same after the conversion (windows kept)")
    saving: float = figure("Saving", "sig", "the fraction of the cache the conversion removes")
    exceeds_max_context: bool = figure("Over\nmax ctx", "bool", "ctx is above the trained maximum (computed anyway)")


def transmla_row(spec: ModelSpec, ctx: int) -> dict:
    """The `approx --transmla` row of `spec` at `ctx` tokens, one sequence, bf16 (2 bytes an element)."""
    t = transmla_saving(spec)
    layers = spec.n_layers
    # token-layers held at ctx: each layer's own (min(ctx, W) under a window), which a converted layer keeps
    held = sum(len(g.layers) * g.attention.tokens_held(g.layer, ctx) for g in spec.groups)
    return as_row(TransmlaRow(
        model=t.model, n_layers=layers, gqa_per_token=t.gqa_per_token, latent_per_token=t.latent_per_token,
        kv_bytes_per_token=2 * layers * t.gqa_per_token, latent_bytes_per_token=2 * layers * t.latent_per_token,
        ctx=ctx, kv_cache_bytes=2 * t.gqa_per_token * held, latent_cache_bytes=2 * t.latent_per_token * held,
        saving=float(t.saving), exceeds_max_context=ctx > spec.max_context))


# ---------------------------------------------------------------- registry


METHODS: dict[str, Callable[..., MethodCost]] = {
    "exact": exact, "topk": topk, "window": window, "longformer": longformer, "bigbird": bigbird, "reformer_lsh": reformer_lsh,
    "linformer": linformer, "nystrom": nystrom, "loki": loki, "performer": performer, "cosformer": cosformer,
    "tpa": tpa, "mla": mla, "transmla": transmla,
}


def cost(method: str, n: int, d: int, d_v: int, **params: int) -> MethodCost:
    """The costs of `method` at sequence length n, with its parameters by name; a KvcalcError names any mistake."""
    fn = METHODS.get(method)
    if fn is None:
        raise KvcalcError(f"unknown method {method!r}; known: {', '.join(sorted(METHODS))}")
    accepted = {p.name: p for p in inspect.signature(fn).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise KvcalcError(f"{method}: unknown parameter {unknown[0]}; it takes {', '.join(accepted) or 'none'}")
    missing = [name for name, p in accepted.items() if p.default is inspect.Parameter.empty and name not in params]
    if missing:
        raise KvcalcError(f"{method}: missing parameter {missing[0]}; it needs {', '.join(accepted)}")
    return fn(n, d, d_v, **params)
