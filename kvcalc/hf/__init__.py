"""Import a Hugging Face `config.json` as a kvcalc spec, respecting each model_type's conventions and traps.

One module per family of model_types (dense.py, deepseek.py, ...), each registering its importers with
`kvcalc.hf.common.importer`; the traps each handles are written beside its code with their source (see the README).
"""

from __future__ import annotations

import math
import re

from kvcalc.errors import SpecError, printable
from kvcalc.hf import (  # noqa: F401  (the importers register themselves)
    bart,
    cohere2,
    deepseek,
    dense,
    gemma3n,
    gemma4,
    glm,
    glm4,
    glm4_moe,
    gpt_oss,
    kimi_linear,
    llama4,
    mamba2_hybrid,
    mimo_v2_flash,
    minicpm3,
    minimax,
    minimax_m2,
    mistral3,
    nemotron_nas,
    olmo,
    openelm,
    phi3,
    qwen3_5_moe,
    qwen3_next,
    qwen3_vl,
    ssm,
    starcoder2,
    t5,
    whisper,
)
from kvcalc.hf.common import IMPORTERS, TEXT_CONFIG_TYPES, Imported, config_keys, defaulted_sizes, show, show_error
from kvcalc.spec import ModelSpec, spec_from_dict
from kvcalc.units import MAX_TOKENS

__all__ = ["IMPORTERS", "Imported", "import_config", "is_hf_config", "spec_from_config"]


def is_hf_config(data: object) -> bool:
    """True for a mapping that looks like a Hugging Face config (it names a model_type)."""
    return isinstance(data, dict) and "model_type" in data and "layer_groups" not in data


def import_config(cfg: dict, origin: str, name: str) -> Imported:
    """Convert a parsed HF config into spec fields (not yet validated), or raise SpecError naming `origin`.

    A model_type without an importer goes to `generic.plain_decoder`, which refuses keys it cannot account for; a
    registered one first has its keys checked for near misses of the keys its importer reads (`vocabulary.check`)."""
    from kvcalc.hf import generic, vocabulary

    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", model_type):
        raise SpecError(f"{origin}: model_type: must be a string naming the architecture in letters, digits, '_', '.' "
                        f"and '-' (e.g. \"llama\"), got {show(model_type)}")
    vocabulary.bounded(cfg, "", origin)  # before any importer's per-key work (the generic one's too)
    # Any other model_type: a plain decoder when every key is a standard one, else refused naming the keys.
    convert = IMPORTERS.get(model_type, generic.plain_decoder)
    if model_type in IMPORTERS:
        vocabulary.check(cfg, origin, convert)  # a misspelled key must not pass for an absent one
    notes: list[str] = []
    try:
        body = convert(dict(cfg), origin, notes)
    except SpecError as exc:
        raise _text_config_key(exc, cfg, model_type, origin) from None
    except (TypeError, ValueError, ArithmeticError) as exc:  # a field of the wrong type, e.g. a string for a number
        raise SpecError(f"{origin}: a field has the wrong type for model_type {show(model_type)}: "
                        f"{show_error(exc)}") from None
    except RecursionError:
        raise SpecError(f"{origin}: a value is nested too deeply to import") from None
    # the path as text a spec holds: a control or format character in a file or folder name shown escaped
    data = {"name": name, "family": body.pop("family"),
            "source": f"Hugging Face config.json ({printable(origin)}, model_type {model_type})"}
    try:
        stretched_by = _rope_scaled_context(cfg, model_type, body, notes, origin)
    except SpecError as exc:  # read from text_config where the importer reads the text model there
        raise _text_config_key(exc, cfg, model_type, origin) from None
    from kvcalc.costs.engine_memory import OPT_IN_TOWERS, TOWER_FAMILIES

    if data["family"] in TOWER_FAMILIES and (multimodal := _multimodal(cfg)) is not None \
            and (multimodal or data["family"] not in OPT_IN_TOWERS):  # Mistral's only where it has its tower
        body["multimodal"] = multimodal  # a text-only checkpoint of a multimodal family: Gemma3ForCausalLM (1B)
    if notes:
        data["notes"] = "; ".join(notes)
    data.update(body)
    _distinct_names(data.get("layer_groups"))
    keys = config_keys(cfg, model_type)
    if stretched_by:  # show's Source column: not max_position_embeddings alone
        keys["max_context"] = f"{keys.get('max_context', 'max_position_embeddings')} × {stretched_by}"
    if "served_context" in data:
        keys["served_context"] = "original_max_position_embeddings (LongRoPE)"
    return Imported(data=data, keys=keys, defaulted=tuple(defaulted_sizes(notes)))


def _text_config_key(exc: SpecError, cfg: dict, model_type: str, origin: str) -> SpecError:
    """`exc` with its field named as the file writes it where the importer read it from a multimodal config's
    text_config ('text_config.hidden_size'): a key text_config holds, or one the importer found missing there (though
    the top level may hold it); a key read at the top level, or named with its level already, as it was."""
    text = cfg.get("text_config")
    head = f"{origin}: "
    message = str(exc)
    if model_type not in TEXT_CONFIG_TYPES or not isinstance(text, dict) or not message.startswith(head):
        return exc
    key, sep, rest = message[len(head):].partition(": ")
    base = re.split(r"[.\[ ]", key)[0]
    # tie_word_embeddings is read at both levels, its messages name the level (common.text_tie)
    if not sep or not re.fullmatch(r"[A-Za-z_][\w.\[\]]*", key) or base in ("text_config", "tie_word_embeddings"):
        return exc
    missing = rest.startswith("required field is missing") or "got nothing" in rest
    if base in text or missing or base not in cfg:
        return SpecError(f"{head}text_config.{key}: {rest}")
    return exc


# RoPE types whose factor leaves max_position_embeddings the scaled context already (vLLM 0.34.0 config/model.py
# _get_and_verify_max_len: "YaRN variants leave max_position_embeddings already scaled"); any other type with a factor
# (linear, dynamic; and 'default' with a factor, which vLLM multiplies by it too) stretches the positions by it
ROPE_ALREADY_SCALED = frozenset({"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling",
                                 "telechat3-yarn"})  # vLLM reads telechat3-yarn as yarn (patch_rope_parameters)
# RoPE types vLLM 0.34.0 builds (model_executor/layers/rotary_embedding get_rope; 'su' and 'mrope' are renamed by
# transformers_utils/config.py patch_rope_parameters): another name, a misspelling or another case ('YaRN'), would
# multiply max_context by its factor there and then be refused ("Unknown RoPE scaling type")
ROPE_TYPES = ROPE_ALREADY_SCALED | {"default", "linear", "dynamic", "ntk", "proportional", "mllama4", "bailing_mrope",
                                    "openpangu", "mrope"}


def _rope_scaled_context(cfg: dict, model_type: str, body: dict, notes: list[str], origin: str) -> str | None:
    """max_context times the RoPE scaling factor where the scaling stretches the positions (a linear or dynamic
    rope_scaling), as vLLM derives max_model_len: the last such factor of the layer types' (config/model.py
    _get_and_verify_max_len); Gemma 3's maximum is scaled already (vLLM skips it too). A LongRoPE model keeps its
    max_position_embeddings, with a note of vLLM's lower default (original_max_position_embeddings). Returns the key of
    the factor that stretched it, if one did."""
    inner = cfg.get("text_config")
    text: dict = inner if isinstance(inner, dict) else cfg
    key = "rope_scaling" if text.get("rope_scaling") else "rope_parameters"
    rope = text.get(key)
    if rope is not None and not isinstance(rope, dict):  # "yarn": transformers reads a mapping
        raise SpecError(f"{origin}: {key}: must be a mapping (rope_type, factor, ...), got {show(rope)}")
    if not isinstance(rope, dict) or model_type.startswith("gemma3") or not isinstance(body.get("max_context"), int):
        return None
    per_type = [isinstance(v, dict) for v in rope.values()]
    if any(per_type) and not all(per_type):  # {"full_attention": {...}, "x": 5}: neither form, its factor unread
        raise SpecError(f"{origin}: {key}: must be one RoPE mapping, or one mapping per layer type, got a mix")
    kinds = rope.values() if rope and all(per_type) else [rope]  # per layer type
    last, longrope, stretched_by = None, False, None
    for r in kinds:
        kind, factor = r.get("rope_type", r.get("type")), r.get("factor")
        if kind is not None and not isinstance(kind, str):
            raise SpecError(f"{origin}: {key}: its rope_type must be a name (linear, yarn, ...), got {show(kind)}")
        if kind is not None and kind not in ROPE_TYPES:
            raise SpecError(f"{origin}: {key}: rope_type {show(kind)} is not one vLLM builds ({', '.join(sorted(ROPE_TYPES))}); "
                            "check its spelling and case")
        longrope |= kind in ("longrope", "su")  # vLLM reads the legacy 'su' as longrope (patch_rope_parameters)
        if kind in ROPE_ALREADY_SCALED or factor is None:
            continue
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor <= 0:
            raise SpecError(f"{origin}: {key}: its factor must be a positive number, got {show(factor)}")
        last = (kind, factor)
    if last is not None and last[1] != 1:
        kind, factor = last
        # in floats, as the engines multiply (vLLM: derived_max_model_len *= scaling_factor, then int(); SGLang
        # hf_transformers/common.py: int(rope_scaling_factor * val)): 3,000 × 2.3 is 6,899 there, not 6,900
        scaled = int(body["max_context"] * float(factor))
        if not 1 <= scaled <= MAX_TOKENS:  # the factor's fault, not max_position_embeddings'
            raise SpecError(f"{origin}: {key}: factor {factor} stretches max_position_embeddings {body['max_context']:,} "
                            f"to {scaled:,} tokens, outside 1..2^40")
        notes.append(f"{key} {kind} factor {factor}: max_context {body['max_context']:,} × {factor} = {scaled:,}, "
                     "as vLLM derives max_model_len")
        body["max_context"] = scaled
        stretched_by = f"{'text_config.' if text is inner else ''}{key} factor"
    original = text.get("original_max_position_embeddings")
    if longrope and original is not None:  # vLLM int()s it: 4096.0 is 4,096, true or 4096.5 refused here
        from kvcalc.hf.common import whole

        original = whole(original, f"{'text_config.' if text is inner else ''}original_max_position_embeddings", origin)
    if longrope and original is not None and original < body["max_context"]:
        # vLLM 0.34.0 config/model.py _get_and_verify_max_len: "For LongRoPE, default to
        # original_max_position_embeddings to avoid performance degradation for shorter sequences"
        notes.append(f"LongRoPE: vLLM's default max_model_len is original_max_position_embeddings, {original:,} tokens "
                     f"(give it --max-model-len {body['max_context']} for the {body['max_context']:,} of "
                     "max_context, the config's max_position_embeddings)")
        body["served_context"] = original
    return stretched_by


def _multimodal(cfg: dict) -> bool | None:
    """Whether a config is a multimodal checkpoint's, where it says: by its architectures where it names them (the
    engines build a ...ForConditionalGeneration with its tower: Llama 4's, even trimmed to its text_config; a
    ...ForCausalLM without: Gemma 3 1B), else by a vision_config or audio_config beside its text model; None where it
    says neither (a text_config copied alone), which leaves the family's published checkpoints' answer."""
    architectures = cfg.get("architectures")
    if isinstance(architectures, list) and architectures and all(isinstance(a, str) for a in architectures):
        return any(a.endswith("ForConditionalGeneration") for a in architectures)
    return True if any(isinstance(cfg.get(k), dict) for k in ("vision_config", "audio_config")) else None


def _distinct_names(groups: object) -> None:
    """Group names that tell the groups apart: where an importer names two groups alike (Kimi Linear's layer 0 has a
    dense FFN and the other KDA layers the model's MoE: two 'kda'), one with an FFN of its own takes its kind
    ('kda-dense'), and any still alike a number."""
    if not isinstance(groups, list):
        return
    named = [g for g in groups if isinstance(g, dict) and isinstance(g.get("name"), str)]
    names = [g["name"] for g in named]
    for g in named:
        if names.count(g["name"]) > 1 and isinstance(g.get("ffn"), dict) and isinstance(g["ffn"].get("kind"), str):
            g["name"] = f"{g['name']}-{g['ffn']['kind']}"
    seen: set[str] = set()
    for g in named:
        if g["name"] in seen:
            g["name"] = next(f"{g['name']}-{n}" for n in range(2, len(named) + 2) if f"{g['name']}-{n}" not in seen)
        seen.add(g["name"])


def spec_from_config(cfg: dict, origin: str, name: str) -> tuple[ModelSpec, Imported]:
    """Import and validate an HF config as a ModelSpec."""
    imported = import_config(cfg, origin, name)
    try:
        return spec_from_dict(imported.data, origin), imported
    except SpecError as exc:  # a rule of the spec, broken by the config: say which of its keys the fields came from
        import re

        text = str(exc)
        named = [f"{field} is {key}" for field, key in imported.keys.items()
                 if field != key and re.search(rf"\b{field}\b", text)]
        raise SpecError(text + (f"\n{origin}: (the config's keys: {', '.join(named)})" if named else "")) from None
