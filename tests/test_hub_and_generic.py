"""Any config, safely (an unknown model_type imports as a plain decoder only from standard keys, else is refused by
name), and Hub ids resolved offline from the local Hugging Face cache."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import run
from kvcalc.costs.cache import kv_cache
from kvcalc.costs.params import param_totals
from kvcalc.errors import KvcalcError
from kvcalc.hf import IMPORTERS
from kvcalc.registry import load_model
from kvcalc.settings import Settings

SUPPORTED = ", ".join(sorted(IMPORTERS))

# Only standard decoder keys (and harmless ones), under a model_type kvcalc has no importer for.
PLAIN = {
    "architectures": ["NewDecoderForCausalLM"], "model_type": "new_decoder", "hidden_size": 512,
    "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
    "intermediate_size": 1024, "vocab_size": 1000, "max_position_embeddings": 8192, "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.57.0",
}


def write(folder: Path, cfg: dict, name: str = "config.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(cfg))
    return path


def failing(*args) -> str:
    res = run(*args, ok=False)
    assert res.exit_code != 0, str(res)
    assert "Traceback" not in res.stdout + res.stderr, str(res)
    return res.stderr


# --- Any config, safely


def test_unknown_model_type_with_standard_keys_imports_as_plain_decoder(tmp_path):
    path = write(tmp_path / "new-model", PLAIN)
    lm = load_model(str(path))
    # 4 layers x 2 (K and V) x 2 KV heads x 64 dims per token, hand-derived from the config.
    assert kv_cache(lm.spec, Settings(ctx=1)).elements_per_token == 4 * 2 * 2 * 64
    assert lm.spec.name == "new-model" and lm.spec.family == "new_decoder"
    # The same numbers as the Llama importer gives the same keys.
    llama = load_model(str(write(tmp_path / "llama", {**PLAIN, "model_type": "llama"}))).spec
    ignore = {"name", "family", "source", "notes"}
    assert lm.spec.model_dump(exclude=ignore) == llama.model_dump(exclude=ignore)
    assert llama.notes is None and load_model(str(tmp_path / "llama" / "config.json")).warnings == ()
    # The assumption, in one line, for the user and in the spec's notes.
    (warning,) = lm.warnings
    assert warning.startswith(f"warning: {path}: model_type 'new_decoder' is not known to kvcalc: imported as a plain "
                              "Llama-style decoder")
    assert "\n" not in warning and "gated FFN" in warning
    assert "model_type 'new_decoder' is not known to kvcalc" in lm.spec.notes
    run("show", path, "--ctx", "1k")


@pytest.mark.slow
def test_generic_import_warning_on_stderr(tmp_path):
    """The CLI side: the one-line assumption reaches stderr (needs the hook that prints LoadedModel.warnings)."""
    path = write(tmp_path / "new-model", PLAIN)
    res = run("show", path, "--ctx", "1k")
    assert "warning:" in res.stderr and "model_type 'new_decoder' is not known to kvcalc" in res.stderr, str(res)
    assert "plain Llama-style decoder" in res.stderr, str(res)
    # run too (an audit: it printed only its own warnings); csv and json keep stderr's warnings out of the data
    res = run("run", path, "--ctx", "16", "--decode", "1", "-q")
    assert "model_type 'new_decoder' is not known to kvcalc" in res.stderr, str(res)


@pytest.mark.parametrize("key, value, mechanism", [
    ("linear_num_value_heads", 32, "linear attention"),
    ("kv_lora_rank", 512, "latent attention"),
    ("mamba_d_state", 128, "state-space/convolution layers"),
    ("index_topk", 2048, "attention indexer"),
    ("num_kv_shared_layers", 10, "KV sharing"),
    ("attention_chunk_size", 8192, "chunked attention"),
    ("num_experts", 64, "experts/MoE"),
    ("sliding_window_pattern", 6, "hybrid layer patterns"),
    # a review: the first pattern to match named these, 'local' and 'index' before the narrower ones
    ("num_local_experts", 8, "experts/MoE"), ("kv_shared_layer_index", 3, "KV sharing"),
    ("global_attn_every_n_layers", 3, "hybrid layer patterns"), ("shared_expert_intermediate_size", 512, "experts/MoE"),
])
def test_unmodelled_mechanism_is_refused_naming_the_key(tmp_path, key, value, mechanism):
    path = write(tmp_path, {**PLAIN, key: value})
    err = failing("show", path)
    assert f"error: {path}: model_type: 'new_decoder' is not supported; supported model_types: {SUPPORTED}" in err
    assert f"its config has keys of mechanisms kvcalc does not model for an unknown model_type: {key} ({mechanism})" in err
    assert "write the model as a YAML spec (model_specs/*.yaml show every field, MoE and MLA included)" in err  # what to do


def test_layer_types_other_than_sliding_or_full_are_refused(tmp_path):
    types = ["linear_attention", "linear_attention", "linear_attention", "full_attention"]
    err = failing("import", write(tmp_path, {**PLAIN, "layer_types": types, "full_attention_interval": 4}))
    assert "mechanisms kvcalc does not model for an unknown model_type: full_attention_interval (hybrid layer patterns), layer_types (linear_attention)" in err


def test_unknown_keys_are_refused_listing_them(tmp_path):
    err = failing("show", write(tmp_path, {**PLAIN, "logit_scale": 0.5, "use_qk_norm": True}))
    assert "its config has keys kvcalc does not read: logit_scale, use_qk_norm;" in err
    assert "only when every key is a standard one" in err


def test_missing_standard_keys_are_refused_listing_them(tmp_path):
    cfg = {k: v for k, v in PLAIN.items() if k not in ("intermediate_size", "vocab_size")}
    err = failing("show", write(tmp_path, cfg))
    assert "a plain decoder needs the standard keys it lacks: intermediate_size, vocab_size" in err


def test_generic_windows_follow_the_standard_keys(tmp_path):
    every = load_model(str(write(tmp_path / "a", {**PLAIN, "sliding_window": 1024})))
    assert [g.sliding_window for g in every.spec.groups] == [1024]
    assert "sliding_window 1024 on every layer" in every.warnings[0]
    # Qwen2's rule, the only source of max_window_layers: layers from max_window_layers on slide.
    later = load_model(str(write(tmp_path / "b", {**PLAIN, "sliding_window": 1024, "max_window_layers": 2})))
    assert kv_cache(later.spec, Settings(ctx=4096)).elements == 2 * 2 * 2 * 64 * (4096 + 1024)
    off = load_model(str(write(tmp_path / "c", {**PLAIN, "sliding_window": 1024, "use_sliding_window": False})))
    assert all(g.sliding_window is None for g in off.spec.groups) and "use_sliding_window is false" in off.spec.notes
    types = ["sliding_attention", "full_attention"] * 2
    listed = load_model(str(write(tmp_path / "d", {**PLAIN, "sliding_window": 1024, "layer_types": types})))
    assert kv_cache(listed.spec, Settings(ctx=4096)).elements == 2 * 2 * 2 * 64 * (4096 + 1024)
    err = failing("show", write(tmp_path / "e", {**PLAIN, "layer_types": types}))
    assert "layer_types has sliding_attention layers but sliding_window is not set" in err


def test_generic_defaults_are_stated(tmp_path):
    # each key a plain decoder takes a rule for, named in the warning (a sweep of transformers 5.25's classes: the MHA
    # of an absent num_key_value_heads went unsaid, and InternLM3's class has 2 KV heads)
    drop = ("tie_word_embeddings", "rms_norm_eps", "num_key_value_heads", "head_dim")
    cfg = {k: v for k, v in PLAIN.items() if k not in drop}
    lm = load_model(str(write(tmp_path, {**cfg, "layer_norm_eps": 1e-5})))
    assert lm.spec.tie_embeddings and lm.spec.norm == "layernorm"
    for said in ("tied embeddings (tie_word_embeddings absent: PretrainedConfig's default before transformers 5, the "
                 "value a saved config left out)", "LayerNorm (layer_norm_eps)",
                 "MHA (num_key_value_heads absent: Llama's rule, as many KV heads as query heads)",
                 "head_dim hidden_size / num_attention_heads (absent: Llama's rule)"):
        assert said in lm.warnings[0], lm.warnings[0]
    assert kv_cache(lm.spec, Settings(ctx=1)).elements_per_token == 4 * 2 * 8 * (512 // 8)  # 8 KV heads of 64
    stated = load_model(str(write(tmp_path / "all", PLAIN))).warnings[0]
    assert "MHA" not in stated and "head_dim" not in stated and "tied" not in stated


# --- Hub ids, offline

HUB_ID = "Qwen/Qwen3-Next-80B-A3B-Instruct"


def cache_snapshot(hub: Path, hub_id: str, commit: str, cfg: dict) -> Path:
    """A config.json where huggingface_hub puts it: HUB/models--ORG--NAME/snapshots/COMMIT/config.json."""
    return write(hub / ("models--" + hub_id.replace("/", "--")) / "snapshots" / commit, cfg)


@pytest.fixture
def hub(tmp_path, monkeypatch) -> Path:
    """An empty HF cache that HF_HUB_CACHE points at; the home folder moved so no real cache is seen."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def test_hub_id_resolves_from_the_local_cache(hub):
    config = cache_snapshot(hub, HUB_ID, "0123abc", {**PLAIN, "model_type": "llama"})
    lm = load_model(HUB_ID)
    assert lm.origin == f"Hub id {HUB_ID} ({config})"
    assert lm.spec.name == "Qwen3-Next-80B-A3B-Instruct" and lm.kind == "hf"
    res = run("show", HUB_ID, "--ctx", "1k")
    assert f"Hub id {HUB_ID}" in res.stdout


def test_hub_id_from_hf_home(hub, monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    config = cache_snapshot(tmp_path / "hf-home" / "hub", HUB_ID, "0123abc", {**PLAIN, "model_type": "llama"})
    assert load_model(HUB_ID).origin == f"Hub id {HUB_ID} ({config})"


def test_hub_id_prefers_the_snapshot_refs_main_names(hub):
    pinned = cache_snapshot(hub, HUB_ID, "aaa", {**PLAIN, "model_type": "llama"})
    newer = cache_snapshot(hub, HUB_ID, "bbb", {**PLAIN, "model_type": "llama", "num_hidden_layers": 8})
    os.utime(newer.parent, (pinned.parent.stat().st_mtime + 60,) * 2)
    assert load_model(HUB_ID).spec.n_layers == 8  # no refs/main: the newest snapshot
    refs = hub / ("models--" + HUB_ID.replace("/", "--")) / "refs"
    refs.mkdir()
    (refs / "main").write_text("aaa\n")
    assert load_model(HUB_ID).origin == f"Hub id {HUB_ID} ({pinned})"


def test_hub_id_of_an_unknown_model_type_is_checked_like_a_file(hub):
    cache_snapshot(hub, HUB_ID, "0123abc", {**PLAIN, "model_type": "qwen9_next", "linear_num_value_heads": 32})
    err = failing("show", HUB_ID)
    assert f"error: Hub id {HUB_ID} (" in err and "linear_num_value_heads (linear attention)" in err


def test_missing_hub_id_says_where_it_looked(hub, tmp_path):
    err = failing("show", HUB_ID)
    folder = "models--Qwen--Qwen3-Next-80B-A3B-Instruct"
    assert f"error: Hub id {HUB_ID}: not a file, and its config.json is not in the local Hugging Face cache" in err
    assert f"{hub / folder}/snapshots/*/config.json (HF_HUB_CACHE)" in err
    assert f"{tmp_path / 'home' / '.cache' / 'huggingface' / 'hub' / folder}/snapshots/*/config.json (the default)" in err
    assert f"kvcalc never downloads: fetch it with `huggingface-cli download {HUB_ID} config.json`" in err


def test_an_existing_file_wins_over_a_hub_id(hub, tmp_path, monkeypatch):
    cache_snapshot(hub, HUB_ID, "0123abc", {**PLAIN, "model_type": "llama"})
    monkeypatch.chdir(tmp_path)
    local = write(tmp_path / "Qwen", {**PLAIN, "model_type": "llama", "num_hidden_layers": 2}, "Qwen3-Next-80B-A3B-Instruct")
    assert load_model(HUB_ID).origin == HUB_ID and load_model(HUB_ID).spec.n_layers == 2
    local.unlink()
    assert load_model(HUB_ID).origin.startswith("Hub id ")


@pytest.mark.parametrize("arg", ["./x.yaml", "a/b/c.json", "nosuch/spec.yaml", "a/b/c"])
def test_paths_that_are_not_hub_ids_still_say_no_such_file(hub, arg):
    with pytest.raises(KvcalcError, match=f"^{arg}: no such file$"):
        load_model(arg)


def test_a_null_window_over_a_default_one_and_a_false_switch_over_fixed_biases_are_noted(tmp_path):
    # a review: the README says both are noted; neither was. A null sliding_window drops MistralConfig's 4,096 (Mistral
    # Small 3's config says null), and Qwen2's modules keep q/k/v biases whatever attention_bias says
    mistral = {"model_type": "mistral", "hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8,
               "num_key_value_heads": 2, "intermediate_size": 4096, "vocab_size": 1000, "max_position_embeddings": 32768}
    qwen2 = {**mistral, "model_type": "qwen2"}
    for cfg, said in (({**mistral, "sliding_window": None},
                       "sliding_window null read as no window (MistralConfig's default, 4096, does not apply)"),
                      ({**qwen2, "attention_bias": False}, "attention_bias false ignored: the qwen2 modules always have q/k/v biases")):
        path = tmp_path / "config.json"
        path.write_text(json.dumps(cfg))
        lm = load_model(str(path))
        assert said in (lm.spec.notes or ""), lm.spec.notes
    # left out, MistralConfig's window stands (and a Qwen2 config without the switch has nothing to note)
    path.write_text(json.dumps(mistral))
    assert load_model(str(path)).spec.groups[0].layer.window == 4096
    path.write_text(json.dumps(qwen2))
    assert "attention_bias" not in (load_model(str(path)).spec.notes or "")


def test_a_spec_rule_a_config_breaks_names_the_configs_keys(tmp_path):
    # a review: the message named only kvcalc's fields (n_heads, n_kv_heads), which the config does not have
    cfg = json.loads((Path(__file__).parent / "data" / "reference" / "models" / "llama-3-8b.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "num_key_value_heads": 3}))
    err = run("show", str(path), ok=False).stderr
    assert "layer_groups[0].attention: n_heads (32) must be divisible by n_kv_heads (3)" in err
    assert "(the config's keys: n_heads is num_attention_heads, n_kv_heads is num_key_value_heads)" in err


@pytest.mark.parametrize("act", ["relu2", "xielu", "gelu", ["silu"]])
def test_generic_import_refuses_an_activation_that_may_have_no_gate(tmp_path, act):
    # a review against transformers 5.25: Jais2 (relu2) and Apertus (xielu) configs hold only standard keys, and their
    # MLP is up and down only; counted as Llama's gated FFN, Arcee's AFM-4.5B (now imported) had 6.32B parameters, not 4.62B
    path = write(tmp_path / "jais2", {**PLAIN, "model_type": "jais2", "hidden_act": act})
    err = failing("compare", str(path), "--ctx", "1k")
    shown = "'" + act + "'" if isinstance(act, str) else "['silu']"
    assert f"hidden_act {shown}: a plain decoder is built with Llama's gated SiLU FFN (gate, up and down)" in err, err


@pytest.mark.parametrize("act", ["silu", "swish", None])
def test_generic_import_takes_llamas_activation(tmp_path, act):
    cfg = {**PLAIN, "hidden_act": act} if act else PLAIN
    spec = load_model(str(write(tmp_path / "new-model", cfg))).spec
    d, d_ff, layers = 512, 1024, 4
    assert spec.ffn.gated and spec.ffn.d_ff == d_ff
    # embeddings and head (untied), per layer q, k, v, o (8 heads of 64 and 2 KV heads), gate/up/down, two RMSNorms; a final norm
    per_layer = d * 512 + 2 * d * 128 + 512 * d + 3 * d * d_ff + 2 * d
    assert param_totals(spec)[0] == 2 * 1000 * d + layers * per_layer + d


def test_generic_import_of_a_config_saved_whole(tmp_path):
    # a config written by to_dict (not to_diff_dict) carries PretrainedConfig's bookkeeping: it was refused as having
    # chunked attention (chunk_size_feed_forward 0) and an encoder (is_encoder_decoder false)
    whole = {**PLAIN, "return_dict": True, "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}, "problem_type": None,
             "chunk_size_feed_forward": 0, "is_encoder_decoder": False, "output_attentions": False}
    a, b = (load_model(str(write(tmp_path / name, cfg))).spec for name, cfg in (("whole", whole), ("diff", PLAIN)))
    assert a.model_dump(exclude={"name", "source"}) == b.model_dump(exclude={"name", "source"})
    for key, value, mechanism in (("chunk_size_feed_forward", 64, "chunked attention"),
                                  ("is_encoder_decoder", True, "encoder/cross-attention"),
                                  ("is_encoder_decoder", 0, "encoder/cross-attention")):
        err = failing("compare", str(write(tmp_path / key, {**PLAIN, key: value})), "--ctx", "1k")
        assert f"{key} ({mechanism})" in err, err
