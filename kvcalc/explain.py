"""The derivation of every cache figure (`--explain`): formula, symbols, values and the fields they came from."""

from __future__ import annotations

import re

from kvcalc.costs.cache import CacheReport
from kvcalc.costs.paged import layer_pages_rule, stored_token
from kvcalc.costs.quant import group_size
from kvcalc.costs.state import component_dtypes
from kvcalc.dtypes import dtype_bits, elements_to_bytes
from kvcalc.settings import Settings
from kvcalc.spec import ModelSpec
from kvcalc.units import aside_bytes


def substitute(expression: str, values: dict[str, int]) -> str:
    """'2·n_kv·d_h' with {'n_kv': 8, 'd_h': 128} -> '2·8·128'."""
    names = sorted(values, key=len, reverse=True)
    if not names:
        return expression
    pattern = re.compile("|".join(re.escape(n) for n in names))
    return pattern.sub(lambda m: str(values[m.group(0)]), expression)


def derivation(report: CacheReport, origin: str, config_keys: dict[str, str] | None = None,
               spec: ModelSpec | None = None, s: Settings | None = None) -> dict:
    """A structured derivation of `report`: one entry per layer group, then the per-token rate and the total; with
    the `spec` and settings `s` of a parallel layout, what its busiest GPU holds (`per_gpu`)."""
    out = _derivation(report, origin, config_keys)
    if spec is not None and s is not None and s.gpus > 1:
        out["per_gpu"] = gpu_derivation(report, spec, s)
    return out


def gpu_derivation(report: CacheReport, spec: ModelSpec, s: Settings) -> dict:
    """The busiest GPU's cache under a parallel layout, group by group, as kvcalc.costs.parallel counts it: the layers
    its stage holds, one tp rank's share of each layer (the symbols the split changes), and the sequences it serves."""
    from kvcalc.costs.parallel import busiest_gpu, check_layout, gpu_groups, mtp_layers_on, stages

    check_layout(spec, s)
    plans = stages(spec, s)
    gpu = busiest_gpu(s, plans)
    mtp = mtp_layers_on(spec, s, gpu.stage)
    whole = {gc.group.label: {x.name: x.value for x in gc.formula.symbols} for gc in report.groups}
    groups = []
    for part in gpu_groups(s, plans[gpu.stage]):
        f, before = part.formula, whole.get(part.label, {})
        groups.append({
            "group": part.label, "layers_here": part.layers_here, "formula": f.expression,
            "substituted": substitute(f.expression, {x.name: x.value for x in f.symbols}),
            "elements_per_token_per_layer": f.elements,
            "split": [{"symbol": x.name, "whole": before[x.name], "per_rank": x.value}
                      for x in f.symbols if x.name in before and before[x.name] != x.value],
            "tokens_held": part.tokens_held, "sequences": part.sequences,
            "sequences_rule": "ceil(ceil(batch / dp) / tp)" if part.split_over_tp else "ceil(batch / dp)",
            "bytes_per_layer": part.kv_bytes_per_layer, "bytes": part.kv_bytes, "state_bytes": part.state_bytes,
            **({"padding_layers": part.padding_layers} if part.padding_layers else {}),
            **({"pages": part.pages, "block_size": part.block} if part.pages is not None else {})})
    return {"gpus": gpu.gpus, "tp": s.tp, "pp": s.pp, "dp": s.dp, "ep": s.ep, "stage": gpu.stage,
            "layers": list(gpu.layers), **({"mtp_layers": list(mtp)} if mtp else {}),
            "groups": groups, "kv_cache_bytes": gpu.kv_cache_bytes,
            "state_bytes": gpu.state_bytes, "weights_bytes": gpu.weights_bytes}


def _derivation(report: CacheReport, origin: str, config_keys: dict[str, str] | None) -> dict:
    keys = config_keys or {}
    bits = dtype_bits(report.kv_dtype)
    groups = []
    for gc in report.groups:
        g = gc.group
        symbols = _symbols(gc.formula, keys)
        held: dict = {"rule": g.attention.tokens_rule(g.layer)}
        if held["rule"] == "min(ctx, W)":  # not a KV-shared layer's window: it holds none of its own
            held.update(W=g.sliding_window, field=f"layer_groups[{g.index}].sliding_window")
        elif held["rule"] == "min(ctx, C)":
            held.update(C=g.layer.chunk, field=f"layer_groups[{g.index}].attention_chunk_size")
        state = None
        if gc.state_formula is not None:
            sf = gc.state_formula
            state = {"formula": sf.expression, "substituted": substitute(sf.expression, {s.name: s.value for s in sf.symbols}),
                     "reference": sf.reference, "symbols": _symbols(sf, keys), "components": sf.components,
                     "elements": gc.state_elements, "bytes": gc.state_bytes}
            dtypes = component_dtypes(g, report.settings)
            if len(set(dtypes.values())) > 1:  # Nemotron-H's fp32 SSM state beside its conv state in the KV dtype
                state["dtypes"] = dtypes
            if gc.engine_state_bytes_per_layer is not None:  # --engine: a page a layer (vLLM: padded, with its slots)
                state.update(engine_bytes_per_layer=gc.engine_state_bytes_per_layer,
                             **({"padding_layers": gc.pad_state_layers} if gc.pad_state_layers else {}))
        groups.append({
            "group": g.label,
            "layers": list(g.layers),
            "n_layers": len(g.layers),
            "kind": g.attention.kind,
            "formula": gc.formula.expression,
            "substituted": substitute(gc.formula.expression, {s.name: s.value for s in gc.formula.symbols}),
            "reference": gc.formula.reference,
            "symbols": symbols,
            "elements_per_token_per_layer": gc.formula.elements,
            "components": gc.formula.components,
            "tokens_held": gc.tokens_held,
            "tokens_rule": held,
            "state_elements_per_layer": gc.state_elements_per_layer,
            "elements": gc.elements,
            "bytes": gc.bytes,
            **({"state": state} if state else {}),
            **({"cross": _cross(gc, keys)} if gc.cross_formula is not None else {}),
            **({"kv_shared": True} if g.layer.kv_shared else {}),
            **({"engine": _engine(gc, report)} if gc.block_size is not None and gc.engine_bytes_per_layer else {}),
        })
    return {
        "model": report.model,
        "origin": origin,
        "ctx": report.ctx,
        "batch": report.batch,
        "kv_dtype": report.kv_dtype,
        "bits_per_element": bits,
        "mla_cache": report.mla_cache,
        "groups": groups,
        "elements_per_token": report.elements_per_token,
        "kv_bytes_per_token": report.bytes_per_token,
        "elements": report.elements,
        "kv_cache_bytes": report.bytes,
        **({"state_dtype": report.state_dtype, "state_elements": report.state_elements, "state_bytes": report.state_bytes,
            "cache_bytes": report.cache_bytes} if report.state_elements else {}),
        # --kv-quant: the payload at kv_dtype and what the scheme adds beside it (scales, zero points; fp8-ds-mla's
        # bf16 RoPE key), so each bytes line adds up (kvcalc.costs.quant)
        **({"kv_quant": report.kv_quant,
            "payload_bytes_per_token": elements_to_bytes(report.elements_per_token, report.kv_dtype),
            "payload_bytes": elements_to_bytes(report.elements, report.kv_dtype)} if report.kv_quant != "none" else {}),
        # --engine: the cache in the engine's whole pages (kvcalc.costs.paged), and its states as it stores them
        **({"engine": report.engine, "engine_kv_bytes": report.engine_bytes} if report.engine_bytes is not None else {}),
        **({"engine_state_bytes": report.engine_state_bytes}
           if report.engine_bytes is not None and report.state_elements else {}),
        # a model that stores a state component in a dtype of its own (Qwen3.5's fp32 recurrent state): elements by dtype
        **({"state_by_dtype": {dtype: report.batch * n for n, dtype in report.plan.state_parts}}
           if len(report.plan.state_parts) > 1 else {}),
    }


def _engine(gc, report: CacheReport) -> dict:
    """A group's cache in the engine's pages: each layer's pages of one sequence, the rule, and their bytes; where the
    engine stores a token otherwise than the cache's own layout, its bytes and how (kvcalc.costs.paged.stored_token)."""
    g = gc.group
    stored = stored_token(gc.formula, gc.heads, g.attention, report.settings)
    return {"block_size": gc.block_size, "pages": gc.pages,
            **({"stored_token_bytes": sum(part[-1] for part in stored), "stored_as": "; ".join(
                f"{name} {channels:,} in {_stored_words(name, dtype, scheme)} = {n:,}"
                for name, channels, dtype, scheme, n in stored)} if stored is not None else {}),
            "rule": layer_pages_rule(report.ctx, gc.tokens_held, g.layer, report.engine, gc.every_token, report.plan.ahead,
                                     report.plan.ahead_limit),
            "bytes_per_layer": gc.engine_bytes_per_layer, "bytes": gc.engine_bytes,
            **({"padding_layers": gc.pad_layers} if gc.pad_layers else {}),
            **({"padded_page": gc.padded_page} if gc.padded_page is not None else {})}


def _stored_words(name: str, dtype: str, scheme: str) -> str:
    """How a tensor is stored, in words: 'bf16', 'fp8 with an fp32 scale a 128' (fp8_ds_mla's latent and the indexer
    key; its RoPE key stays bf16)."""
    if scheme == "fp8-ds-mla":
        return "bf16" if name == "k_rope" else "fp8 with an fp32 scale a 128"
    return dtype if scheme == "none" else f"{dtype} with {scheme} scales"


def _engine_layers(n: int, pad: int, engine: str | None = "vllm") -> str:
    """'52 layers', or with vLLM's padding slots of the group's spec '(52 layers + 8 padding slots)' (SGLang: the
    buffers its pool holds for an encoder–decoder model's cross-attention and encoder layers)."""
    if not pad:
        return _count(n, "layer")
    if engine == "sglang":
        return f"({_count(n, 'layer')} + {_count(pad, 'buffer')} of SGLang's pool for the cross-attention and encoder layers)"
    return f"({_count(n, 'layer')} + {_count(pad, 'padding slot')} of vLLM's groups)"


def _count(n: int, noun: str) -> str:
    """'1 layer', '52 layers'."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _cross(gc, keys: dict[str, str]) -> dict:
    """The cross-attention part of a group's cache: K/V of every encoder position, in every layer."""
    f = gc.cross_formula
    return {"formula": f.expression, "substituted": substitute(f.expression, {s.name: s.value for s in f.symbols}),
            "reference": f.reference, "symbols": _symbols(f, keys), "elements_per_position_per_layer": f.elements,
            "encoder_positions": gc.cross_tokens}


def _symbols(formula, keys: dict[str, str]) -> list[dict]:
    """A formula's symbols with the spec field (and config.json key) each came from."""
    out = []
    for s in formula.symbols:
        leaf = s.source.split(".")[-1] if "/" not in s.source else "head_dim"
        out.append({"symbol": s.name, "value": s.value, "field": s.source,
                    "config_key": keys.get(leaf) if keys and "/" not in s.source else None})
    return out


def derivation_lines(d: dict, units: str = "binary") -> list[str]:
    """The derivation as indented plain-text lines, one fact per line."""
    mla = f", MLA cache {d['mla_cache']}" if d["mla_cache"] else ""
    lines = [f"{d['model']}  (from {d['origin']}; ctx {d['ctx']:,}, batch {d['batch']}, "
             f"{d['kv_dtype']} = {d['bits_per_element']} bits/element{mla})"]
    for g in d["groups"]:
        span = {"ctx": "full attention", "min(ctx, W)": "sliding window", "min(ctx, C)": "chunked attention"}.get(
            g["tokens_rule"]["rule"], g["tokens_rule"]["rule"])
        plural = "s" if g["n_layers"] != 1 else ""
        lines.append(f"  {g['group']}: layer{plural} {_span(g['layers'])} ({_count(g['n_layers'], 'layer')}), "
                     f"{_kind_text(g['kind'])}{span}")
        formula = "" if g["formula"] == g["substituted"] == str(g["elements_per_token_per_layer"]) else \
            f"{g['formula']} = {g['substituted']} = "  # a constant-state layer's 0: no '0 = 0 = 0'
        lines.append(f"    per token and layer: {formula}{g['elements_per_token_per_layer']:,} elements   [{g['reference']}]")
        lines += _symbol_lines(g["symbols"])
        rule = g["tokens_rule"]
        if rule["rule"] == "ctx":
            lines.append(f"    tokens held: ctx = {g['tokens_held']:,}")
        elif "C" in rule:
            lines.append(f"    tokens held: min(ctx, C) = min({d['ctx']:,}, {rule['C']:,}) = {g['tokens_held']:,}"
                         f"   (C from {rule['field']}: a query sees the tokens of its own chunk, up to C)")
        elif "W" not in rule:
            lines.append(f"    tokens held: {rule['rule']} = {g['tokens_held']:,}")
        else:
            lines.append(f"    tokens held: min(ctx, W) = min({d['ctx']:,}, {rule['W']:,}) = {g['tokens_held']:,}"
                         f"   (W from {rule['field']}: the keys a query sees, itself and the W − 1 before it)")
        cross = ""
        if "cross" in g:
            c = g["cross"]
            lines.append(f"    cross-attention per encoder position and layer: {c['formula']} = {c['substituted']} = "
                         f"{c['elements_per_position_per_layer']:,} elements, for {c['encoder_positions']:,} encoder positions"
                         f" (enc_ctx: K/V of the encoder output, cached once per input)")
            lines += _symbol_lines(c["symbols"])
            cross = f" + {c['elements_per_position_per_layer']:,} × {c['encoder_positions']:,}"
        lines.append(f"    elements: {_count(g['n_layers'], 'layer')} × ({g['elements_per_token_per_layer']:,} × {g['tokens_held']:,}{cross})"
                     f" × batch {d['batch']} = {g['elements']:,}")
        if "engine" in g:
            e = g["engine"]
            also = " and the encoder positions' pages" if "cross" in g else ""
            stored = (f"; a token of a layer as {d['engine']} stores it: {e['stored_as']}: {e['stored_token_bytes']:,} bytes"
                      if "stored_as" in e else "")
            padded = f"; each page padded to {e['padded_page']:,} bytes, the pool's unified page" if "padded_page" in e else ""
            lines.append(f"    {d['engine']} pages: {e['pages']:,} of {_count(e['block_size'], 'token')} a layer and sequence"
                         f" ({e['rule']}{stored}{padded}){also} = {e['bytes_per_layer']:,} bytes a layer for the batch;"
                         f" × {_engine_layers(g['n_layers'], e.get('padding_layers', 0), d['engine'])} = {e['bytes']:,}")
        if "state" in g:
            st = g["state"]
            lines.append(f"    constant state per sequence and layer: {st['formula']} = {st['substituted']} = "
                         f"{g['state_elements_per_layer']:,} elements   [{st['reference']}]")
            lines += _symbol_lines(st["symbols"])
            lines.append(f"    state: {_count(g['n_layers'], 'layer')} × {g['state_elements_per_layer']:,} × batch {d['batch']}"
                         f" = {st['elements']:,} elements")
    b = d["bits_per_element"]
    own = [g for g in d["groups"] if not g.get("kv_shared")]  # a KV-shared layer adds nothing: it holds no cache
    parts = " + ".join(f"{g['n_layers']}×{g['elements_per_token_per_layer']:,}" for g in own)
    lines.append(f"  per token (every layer holding one more token): {parts} = {d['elements_per_token']:,} elements"
                 f" × {b}/8 bytes{_extra(d, 'payload_bytes_per_token', 'kv_bytes_per_token')}"
                 f" = {d['kv_bytes_per_token']:,} bytes{aside_bytes(d['kv_bytes_per_token'], units)}")
    sums = " + ".join(f"{g['elements']:,}" for g in d["groups"]) + " = " if len(d["groups"]) > 1 else ""
    lines.append(f"  KV cache: {sums}{d['elements']:,} elements"
                 f" × {b}/8 bytes{_extra(d, 'payload_bytes', 'kv_cache_bytes')}"
                 f" = {d['kv_cache_bytes']:,} bytes{aside_bytes(d['kv_cache_bytes'], units)}")
    if "engine_kv_bytes" in d:
        paged = [g["engine"]["bytes"] for g in d["groups"] if "engine" in g]
        sums = " + ".join(f"{p:,}" for p in paged) + " = " if len(paged) > 1 else ""
        lines.append(f"  KV cache in {d['engine']}'s whole pages: {sums}{d['engine_kv_bytes']:,} bytes"
                     f"{aside_bytes(d['engine_kv_bytes'], units)}")
    if "per_gpu" in d:
        lines += _gpu_lines(d, units)
    if d.get("state_elements"):
        by_dtype = d.get("state_by_dtype") or {d["state_dtype"]: d["state_elements"]}
        names: dict[str, list[str]] = {}  # the components each dtype stores, named where a group's dtypes differ
        for g in d["groups"]:
            for name, dtype in ((g.get("state") or {}).get("dtypes") or {}).items():
                if name not in names.setdefault(dtype, []):
                    names[dtype].append(name)
        each = " + ".join(f"{n:,} elements × {dtype_bits(dtype)}/8 bytes ({dtype}"
                          + (f": {', '.join(names[dtype])}" if names.get(dtype) else "") + ")" for dtype, n in by_dtype.items())
        lines.append(f"  constant states: {each} = "
                     f"{d['state_bytes']:,} bytes{aside_bytes(d['state_bytes'], units)}; KV cache + states = "
                     f"{d['cache_bytes']:,} bytes{aside_bytes(d['cache_bytes'], units)}")
        if d.get("engine_state_bytes") is not None and d["engine_state_bytes"] != d["state_bytes"]:
            each = " + ".join(f"{_engine_layers(g['n_layers'], g['state'].get('padding_layers', 0))} × "
                              f"{g['state']['engine_bytes_per_layer']:,}" for g in d["groups"] if "state" in g)
            how = ("two pages each in a hybrid, with vLLM's prefix caching, one in a model of states alone; one more per"
                   " speculative token under --mtp; padded to the unified page" if d["engine"] == "vllm" else
                   f"a slot a sequence and {_count(d['engine_state_bytes'] // d['state_bytes'] - 1, 'tracking slot')}"
                   " more, its radix cache's extra buffer, each exact")
            lines.append(f"  constant states as {d['engine']} stores them ({how}):"
                         f" {each} = {d['engine_state_bytes']:,} bytes{aside_bytes(d['engine_state_bytes'], units)}")
    return lines


def _gpu_lines(d: dict, units: str) -> list[str]:
    """The busiest GPU's cache under a parallel layout, group by group (see gpu_derivation)."""
    from kvcalc.costs.parallel import held_layers_text

    p = d["per_gpu"]
    ep = f", ep {p['ep']}" if p["ep"] > 1 else ""
    lines = [f"  per GPU: tp {p['tp']} × pp {p['pp']} × dp {p['dp']} = {p['gpus']:,} GPUs{ep}; the busiest holds stage"
             f" {p['stage']}, {held_layers_text(p['layers'], p.get('mtp_layers', []))}"]
    for g in p["groups"]:
        if not g["elements_per_token_per_layer"] and not g["bytes"]:  # a constant-state group: its states, below
            held = f"constant states {g['state_bytes']:,} bytes{aside_bytes(g['state_bytes'], units)}" \
                if g["state_bytes"] else "no state either"
            lines.append(f"    {g['group']}: {g['layers_here']} of its layers here; no per-token cache; {held}")
            continue
        split = ", ".join(f"{x['symbol']} {x['whole']:,} → {x['per_rank']:,}" for x in g["split"])
        share = f"one of {p['tp']} tp ranks: {split}" if split else "the whole layer's" if p["tp"] == 1 else \
            f"the same on each of {p['tp']} tp ranks"
        lines.append(f"    {g['group']}: {g['layers_here']} of its layers here; a layer per token: {g['formula']} ="
                     f" {g['substituted']} = {g['elements_per_token_per_layer']:,} elements ({share})")
        values = substitute(g["sequences_rule"], {"batch": d["batch"], "dp": p["dp"], "tp": p["tp"]})
        paged = f" in {_count(g['pages'], 'page')} of {_count(g['block_size'], 'token')} a sequence" if "pages" in g else ""
        lines.append(f"      sequences: {g['sequences_rule']} = {values} = {g['sequences']:,}; {g['tokens_held']:,} tokens held{paged};"
                     f" {g['bytes_per_layer']:,} bytes a layer × "
                     f"{_engine_layers(g['layers_here'], g['padding_layers'], d.get('engine')) if 'padding_layers' in g else g['layers_here']}"
                     f" = {g['bytes']:,}")
    cached = [g["bytes"] for g in p["groups"] if g["bytes"]]  # a constant-state group holds no per-token cache
    lines.append(f"    KV cache per GPU: {_sum_of(cached, p['kv_cache_bytes'])}{aside_bytes(p['kv_cache_bytes'], units)}")
    if p["state_bytes"]:
        states = [g["state_bytes"] for g in p["groups"] if g["state_bytes"]]
        lines.append(f"    constant states per GPU: {_sum_of(states, p['state_bytes'])}{aside_bytes(p['state_bytes'], units)}")
    return lines


def _sum_of(parts: list[int], total: int) -> str:
    """'a + b = total bytes' where the groups' bytes add up to the GPU's; where each group's were rounded from a part
    byte and the GPU's total once (README conventions: bytes on totals), it says so rather than a false sum."""
    if len(parts) < 2:
        return f"{total:,} bytes"
    terms = " + ".join(f"{b:,}" for b in parts)
    if sum(parts) == total:
        return f"{terms} = {total:,} bytes"
    return f"{total:,} bytes (the groups' {terms}, each rounded up to whole bytes, the total rounded once)"


def _kind_text(kind: str) -> str:
    """A layer kind as the list command shows it (GDN, MAMBA2, GQA), then ', '; nothing for a layer without a mixer,
    whose rule says so."""
    from kvcalc.attention import kind_label

    return "" if kind == "none" else f"{kind_label(kind)}, "


def _symbol_lines(symbols: list[dict]) -> list[str]:
    """One line a symbol: its value and the spec field (and config.json key) it came from."""
    return [f"      {s['symbol']} = {s['value']:,}   from {s['field']}"
            + (f"  (config.json: {s['config_key']})" if s["config_key"] else "") for s in symbols]


def _extra(d: dict, payload: str, total: str) -> str:
    """Under --kv-quant, ' = <payload> bytes + <extra> bytes of <what the scheme stores>'; else nothing."""
    if "kv_quant" not in d:
        return ""
    scheme, extra = d["kv_quant"], d[total] - d[payload]
    what = ("fp32 scales and the RoPE key kept in bf16" if scheme == "fp8-ds-mla"
            else "fp16 scales and zero points" if group_size(scheme) else "fp32 scales")
    # a key's group spans G tokens: the per-token rate is a whole group's share, a short cache pays the whole group
    rate = f", a group of {group_size(scheme)} tokens' share" if group_size(scheme) and payload.endswith("per_token") else ""
    return f" = {d[payload]:,} bytes + {extra:,} bytes of {scheme}'s {what}{rate}"


def _span(layers: list[int]) -> str:
    from kvcalc.spec import layer_text

    return layer_text(layers)
