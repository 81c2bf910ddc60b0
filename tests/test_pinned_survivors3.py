"""Behaviour of today's code a fifth mutation review found unpinned, each by hand."""

from __future__ import annotations

import json

from conftest import run
from kvcalc.settings import Settings


def _fit(*args: str) -> dict:
    return json.loads(run("fit", *args, "-f", "json").stdout)[0]


def test_sglang_charges_every_stage_the_largest_stages_states():
    # Qwen3-Next at pp 5 under SGLang: stages of 7, 7, 7, 8 and 7 Gated DeltaNet layers, each 32 · 128 · 128 fp32 and
    # 8,192 · 3 bf16 a sequence (2,146,304 bytes); every stage is charged the fourth's 8 layers, not its own
    from kvcalc.costs.engine_memory import sglang_stage_pools
    from kvcalc.costs.parallel import sglang_pools, stages
    from kvcalc.registry import load_model

    spec = load_model("qwen3-next-80b-a3b").spec
    s = Settings(ctx=8192, pp=5, engine="sglang")
    plans = stages(spec, s)
    layer = 32 * 128 * 128 * 4 + 8192 * 3 * 2
    assert [sglang_pools(s, p).state_slot for p in plans] == [7 * layer] * 3 + [8 * layer, 7 * layer]
    assert [p.state_slot for _, p, _ in sglang_stage_pools(spec, s, 80 * 2**30, 0)] == [8 * layer] * 5
    # a sequence takes 2 slots (its own and the extra buffer's 1 tracking slot under pp > 1, the overlap schedule
    # off: kvcalc.costs.paged.state_slots)
    assert [p.state_per_sequence for _, p, _ in sglang_stage_pools(spec, s, 80 * 2**30, 0)] == [2 * 8 * layer] * 5


def test_the_largest_gpus_tier_starts_at_160_gib(tmp_path):
    # vLLM's get_batch_defaults (device_memory >= 160 GiB: 16,384) and SGLang's tiers (below 160 GiB: 8,192) at exactly
    # 160 GiB: chunks of 16,384 under both, so an activation estimate of 16,384 · (4 · 4,096 + 2 · 14,336) · 2 bytes
    from conftest import ROOT

    path = tmp_path / "g160.yaml"
    path.write_text((ROOT / "hardware_specs" / "h100-80gb.yaml").read_text().replace("name: h100-80gb", "name: g160")
                    .replace("memory_bytes: 85_899_345_920", f"memory_bytes: {160 * 2**30}"))
    vllm = _fit("llama3-8b", "--hardware", str(path), "--engine", "vllm", "-c", "8k")
    assert (vllm["prefill_chunk"], vllm["activation_bytes"]) == (16384, 16384 * (4 * 4096 + 2 * 14336) * 2)
    # SGLang: 512 + 1.5 · 16,384 + 1 · 1 / 8 · 1,024 + 2 · 512 + 8 · 74 prefill graphs = 26,832 MiB of 163,840
    sglang = _fit("llama3-8b", "--hardware", str(path), "--engine", "sglang", "-c", "8k")
    assert sglang["prefill_chunk"] == 16384 and sglang["reserve"] == round(26_832 / 163_840, 3) == 0.164


def test_a_tpu_chip_is_read_in_any_case(tmp_path):
    from kvcalc.costs.engine_memory import default_prefill_chunk
    from kvcalc.hardware import load_hardware

    tpu = load_hardware("tpu-v5e").model_copy(update={"name": "TPU-V5E"})
    assert default_prefill_chunk("vllm", tpu) == 512


def test_a_vendor_is_read_by_word():
    from kvcalc.hardware import load_hardware

    h100 = load_hardware("h100-80gb")
    assert h100.model_copy(update={"vendor": "Teamdrive"}).platform == "other"  # 'amd' inside a word is no AMD


def test_no_refusal_note_where_nothing_fits():
    # DeepSeek-V3 on one H100: its weights alone pass the budget, so no context fits and vLLM's refusal to start is
    # not a matter of --max-model-len
    res = run("fit", "deepseek-v3", "--hardware", "h100-80gb", "--engine", "vllm")
    assert json.loads(run("fit", "deepseek-v3", "--hardware", "h100-80gb", "--engine", "vllm", "-f",
                          "json").stdout)[0]["binding"] == "weights"
    assert "refuses to start" not in res.stderr


def test_a_title_names_the_schedule_beside_each_figure_that_follows_it():
    for column in ("decode_bound", "mla_schedule", "flops_generate_cached"):
        title = run("compare", "deepseek-v2", "--ctx", "4k", "--columns", column, "--hardware", "h100-80gb"
                    ).stdout.splitlines()[0]
        assert title.endswith("absorbed decode"), column
    chart = run("compare", "deepseek-v2", "--ctx", "4k", "--chart", "flops_decode_token").stdout.splitlines()[0]
    assert chart.endswith("MLA absorbed decode")


def test_served_context_may_equal_max_context(tmp_path):
    from conftest import ROOT
    from kvcalc.spec import load_spec

    path = tmp_path / "s.yaml"
    path.write_text((ROOT / "model_specs" / "llama3-8b.yaml").read_text().replace(
        "max_context: 8192", "max_context: 8192\nserved_context: 8192"))
    assert load_spec(path).served_context == 8192


def test_plot_refuses_two_of_one_name_without_a_note_first(tmp_path):
    # plot refuses two models of one name (its legend could not tell them apart), so the note compare gives is not
    # printed before its error
    from conftest import ROOT

    clash = tmp_path / "clash.yaml"
    clash.write_text((ROOT / "model_specs" / "gemma3-1b.yaml").read_text().replace("name: gemma3-1b", "name: llama3-8b"))
    res = run("plot", str(clash), "llama3-8b", "--ctx", "4k", "-o", str(tmp_path / "p.png"), ok=False)
    assert res.exit_code == 1 and "plot: two models are named 'llama3-8b'" in res.stderr and "note:" not in res.stderr
