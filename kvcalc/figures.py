"""Every cost figure of a model at one setting, under stable keys: what `compare`, `sweep` and `cost` report.

Keys (raw values; later versions only add keys): params_total, params_active, weights_bytes, kv_cache_bytes,
flops_prefill (a prefill of ctx tokens), flops_decode_token (one decode step at context ctx),
flops_generate_cached / flops_generate_uncached (gen tokens after a prompt of ctx), decode_bytes_read,
decode_intensity; MLA models add flops_decode_token_naive / _absorbed and mla_crossover; with hardware:
prefill_seconds, decode_seconds_per_token, tokens_per_second, decode_bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc.costs.cache import kv_cache
from kvcalc.costs.flops import decode_flops, generate_flops, mla_crossover, prefill_flops, resolve_schedule
from kvcalc.costs.params import param_counts, weights_bytes
from kvcalc.costs.traffic import decode_bytes, prefill_bytes
from kvcalc.spec import MLA, ModelSpec


@dataclass(frozen=True)
class Settings:
    """The knobs of a cost question; `mla_schedule` None means absorbed from a latent cache, naive from an expanded one."""

    ctx: int
    batch: int = 1
    gen: int = 1024
    kv_dtype: str = "bf16"
    weights_dtype: str = "bf16"
    mla_cache: str = "latent"
    mla_schedule: str | None = None
    dense_attn: bool = False
    hardware: object = None  # kvcalc.hardware.Hardware, imported only when asked for

    @property
    def schedule(self) -> str:
        return resolve_schedule(self.mla_cache, self.mla_schedule)


def figures(spec: ModelSpec, s: Settings) -> dict:
    """All cost figures of `spec` at settings `s` (exact ints, except ratios and seconds)."""
    params = param_counts(spec)
    decode = decode_flops(spec, s.ctx, s.batch, s.schedule, s.mla_cache)
    read = decode_bytes(spec, s.ctx, s.batch, s.weights_dtype, s.kv_dtype, s.mla_cache)
    out = {
        "params_total": params.total,
        "params_active": params.active,
        "weights_bytes": weights_bytes(params.total, s.weights_dtype),
        "kv_cache_bytes": kv_cache(spec, s.ctx, s.batch, s.kv_dtype, s.mla_cache).bytes,
        "flops_prefill": sum(prefill_flops(spec, s.ctx, s.batch, s.dense_attn).values()),
        "flops_decode_token": sum(decode.values()),
        "gen": s.gen,
        "weights_dtype": s.weights_dtype,
        "flops_generate_cached": sum(generate_flops(spec, s.ctx, s.gen, s.batch, True, s.schedule, s.mla_cache).values()),
        "flops_generate_uncached": sum(generate_flops(spec, s.ctx, s.gen, s.batch, False).values()),
        "decode_bytes_read": sum(read.values()),
        "mla_schedule": None,
    }
    out["decode_intensity"] = out["flops_decode_token"] / out["decode_bytes_read"]
    if any(isinstance(g.attention, MLA) for g in spec.groups):
        out["mla_schedule"] = s.schedule
        out["flops_decode_token_naive"] = sum(decode_flops(spec, s.ctx, s.batch, "naive", s.mla_cache).values())
        if s.mla_cache == "latent":
            out["flops_decode_token_absorbed"] = sum(decode_flops(spec, s.ctx, s.batch, "absorbed").values())
            out["mla_crossover"] = mla_crossover(spec, s.mla_cache)
    if s.hardware is not None:
        out.update(_roofline(spec, s, out))
    return out


def _roofline(spec: ModelSpec, s: Settings, out: dict) -> dict:
    from kvcalc.hardware import roofline

    moved = sum(prefill_bytes(spec, s.ctx, s.batch, s.weights_dtype, s.kv_dtype, s.mla_cache).values())
    prefill = roofline(out["flops_prefill"], moved, s.hardware)
    decode = roofline(out["flops_decode_token"], out["decode_bytes_read"], s.hardware)
    return {
        "hardware": s.hardware.name,
        "prefill_seconds": float(prefill.seconds),
        "decode_seconds_per_token": float(decode.seconds),
        "tokens_per_second": float(s.batch / decode.seconds),
        "decode_bound": decode.bound,
        "fits_in_memory": out["weights_bytes"] + out["kv_cache_bytes"] <= s.hardware.memory_bytes,
    }


def is_mla(spec: ModelSpec) -> bool:
    return any(isinstance(g.attention, MLA) for g in spec.groups)


def cost_breakdowns(spec: ModelSpec, s: Settings) -> dict[str, dict[str, int]]:
    """FLOPs by component for each pass `cost` reports, keyed by pass name.

    Passes: prefill (ctx tokens), decode_token (one step at context ctx), generate_cached and generate_uncached
    (gen tokens after ctx). MLA models get decode and cached generation under both schedules (naive, and absorbed
    when the cache is latent), suffixed _naive / _absorbed.
    """
    out = {"prefill": prefill_flops(spec, s.ctx, s.batch, s.dense_attn)}
    schedules = [s.schedule]
    if is_mla(spec):
        schedules = ["naive", "absorbed"] if s.mla_cache == "latent" else ["naive"]
    for schedule in schedules:
        suffix = f"_{schedule}" if is_mla(spec) else ""
        out[f"decode_token{suffix}"] = decode_flops(spec, s.ctx, s.batch, schedule, s.mla_cache)
        out[f"generate_cached{suffix}"] = generate_flops(spec, s.ctx, s.gen, s.batch, True, schedule, s.mla_cache)
    out["generate_uncached"] = generate_flops(spec, s.ctx, s.gen, s.batch, False)
    return out
