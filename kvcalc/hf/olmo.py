"""Importers of OLMo 2 and OLMo 3 (model_types olmo2, olmo3): post-norm layers, a query/key RMSNorm over the whole
projection, and (OLMo 3) sliding windows on three layers of four.

Rules, from transformers' models/olmo2 and models/olmo3 (configuration_olmo2.py, modeling_olmo2.py,
modular_olmo3.py):
- Olmo2Attention: q/k/v/o projections with bias only when attention_bias (Olmo2Config default False);
  num_key_value_heads absent -> num_attention_heads; head_dim = hidden_size / num_attention_heads.
- q_norm = Olmo2RMSNorm(num_attention_heads·head_dim) and k_norm = Olmo2RMSNorm(num_key_value_heads·head_dim),
  applied to the whole q_proj / k_proj output before it is split into heads (Olmo3Attention.forward:
  self.q_norm(self.q_proj(h))): qk_norm with qk_norm_width "projection", (n_h + n_kv)·d_h weights a layer. The cache is
  unaffected (keys are cached after the norm, same size).
- Olmo2DecoderLayer: two RMSNorms, post_attention_layernorm and post_feedforward_layernorm (on the sublayer
  outputs, no input norm); a final norm; a gated SiLU MLP of intermediate_size without bias; untied by default.
- OLMo 3 (Olmo3Config, Olmo3Attention): `layer_types` names each layer; absent, layer i is sliding unless
  (i + 1) % 4 == 0. sliding_window defaults to 4096. Sliding layers pass it to the attention; masking_utils keeps
  kv_idx > q_idx - sliding_window, so a query sees `sliding_window` keys, itself included: kvcalc's W.
"""

from __future__ import annotations

from kvcalc.hf.common import decoder, importer, show

# Olmo2Attention: q_norm and k_norm are RMSNorms over the whole projection (n_h·d_h and n_kv·d_h)
WHOLE_PROJECTION_QK_NORM = {"qk_norm": True, "qk_norm_width": "projection"}


@importer("olmo2")
def _olmo2(cfg: dict, origin: str, notes: list[str]) -> dict:
    if cfg.get("sliding_window"):  # Olmo2Config has no window, Olmo2Model builds the causal mask alone (SGLang too,
        # without layer_types): every layer attends its whole context
        notes.append(f"sliding_window {show(cfg['sliding_window'])} ignored: OLMo 2's attention has no window (vLLM, "
                     "through its Transformers backend, would slide every layer by it as a model-wide window: not "
                     "counted)")
        cfg = {**cfg, "sliding_window": None}
    return decoder(cfg, origin, "olmo2", notes, attention=WHOLE_PROJECTION_QK_NORM)


@importer("olmo3")
def _olmo3(cfg: dict, origin: str, notes: list[str]) -> dict:
    cfg = dict(cfg)
    if "sliding_window" not in cfg:
        cfg["sliding_window"] = 4096  # Olmo3Config default
        notes.append("no sliding_window in the config: Olmo3Config default 4096 used")
    return decoder(cfg, origin, "olmo3", notes, sliding=lambda i: (i + 1) % 4 != 0, attention=WHOLE_PROJECTION_QK_NORM)
