"""The columns `compare` and `sweep` can show, named sets of them, and `--columns` parsing (no I/O)."""

from __future__ import annotations

from kvcalc.errors import KvcalcError
from kvcalc.render import Column
from kvcalc.rows import COMPARE_COLUMNS

CATALOG: dict[str, Column] = {c.key: c for c in COMPARE_COLUMNS}
CATALOG.update({c.key: c for c in [
    Column("batch", "Batch", "int"),
    Column("kv_dtype", "KV\ndtype"),
    Column("params_total", "Params", "count"),
    Column("params_active", "Active\nparams", "count"),
    Column("weights_bytes", "Weights", "bytes"),
    Column("flops_prefill", "Prefill\nFLOPs", "flops"),
    Column("flops_decode_token", "Decode\nFLOPs/token", "flops"),
    Column("flops_generate_cached", "Generate\n(cache)", "flops"),
    Column("flops_generate_uncached", "Generate\n(no cache)", "flops"),
    Column("decode_bytes_read", "Decode\nbytes read", "bytes"),
    Column("decode_intensity", "FLOP\nper byte", "float"),
    Column("mla_schedule", "MLA\nschedule"),
    Column("flops_decode_token_naive", "Decode\nnaive", "flops"),
    Column("flops_decode_token_absorbed", "Decode\nabsorbed", "flops"),
    Column("hardware", "Hardware"),
    Column("prefill_seconds", "Prefill\ntime", "seconds"),
    Column("decode_seconds_per_token", "Decode\ntime/token", "seconds"),
    Column("tokens_per_second", "Tokens/s", "rate"),
    Column("decode_bound", "Decode\nbound"),
    Column("fits_in_memory", "Fits"),
]})

PRESETS: dict[str, list[str]] = {
    "kv": [c.key for c in COMPARE_COLUMNS],
    "cost": ["model", "ctx", "params_total", "params_active", "weights_bytes", "kv_cache_bytes", "flops_prefill",
             "flops_decode_token", "decode_bytes_read"],
    "generate": ["model", "ctx", "gen", "flops_decode_token", "flops_generate_cached", "flops_generate_uncached"],
    "mla": ["model", "ctx", "mla_cache", "kv_cache_bytes", "flops_decode_token_naive", "flops_decode_token_absorbed"],
    "time": ["model", "ctx", "weights_bytes", "kv_cache_bytes", "prefill_seconds", "decode_seconds_per_token",
             "tokens_per_second", "decode_bound", "fits_in_memory"],
}
CATALOG["gen"] = Column("gen", "Gen", "tokens")
CATALOG["mla_cache"] = Column("mla_cache", "MLA\ncache")
PRESETS["all"] = list(dict.fromkeys(key for name in ("kv", "cost", "generate", "mla", "time") for key in PRESETS[name]))
HARDWARE_KEYS = {"hardware", "prefill_seconds", "decode_seconds_per_token", "tokens_per_second", "decode_bound", "fits_in_memory"}


def choose(spec_text: str, have_hardware: bool) -> list[Column]:
    """Columns for a `--columns` value: preset names and column keys, comma-separated, in order, without repeats."""
    keys: list[str] = []
    for item in (part.strip() for part in spec_text.split(",")):
        if item in PRESETS:
            keys += PRESETS[item]
        elif item in CATALOG:
            keys.append(item)
        else:
            raise KvcalcError(
                f"unknown column {item!r}: use a preset ({', '.join(PRESETS)}) or a column key "
                f"({', '.join(sorted(CATALOG))})"
            )
    keys = list(dict.fromkeys(keys))
    if not have_hardware:
        asked = [k for k in keys if k in HARDWARE_KEYS and k != "hardware"]
        if asked and spec_text.strip() != "all":
            raise KvcalcError(f"columns {', '.join(asked)} need --hardware NAME (see 'kvcalc hardware')")
        keys = [k for k in keys if k not in HARDWARE_KEYS]
    return [CATALOG[k] for k in keys]
