"""#6: encoder–decoder models (Whisper): each decoder layer caches its growing self-attention K/V and the K/V of the
encoder output, once per input; the encoder runs once, in the prefill. Figures written out from the config."""

from __future__ import annotations

import json

import pytest

from conftest import REFERENCE, run, spec
from kvcalc.costs.cache import kv_cache
from kvcalc.costs.flops import decode_flops, prefill_flops
from kvcalc.costs.params import param_counts
from kvcalc.costs.traffic import decode_bytes
from kvcalc.registry import load_model
from kvcalc.settings import Settings

WHISPER = REFERENCE / "models-enc-dec" / "whisper-large-v3.json"
D, LAYERS, HEADS, FFN, VOCAB, SOURCE, TARGET, MELS = 1280, 32, 20, 5120, 51866, 1500, 448, 128


def test_whisper_cache_is_self_plus_cross_attention():
    # 32 decoder layers × (448 self-attention tokens + 1500 encoder positions) × 2 (K, V) × d_model 1280, bf16
    row = json.loads(run("compare", WHISPER, "whisper-large-v3", "--ctx", "448", "-f", "json").stdout)
    want = 32 * (448 + 1500) * 2 * 1280 * 2
    assert [r["kv_cache_bytes"] for r in row] == [want, want] and row[0]["enc_ctx"] == 1500
    # --enc-ctx changes only the cross-attention part; the self-attention part grows with ctx alone
    other = json.loads(run("compare", WHISPER, "--ctx", "100", "--enc-ctx", "750", "-f", "json").stdout)[0]
    assert other["kv_cache_bytes"] == 32 * (100 + 750) * 2 * 1280 * 2
    # the per-token rate counts the self-attention only: cross-attention does not grow with ctx
    assert row[0]["kv_bytes_per_token"] == 32 * 2 * 1280 * 2


def test_show_says_the_encoder_positions_each_layer_keeps():
    # an audit: show's group row gave 5.00 KiB a token and 448 tokens held beside 9.51 MiB a layer: the 1,500 encoder
    # positions of the cross-attention were in the bytes but in no column
    out = json.loads(run("show", "whisper-large-v3", "--ctx", "448", "-f", "json").stdout)["groups"][0]
    assert (out["tokens_held"], out["cross_tokens_held"]) == (448, 1500)
    assert out["bytes_per_layer"] == out["bytes_per_token_per_layer"] * (448 + 1500) == 2 * D * 2 * 1948 == 9_973_760
    table = run("show", "whisper-large-v3", "--ctx", "448").stdout
    assert "positions" in table and "1,500" in table.splitlines()[-1]
    assert "positions" not in run("show", "llama3-70b", "--ctx", "4k").stdout  # no cross-attention: no column


def test_whisper_parameters_written_out():
    attention = 4 * D * D + 3 * D  # q, k, v, out_proj; biases on q, v and out_proj (k_proj has none)
    ffn = 2 * D * FFN + FFN + D  # fc1, fc2 with biases (GELU: not gated)
    layer_norm = 2 * D  # weight and bias
    decoder = LAYERS * (2 * attention + ffn + 3 * layer_norm) + layer_norm  # self + cross attention; final norm
    decoder += VOCAB * D + TARGET * D  # embed_tokens (proj_out is tied) and the learned positions
    encoder = LAYERS * (attention + ffn + 2 * layer_norm) + layer_norm
    encoder += (MELS * D * 3 + D) + (D * D * 3 + D) + SOURCE * D  # conv1, conv2, the position table
    assert param_counts(spec("whisper-large-v3")).total == decoder + encoder == 1_543_490_560
    # the model card's "1550M parameters" (https://huggingface.co/openai/whisper-large-v3)
    assert abs((decoder + encoder) / 1550e6 - 1) < 0.01


def test_whisper_prefill_runs_the_encoder_and_decode_only_the_decoder():
    s = spec("whisper-large-v3")
    pre, dec = prefill_flops(s, Settings(ctx=100)), decode_flops(s, Settings(ctx=100))
    # the encoder: 32 layers of bidirectional attention over 1500 positions and its FFN
    enc_attn = 2 * SOURCE * 4 * D * D + 2 * 2 * SOURCE * SOURCE * D  # projections; scores and mix over 1500²
    assert pre["encoder/attn"] == LAYERS * enc_attn
    assert pre["encoder/ffn"] == LAYERS * 2 * SOURCE * 2 * D * FFN
    # cross-attention K/V of the encoder output, projected once per input
    assert pre["cross/kv"] == LAYERS * 2 * SOURCE * 2 * D * D
    assert "encoder/attn" not in dec and "cross/kv" not in dec
    # a decode step's query meets every encoder position: scores and mix over 1500 keys, in every layer
    assert dec["cross/scores"] == LAYERS * 2 * SOURCE * D and dec["cross/mix"] == LAYERS * 2 * SOURCE * D
    # and reads the decoder's weights, not the encoder's, nor the cross-attention's k_proj and v_proj: they project
    # the encoder's output once, into the cache (vLLM's WhisperCrossAttention runs kv_proj only at prefill)
    attention = 4 * D * D + 3 * D  # self-attention: q, k, v, out_proj; biases on q, v, out_proj
    cross = 2 * D * D + 2 * D  # cross-attention read at a step: q_proj and out_proj with their biases
    ffn = 2 * D * FFN + FFN + D
    layers = LAYERS * (attention + cross + ffn + 3 * 2 * D) + 2 * D  # three LayerNorms a layer; the final one
    # the tied vocabulary table is read whole by the LM head; embedding and position tables: one row of each
    step = layers + VOCAB * D + D + D
    assert decode_bytes(s, Settings(ctx=100))["weights"] == 2 * step == 1_602_104_320  # bf16
    # the per-input weights are all there otherwise: the prefill reads every weight but the lookup tables' rest
    p = param_counts(s)
    assert p.active_breakdown["cross/k"] + p.active_breakdown["cross/v"] == LAYERS * (2 * D * D + D)


def test_bundled_whisper_equals_the_config():
    imported = load_model(str(WHISPER)).spec
    for s in (Settings(ctx=1), Settings(ctx=448, enc_ctx=3000)):
        assert kv_cache(imported, s).bytes == kv_cache(spec("whisper-large-v3"), s).bytes
    assert param_counts(imported).breakdown == param_counts(spec("whisper-large-v3")).breakdown


def test_explain_shows_the_cross_attention():
    out = run("show", "whisper-large-v3", "--ctx", "448", "--explain").stdout
    assert "cross-attention per encoder position and layer: 2·n_h·d_h = 2·20·64 = 2,560 elements, for 1,500" in out
    assert "32 layers × (2,560 × 448 + 2,560 × 1,500) × batch 1 = 159,580,160" in out
    # the cross formula's symbols and where each came from, as the self-attention's (the text left them out)
    cross = out.split("cross-attention per encoder position")[1].split("elements: 32 layers")[0]
    assert "n_h = 20   from layer_groups[0].cross_attention.n_heads" in cross
    assert "d_h = 64   from d_model / layer_groups[0].cross_attention.n_heads = 1280/20" in cross


def test_cross_attention_needs_an_encoder(tmp_path):
    path = tmp_path / "half.yaml"
    path.write_text(json.dumps({
        "name": "half", "family": "test", "d_model": 64, "n_layers": 1, "vocab_size": 100, "max_context": 64,
        "ffn": {"kind": "dense", "d_ff": 128},
        "layer_groups": [{"attention": {"kind": "mha", "n_heads": 4}, "cross_attention": {"kind": "mha", "n_heads": 4}}],
    }))
    res = run("compare", path, ok=False)
    assert res.exit_code == 1
    assert f"{path}: layer_groups[0].cross_attention: cross-attention needs an encoder" in res.stderr


@pytest.mark.slow
def test_engines_hold_whisper_as_their_pools_do_and_warn_for_models_they_do_not_serve():
    # an audit: SGLang's one pool gives Whisper large a buffer in each of its 32 + 2 · 32 = 96 attention layers
    # (model_config num_attention_layers: encoder, decoder self- and cross-attention), each holding all 1,500 + ctx
    # slots of a request (whisper.py pad_input_ids), 2 · 20 heads · 64 · 2 = 5,120 bytes a slot and layer; kvcalc
    # counted the 32 decoder layers' (a third). vLLM (blocks of 64): ceil(448 / 64) + ceil(1500 / 64) = 7 + 24 pages
    # in each of the 32 decoder layers
    for batch, tp, per_gpu in (("1", "1", 957_480_960), ("8", "1", 7_659_847_680), ("1", "4", 239_370_240)):
        r = json.loads(run("compare", "whisper-large-v3", "--ctx", "448", "--batch", batch, "--tp", tp, "--engine",
                           "sglang", "-f", "json").stdout)[0]
        assert r["engine_kv_bytes"] == int(batch) * (1500 + 448) * 96 * 5120
        assert r["kv_cache_bytes_per_gpu"] == per_gpu == int(batch) * (1500 + 448) * 96 * 5120 // int(tp)
    r = json.loads(run("compare", "whisper-large-v3", "--ctx", "448", "--engine", "vllm", "-f", "json").stdout)[0]
    assert r["engine_kv_bytes"] == (7 + 24) * 64 * 5120 * 32 == 325_058_560
    assert "warning" not in run("compare", "whisper-large-v3", "--ctx", "448", "--engine", "sglang").stderr
    out = run("show", "whisper-large-v3", "--ctx", "448", "--engine", "sglang", "--explain").stdout
    assert "× (32 layers + 64 buffers of SGLang's pool for the cross-attention and encoder layers) = 957,480,960" in out
    t5 = REFERENCE / "configs-extra-4" / "t5-v1_1-small.json"
    for engine in ("vllm", "sglang"):
        out = run("compare", str(t5), "--ctx", "512", "--engine", engine).stderr
        assert "neither vLLM nor SGLang serves this encoder–decoder model" in out
    assert "warning" not in run("compare", str(t5), "--ctx", "512", "--engine", "ideal").stderr


def test_engines_refuse_pipeline_stages_for_an_encoder_decoder_model():
    # an audit: whisper under --pp 2 --engine vllm printed a per-GPU figure for a layout vLLM 0.34.0 refuses
    # (WhisperForConditionalGeneration lacks SupportsPP: "Pipeline parallelism is not supported for this model") and
    # SGLang has no stages for (its whisper.py builds every layer on every rank)
    for engine in ("vllm", "sglang"):
        res = run("compare", "whisper-large-v3", "--ctx", "448", "--pp", "2", "--engine", engine, ok=False)
        assert res.exit_code == 1 and "Traceback" not in res.stderr
        assert (f"--pp 2 --engine {engine}: whisper-large-v3 is an encoder–decoder model, and {engine} runs none with "
                "pipeline parallelism") in res.stderr
    # without an engine the split is computed: 32 decoder layers, 16 a stage, each (448 + 1500) · 2 · 20 · 64 · 2 bytes
    row = json.loads(run("compare", "whisper-large-v3", "--ctx", "448", "--pp", "2", "-f", "json").stdout)[0]
    assert row["kv_cache_bytes_per_gpu"] == 16 * (448 + 1500) * 2 * 20 * 64 * 2



def test_engines_pad_whisper_to_its_source_length_so_another_enc_ctx_is_refused():
    # vLLM 0.34.0 (whisper.py: get_num_audio_tokens = max_source_positions, "the encoder prompt is padded") and SGLang
    # hold Whisper's cross-attention for 1,500 positions whatever the audio: an engine count at --enc-ctx 750 would
    # be one the engine never allocates
    for engine in ("vllm", "sglang"):
        res = run("compare", "whisper-large-v3", "--ctx", "448", "--enc-ctx", "750", "--engine", engine, ok=False)
        assert res.exit_code == 1 and f"--enc-ctx 750 --engine {engine}: {engine} pads every whisper input to its " \
                                      "1,500 encoder positions" in res.stderr
    # its own source length is accepted under an engine, and any --enc-ctx without one or under ideal pages:
    # 32 layers · 2 · 1280 · 2 bytes = 163,840 bytes a position; (448 + 750) positions = 196,280,320 bytes
    run("compare", "whisper-large-v3", "--ctx", "448", "--enc-ctx", "1500", "--engine", "vllm")
    row = json.loads(run("compare", "whisper-large-v3", "--ctx", "448", "--enc-ctx", "750", "--engine", "ideal",
                         "-f", "json").stdout)[0]
    assert row["kv_cache_bytes"] == row["engine_kv_bytes"] == (448 + 750) * 32 * 2 * 1280 * 2 == 196_280_320


def test_a_decode_step_reads_the_cross_attentions_cache():
    # a mutation review: only a golden output saw a decode step read the encoder's K/V: each of the 32 decoder layers
    # reads its cross-attention keys and values, 2 · 20 heads · 64 values per encoder position in bf16, so 500 encoder
    # positions fewer read 32 · 500 · 2,560 · 2 = 81,920,000 bytes fewer (weights and self-attention unchanged)
    def read(enc_ctx: str) -> int:
        return json.loads(run("compare", "whisper-large-v3", "--ctx", "448", "--columns", "cost", "--enc-ctx", enc_ctx,
                              "-f", "json").stdout)[0]["decode_bytes_read"]

    assert read("1500") - read("1000") == 32 * 500 * 2 * 20 * 64 * 2 == 81_920_000
