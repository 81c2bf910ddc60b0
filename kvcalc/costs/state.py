"""The constant states of linear-attention and state-space layers by storage dtype (README, Conventions).

A state is stored at --state-dtype when it is given; otherwise each component at the dtype the model fixes for it
(RecurrentState.recurrent_dtype: Qwen3.5's float32 recurrent state, which vLLM keeps in mamba_ssm_cache_dtype) or
at the KV dtype (Settings.state_storage: bf16 under SGLang, and under vLLM below 16 bits). SGLang keeps the recurrent
state of the layers it pools through Mamba2CacheParams or KimiLinearCacheParams (Gated DeltaNet, Mamba-2, KDA) in
float32 when the model fixes none (srt/configs/mamba_utils.py mamba2_state_dtype: the SGLANG_MAMBA_SSM_DTYPE
variable, else the config's mamba_ssm_dtype, else "float32"). Bytes round up to whole bytes once per dtype.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvcalc.attention.recurrent import RecurrentState
from kvcalc.dtypes import elements_to_bytes
from kvcalc.settings import Settings
from kvcalc.spec import ResolvedGroup

SGLANG_FP32_RECURRENT = frozenset({"gated_deltanet", "mamba2", "kda"})  # SGLang's Mamba2/KimiLinear cache params


def state_parts(group: ResolvedGroup, s: Settings) -> tuple[tuple[int, str], ...]:
    """One layer's constant state of `group` (its parallel mixer's, Falcon-H1), one sequence, as (elements, dtype)
    pairs (see the module's rule); none for a layer without a state."""
    kind, layer = _state_kind(group)
    formula = kind.state_formula(layer)
    if not _fixed_dtypes(kind, layer, s):
        return ((formula.elements, s.state_storage),) if formula.elements else ()
    by_dtype: dict[str, int] = {}
    for name, dtype in component_dtypes(group, s).items():
        by_dtype[dtype] = by_dtype.get(dtype, 0) + formula.components[name]
    return tuple((n, dtype) for dtype, n in by_dtype.items())


def temporal_parts(group: ResolvedGroup, s: Settings) -> tuple[tuple[int, str], ...]:
    """One layer's recurrent state component of `group` (its kind's `temporal`: what a step carries from token to
    token, not the convolution's inputs), one sequence, as (elements, dtype) pairs like state_parts: what a
    speculative verify writes once a token (vLLM's Gated DeltaNet: fused_sigmoid_gating stores each token's state in
    its own slot, spec_state_indices); none for a layer without a state."""
    kind, layer = _state_kind(group)
    name: str = getattr(kind, "temporal", "")
    n = kind.state_formula(layer).components.get(name, 0)
    return ((n, component_dtypes(group, s)[name]),) if n else ()


def component_dtypes(group: ResolvedGroup, s: Settings) -> dict[str, str]:
    """The storage dtype of each component of one layer's constant state of `group` ('ssm', 'conv', ...), as
    state_parts stores them."""
    kind, layer = _state_kind(group)
    fixed = _fixed_dtypes(kind, layer, s)
    return {name: fixed.get(name, s.state_storage) for name in kind.state_formula(layer).components}


def _state_kind(group: ResolvedGroup) -> tuple:
    """The kind whose constant state a layer of `group` holds, with its layer: the parallel mixer's, else its own."""
    return (group.parallel, group.parallel_layer) if group.parallel is not None else (group.attention, group.layer)


def _fixed_dtypes(kind, layer, s: Settings) -> dict[str, str]:
    """The components' dtypes the model or the engine fix (none under --state-dtype, which stores every one)."""
    return {} if s.state_dtype is not None else kind.state_dtypes(layer) or _engine_dtypes(kind, s)


def _engine_dtypes(kind: object, s: Settings) -> dict[str, str]:
    """The dtypes the engine fixes for a state's components when the model fixes none: SGLang's fp32 recurrent state
    of the layers in its Mamba2/KimiLinear cache params (see the module's rule)."""
    if s.engine == "sglang" and isinstance(kind, RecurrentState) and kind.kind in SGLANG_FP32_RECURRENT:
        return {kind.temporal: "fp32"}
    return {}


def parts_bytes(parts: tuple[tuple[int, str], ...], copies: int) -> int:
    """Bytes of `copies` (sequences × layers) of a state given as (elements, dtype) pairs, each dtype's elements
    rounded up to whole bytes once."""
    return sum(elements_to_bytes(copies * n, dtype) for n, dtype in parts)


def step_state_bytes(state: int, temporal: int, tokens: int) -> int:
    """Bytes a decode step of `tokens` a sequence moves of constant states of `state` bytes, `temporal` of them their
    recurrent components: each state read and written back once, and the recurrent component written once more a
    token past the first (a speculative verify: vLLM's Gated DeltaNet stores each token's state in its own slot)."""
    return 2 * state + (tokens - 1) * temporal


def merged_parts(parts: Iterable[tuple[int, str]]) -> tuple[tuple[int, str], ...]:
    """(elements, dtype) pairs from several layers or groups as one pair a dtype, its elements summed (in the order
    the dtypes first come)."""
    by_dtype: dict[str, int] = {}
    for n, dtype in parts:
        by_dtype[dtype] = by_dtype.get(dtype, 0) + n
    return tuple((n, dtype) for dtype, n in by_dtype.items())


def merged_bytes(parts: Iterable[tuple[int, str]]) -> int:
    """Bytes of states given as (elements, dtype) pairs from several layers or groups, each dtype's elements summed
    and rounded up to whole bytes once (README conventions: bytes on totals)."""
    return sum(elements_to_bytes(n, dtype) for n, dtype in merged_parts(parts))


def state_label(parts: tuple[tuple[int, str], ...], default: str) -> str:
    """The state dtype as outputs name it: the one dtype, or each joined by '+' ('fp32+bf16') when parts differ."""
    return "+".join(dtype for _, dtype in parts) if len(parts) > 1 else (parts[0][1] if parts else default)
