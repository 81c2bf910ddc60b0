"""kvcalc: exact KV-cache memory and attention cost calculator.

The public API, imported on first use so that `kvcalc` starts fast (the analytic path never imports numpy):

    from kvcalc import load_model, Settings, kv_cache, cost_figures
    spec = load_model("deepseek-v2").spec
    s = Settings(ctx=131072, kv_dtype="fp8")
    kv_cache(spec, s).bytes          # exact int
    cost_figures(spec, s).flops_decode_token

Models: load_model (bundled name or path), load_spec (YAML), ModelSpec. Settings: Settings.
Costs: kv_cache, param_counts, weights_bytes, prefill_flops, decode_flops, generate_flops, decode_bytes, cost_figures
(every figure as a CostFigures), compare_rows (compare's rows as dicts). Hardware: load_hardware, roofline. Attention kinds: register.
"""

from importlib import import_module  # loaded already: runpy and the import system use it

# `typing` is not imported here: `python -m kvcalc` runs this module before kvcalc.__main__ can guard Ctrl-C, and a
# Ctrl-C during typing's import (a few ms) would be Python's own traceback (test_ctrl_c_at_any_moment_of_start_up)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_EXPORTS = {
    "load_model": ("kvcalc.registry", "load_model"),
    "load_spec": ("kvcalc.spec", "load_spec"),
    "ModelSpec": ("kvcalc.spec", "ModelSpec"),
    "Settings": ("kvcalc.settings", "Settings"),
    "kv_cache": ("kvcalc.costs.cache", "kv_cache"),
    "param_counts": ("kvcalc.costs.params", "param_counts"),
    "weights_bytes": ("kvcalc.costs.params", "weights_bytes"),
    "prefill_flops": ("kvcalc.costs.flops", "prefill_flops"),
    "decode_flops": ("kvcalc.costs.flops", "decode_flops"),
    "generate_flops": ("kvcalc.costs.flops", "generate_flops"),
    "decode_bytes": ("kvcalc.costs.traffic", "decode_bytes"),
    "cost_figures": ("kvcalc.figures", "figures"),  # not `figures`: that name is the module kvcalc.figures
    "CostFigures": ("kvcalc.figures", "CostFigures"),
    "compare_rows": ("kvcalc.rows", "compare_rows"),
    "load_hardware": ("kvcalc.hardware", "load_hardware"),
    "roofline": ("kvcalc.hardware", "roofline"),
    "register": ("kvcalc.attention", "register"),
    "KvcalcError": ("kvcalc.errors", "KvcalcError"),
}
__all__ = list(_EXPORTS)


def __dir__() -> list[str]:  # the exports too (help(), tab completion), though none is imported yet
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str) -> "Any":  # an export's module is imported when the export is first read
    if name in _EXPORTS:
        module, attr = _EXPORTS[name]
        return getattr(import_module(module), attr)
    raise AttributeError(f"module 'kvcalc' has no attribute {name!r}")
