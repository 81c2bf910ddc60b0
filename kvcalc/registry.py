"""Find a model: a bundled spec by name (case-insensitive, exact), a YAML spec path, a Hugging Face config.json path,
or a Hub id (ORG/NAME) whose config.json is in the local Hugging Face cache (never downloaded)."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kvcalc.errors import KvcalcError, LookupFailure, SpecError
from kvcalc.paths import user_path
from kvcalc.spec import SPEC_NAME_RULE, ModelSpec, spec_from_dict
from kvcalc.yamlfile import check_file, is_file, line_finder, load_yaml, read_text


def bundled_dir(folder: str) -> Path:
    """A bundled data folder: inside the installed package (the wheel's copy), or at the top of a source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / folder, here.parent / folder):
        if candidate.is_dir():
            return candidate
    raise LookupFailure(f"bundled {folder} not found (looked in {here / folder} and {here.parent / folder})")


def specs_dir() -> Path:
    """The bundled model specs."""
    return bundled_dir("model_specs")


def natural_key(name: str) -> tuple:
    """Sort key comparing runs of digits as numbers: gemma3-1b < gemma3-4b < gemma3-12b, llama3-8b < llama3-70b."""
    # re.split with a group alternates text and digit runs, so like compares with like at every position.
    parts = [int(p) if p.isdigit() else p.lower() for p in re.split(r"(\d+)", name)]
    return parts, name


def bundled_names() -> list[str]:
    """Names of the bundled specs, in natural order (digit runs compared as numbers)."""
    return sorted((p.stem for p in specs_dir().glob("*.yaml")), key=natural_key)


@dataclass(frozen=True)
class LoadedModel:
    """A validated spec and where it came from (for messages and `--explain`)."""

    spec: ModelSpec
    origin: str  # a bundled file, a YAML path, or a config.json path
    kind: str  # "bundled", "yaml" or "hf"
    config_keys: dict[str, str] = field(default_factory=dict)  # spec field -> HF config key, for kind "hf"
    warnings: tuple[str, ...] = ()  # one line each, for the user: e.g. the assumptions of a generic import
    windows_removed: bool = False  # --no-windows: the spec is the model's with its windows and chunks taken out


def _read_mapping(path: Path) -> object:
    """Parse a spec or config file: JSON by suffix, YAML otherwise (safe loader)."""
    if path.suffix.lower() != ".json":
        return load_yaml(path)
    from kvcalc.hf.jsonfile import loads  # over-long integers, deep nesting and duplicate keys named, not raised

    return loads(read_text(path), str(path))


# The rule ModelSpec.name enforces (kvcalc/spec.py), in words for messages.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
NAME_RULE = f"a spec {SPEC_NAME_RULE}"


def _as_name(text: str) -> str:
    """`text` made into a valid spec name: each run of other characters becomes '-'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")[:128].rstrip("-._") or "imported"


def check_name(name: str) -> str:
    """`name` unchanged when it is a valid spec name, else a KvcalcError stating the rule and suggesting one."""
    if not NAME_PATTERN.fullmatch(name):
        raise KvcalcError(f"--name {name!r}: {NAME_RULE}; try --name {_as_name(name)!r}")
    return name


def _name_from_path(path: Path) -> str:
    """A spec name for an imported config: the folder name for 'config.json', else the file stem."""
    return _as_name(path.parent.name if path.stem == "config" and path.parent.name else path.stem)


def load_path(path: Path, kind: str = "yaml", origin: str | None = None, name: str | None = None,
              config_only: bool = False) -> LoadedModel:
    """Load a YAML spec or an HF config (recognised by its model_type) from a file (`origin` and `name`: how to call
    an HF config in messages and the spec's name, by default its path and folder; `config_only`: refuse anything but
    a config, before checking it as a spec)."""
    data = _read_mapping(path)
    if isinstance(data, dict) and "model_type" in data:  # kvcalc.hf (every importer) only for what may be a config
        from kvcalc.hf import generic, is_hf_config, spec_from_config

        if is_hf_config(data):
            origin = origin or str(path)
            spec, imported = spec_from_config(data, origin, name or _name_from_path(path))
            warnings: tuple[str, ...] = (f"warning: {origin}: {generic.assumption(data)}",) if generic.is_generic(data) else ()
            if imported.defaulted:  # no published config leaves these out: a config cut short, more likely
                warnings += (f"warning: {origin}: it gives no {' or '.join(imported.defaulted)}: read as the config "
                             f"class's defaults ({spec.d_model:,} wide, {spec.n_layers:,} layers), as transformers "
                             "would; check it is the whole config",)
            return LoadedModel(spec, origin, "hf", imported.keys, warnings)
    if config_only:
        keys = ", ".join(map(str, list(data)[:4])) + (", ..." if len(data) > 4 else "") if isinstance(data, dict) else ""
        why = "no model_type" if not isinstance(data, dict) or "model_type" not in data else "not a config's fields"
        raise SpecError(f"{path}: not a Hugging Face config.json ({why}{'; its keys: ' + keys if keys else ''}); a YAML "
                        "spec is given to the other commands as it is")
    if path.suffix.lower() == ".json" and isinstance(data, dict):
        raise SpecError(f"{path}: model_type: not found; a JSON file must be a Hugging Face config.json with a model_type")
    if path.suffix.lower() == ".json":
        got = "null" if data is None else {list: "an array", str: "a string", bool: "a boolean"}.get(type(data), "a number")
        raise SpecError(f"{path}: a config.json is a JSON object of fields with a model_type, not {got}")
    return LoadedModel(spec_from_dict(data, str(path), line_finder(path)), str(path), kind)


def looks_like_path(arg: str, suffixes: tuple[str, ...] = (".yaml", ".yml", ".json")) -> bool:
    """True when MODEL (or HARDWARE) was meant as a file: it has a folder separator or a spec suffix."""
    return "/" in arg or "\\" in arg or arg.lower().endswith(suffixes)


def is_special_file(path: Path) -> bool:
    """True when `path` names something that is neither a regular file nor a folder (a FIFO, a socket, a symlink
    loop or a dangling link): it was meant as a file, and reading it must give a message, never block."""
    try:
        if not os.path.lexists(path):
            return False
        return not path.is_dir() and not path.is_file()
    except OSError:
        return True


# A Hub id: ORG/NAME, each part as the Hub allows (letters, digits, '.', '_', '-').
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def looks_like_hub_id(arg: str) -> bool:
    """True for ORG/NAME (exactly one slash, no spec suffix) that is not an existing path."""
    spec_file = arg.lower().endswith((".yaml", ".yml", ".json"))
    return bool(HUB_ID.fullmatch(arg)) and not spec_file and not user_path(arg).exists()


def hub_caches() -> list[tuple[Path, str]]:
    """The Hugging Face hub caches to look in, in huggingface_hub's order of precedence, each with where it came from."""
    caches: list[tuple[Path, str]] = []
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):  # the second is huggingface_hub's older name
        if os.environ.get(var):
            caches.append((user_path(os.environ[var], var), var))
    if os.environ.get("HF_HOME"):
        caches.append((user_path(os.environ["HF_HOME"], "HF_HOME") / "hub", "HF_HOME/hub"))
    if os.environ.get("XDG_CACHE_HOME"):
        caches.append((user_path(os.environ["XDG_CACHE_HOME"], "XDG_CACHE_HOME") / "huggingface" / "hub",
                       "XDG_CACHE_HOME/huggingface/hub"))
    try:
        caches.append((Path.home() / ".cache" / "huggingface" / "hub", "the default"))
    except RuntimeError:  # no home folder to find (HOME unset, no account): no default cache
        pass
    unique: dict[Path, str] = {}
    for cache, why in caches:
        unique.setdefault(cache, why)
    return list(unique.items())


SNAPSHOT = re.compile(r"[A-Za-z0-9._-]{1,255}")  # one folder name under snapshots/


def snapshot_config(repo: Path) -> Path | None:
    """config.json of a cached Hub repo folder: the snapshot refs/main names, else the newest snapshot that has one."""
    ref = repo / "refs" / "main"
    if is_file(ref):
        commit = read_text(ref, limit=4096).strip()  # huggingface_hub writes the snapshot's commit hash there
        if not SNAPSHOT.fullmatch(commit) or commit in (".", ".."):
            raise SpecError(f"{ref}: holds {commit[:60]!r}, not the name of a snapshot folder (a commit hash)")
        pinned = repo / "snapshots" / commit / "config.json"
        if is_file(pinned):
            return pinned
    found = [c for c in (repo / "snapshots").glob("*/config.json") if is_file(c)]
    # Newest by when the snapshot folder was written; the name breaks ties so the choice is the same every time.
    return max(found, key=lambda c: (c.parent.stat().st_mtime, c.parent.name), default=None)


def find_hub_config(hub_id: str) -> Path:
    """The cached config.json of Hub id ORG/NAME, or a LookupFailure saying where it looked (nothing is downloaded)."""
    folder = "models--" + hub_id.replace("/", "--")
    looked = []
    for cache, why in hub_caches():
        config = snapshot_config(cache / folder)
        if config is not None:
            return config
        looked.append(f"{cache / folder}/snapshots/*/config.json ({why})")
    raise LookupFailure(
        f"Hub id {hub_id}: not a file, and its config.json is not in the local Hugging Face cache; looked in "
        f"{'; '.join(looked)}. kvcalc never downloads: fetch it with `huggingface-cli download {hub_id} config.json` "
        "(or point HF_HUB_CACHE or HF_HOME at the cache that has it)"
    )


def find_bundled(arg: str, names: list[str], what: str, how_to_list: str,
                 other: tuple[Callable[[], list[str]], str] | None = None) -> str:
    """The bundled name `arg` names (exact, case-insensitive), or a LookupFailure suggesting the closest names; `other`:
    the names of the other kind of bundled file and the message for one of them (a preset's name given as MODEL),
    looked up on this error path only."""
    by_lower = {n.lower(): n for n in names}
    if arg.lower() in by_lower:
        return by_lower[arg.lower()]
    if other is not None and arg.lower() in {n.lower() for n in other[0]()}:
        raise LookupFailure(other[1])
    close = difflib.get_close_matches(arg.lower(), list(by_lower), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(by_lower[c] for c in close)}?" if close else ""
    raise LookupFailure(f"unknown {what} {arg!r}{hint} ({how_to_list})")


def names_bundled(arg: str) -> bool:
    """Whether MODEL `arg` is a bare bundled name, which means the bundled model even where a file of that name is in
    the folder (`./name` is the file)."""
    return not looks_like_path(arg) and arg.lower() in {n.lower() for n in bundled_names()}


def load_model(arg: str) -> LoadedModel:
    """Resolve MODEL: an existing file (but a bare bundled name is the bundled model's, with a warning), else a Hub
    id (ORG/NAME) in the local Hugging Face cache, else a bundled name (exact, case-insensitive), else a
    LookupFailure."""
    path = user_path(arg)
    if is_file(path, arg):
        if names_bundled(arg):
            # a bare name is the bundled model's, though a file here has it: said, as the file may be a changed copy
            bundled = _load_bundled(arg)
            note = (f"warning: {arg}: the bundled model, not the file {arg} in this folder; write ./{arg} for the file",)
            return LoadedModel(bundled.spec, bundled.origin, bundled.kind, warnings=note)
        return load_path(path)
    if is_special_file(path):
        check_file(path, arg)  # says what it is instead: a FIFO, a symlink loop, a dangling link, ...
    if looks_like_hub_id(arg):
        config = find_hub_config(arg)
        return load_path(config, origin=f"Hub id {arg} ({config})", name=_as_name(arg.split("/")[1]))
    if looks_like_path(arg):
        check_file(path, arg)  # says what it is instead: a folder, missing, ...
        raise SpecError(f"{arg}: no such file")
    return _load_bundled(arg)


def _load_bundled(arg: str) -> LoadedModel:
    """The bundled model `arg` names, or a LookupFailure suggesting the closest names (or naming a hardware preset)."""
    def presets() -> list[str]:
        from kvcalc.hardware import bundled_hardware

        return bundled_hardware()

    name = find_bundled(arg, bundled_names(), "model",
                        "'kvcalc list' shows the bundled models; a path to a YAML spec or config.json also works",
                        (presets, f"{arg!r} is a hardware preset, not a model: give it to --hardware ('kvcalc list' "
                                  "shows the bundled models)"))
    loaded = load_path(specs_dir() / f"{name}.yaml", kind="bundled")
    return LoadedModel(loaded.spec, f"bundled spec model_specs/{name}.yaml", "bundled")
