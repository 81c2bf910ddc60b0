"""kvcalc: exact KV-cache memory and attention cost calculator.

The public API, imported on first use so that `kvcalc` starts fast:
load_model, load_spec, kv_cache, param_counts, weights_bytes, prefill_flops, decode_flops, generate_flops,
figures, Settings, load_hardware, roofline.
"""

from importlib import import_module

_EXPORTS = {
    "load_model": "kvcalc.registry",
    "load_spec": "kvcalc.spec",
    "ModelSpec": "kvcalc.spec",
    "kv_cache": "kvcalc.costs.cache",
    "param_counts": "kvcalc.costs.params",
    "weights_bytes": "kvcalc.costs.params",
    "prefill_flops": "kvcalc.costs.flops",
    "decode_flops": "kvcalc.costs.flops",
    "generate_flops": "kvcalc.costs.flops",
    "figures": "kvcalc.figures",
    "Settings": "kvcalc.figures",
    "load_hardware": "kvcalc.hardware",
    "roofline": "kvcalc.hardware",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'kvcalc' has no attribute {name!r}")
