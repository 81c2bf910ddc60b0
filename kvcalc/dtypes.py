"""Storage widths of cache and weight dtypes, and element counts -> bytes (rounded up to a whole byte)."""

from __future__ import annotations

from kvcalc.errors import KvcalcError

# Bits per stored element. int4 is half a byte; quantisation scales and zero points are a scheme's, added by
# kvcalc.costs.quant when --kv-quant names one.
DTYPE_BITS = {"fp64": 64, "fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}
DTYPES = tuple(DTYPE_BITS)
# Weight dtypes engines run as W8A8 on 8-bit tensor cores where a GPU has them (vLLM's Fp8LinearMethod; H100's dense
# fp8 peak is twice its bf16 one), whose compute a roofline costed at the bf16 peak can overstate (README: Roofline time)
W8A8_WEIGHTS = frozenset({"fp8", "int8"})


def beyond_bf16_peak(weights_dtype: str, kv_dtype: str) -> bool:
    """Whether an engine may compute on 8-bit tensor cores, past the bf16 peak a roofline costs FLOPs at: W8A8 weights,
    or an fp8 cache, whose attention vLLM runs in fp8 (Attention.query_quant quantizes the queries where the backend
    takes them, FlashAttention 3 on Hopper, FlashInfer)."""
    return weights_dtype in W8A8_WEIGHTS or kv_dtype == "fp8"


def dtype_bits(dtype: str, what: str = "kv") -> int:
    """Bits per element of a dtype name, or a KvcalcError listing the supported ones."""
    bits = DTYPE_BITS.get(dtype)  # Settings holds its dtypes in lower case: found at once, a call a figure
    if bits is None:
        bits = DTYPE_BITS.get(dtype.lower())
    if bits is None:
        raise KvcalcError(f"unsupported {what} dtype {dtype!r}: choose one of {', '.join(DTYPE_BITS)}")
    return bits


def elements_to_bytes(elements: int, dtype: str) -> int:
    """Bytes needed to store `elements` values of `dtype`, rounded up to a whole byte."""
    return bits_to_bytes(elements, dtype_bits(dtype))


def bits_to_bytes(elements: int, bits: int) -> int:
    """Bytes needed to store `elements` values of `bits` bits each, rounded up to a whole byte (elements_to_bytes, for
    a caller that looked the dtype's width up once)."""
    return -(-elements * bits // 8)
