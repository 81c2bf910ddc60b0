"""Tensor-parallel communication of one decode step: an estimate, labelled so wherever it is shown.

Rules (also in the README):
- Every block that ends in a row-parallel projection sums its ranks' partial outputs with one all-reduce of the
  block's output, batch × d_model activations (Megatron-LM, Shoeybi et al. 2019 §3: two all-reduces a layer in the
  forward pass; vLLM RowParallelLinear with reduce_results): each layer's attention (or mixer) W_O, a parallel
  mixer's second branch, a cross-attention and an FFN or MoE block (vLLM's FusedMoE reduces its output, with or
  without expert parallelism), plus the vocabulary-parallel embedding's output once (VocabParallelEmbedding); under
  SGLang's DP attention the MLA layers' attention and the embedding run whole on each rank and reduce nothing. A
  model with `parallel_attn` (Falcon) sums its attention and FFN outputs first and reduces once a layer (vLLM
  FalconAttention: reduce_row_parallel_results is false under parallel_attn or new_decoder_architecture).
- A decode step sends one token a sequence: messages of ceil(batch / dp) × d_model values at 2 bytes (bf16
  activations); under --mtp of a model with MTP layers the speculative step's 1 + k tokens a sequence
  (kvcalc.costs.flops.step_tokens). `tp = 1` has none.
- Time: a ring all-reduce moves 2·(tp − 1)/tp of its message through each GPU's link each way (NCCL's bus
  bandwidth), so time = 2·(tp − 1)/tp · bytes / the bandwidth a device has to the tp group: interconnect_bandwidth
  through a switch, the links to its tp − 1 peers in a direct mesh (Hardware.group_bandwidth: Gaudi 3), where a
  direct reduce-scatter and all-gather take that time; none for a group larger than one mesh. Latency, overlap with compute, pipeline
  hand-offs, the LM head's logit gather, expert all-to-all, SGLang's DP-attention gathers and the reductions of the
  multi-token-prediction layers that --mtp adds to a step's FLOPs are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from kvcalc.attention import MLA
from kvcalc.costs.flops import step_tokens
from kvcalc.costs.params import ffn_runs
from kvcalc.settings import Settings
from kvcalc.spec import ModelSpec, NoFFN

ACTIVATION_BYTES = 2  # bf16 activations


@dataclass(frozen=True)
class AllReduce:
    """The all-reduces of one decode step: how many, the bytes of each message, and their sum."""

    count: int
    message_bytes: int
    bytes: int  # count · message_bytes: the bytes all-reduced in one decode step


def decode_allreduce(spec: ModelSpec, s: Settings) -> AllReduce | None:
    """The tensor-parallel all-reduces of one decode step (None when tp = 1)."""
    if s.tp == 1:
        return None
    count = spec.memo(("allreduce_count", s.dp_attention), _allreduce_count, spec, s.dp_attention)
    message = -(-s.batch // s.dp) * step_tokens(spec, s) * spec.d_model * ACTIVATION_BYTES
    return AllReduce(count, message, count * message)


def _allreduce_count(spec: ModelSpec, dp_attention: bool = False) -> int:
    """All-reduces of one decode step: the embedding's output, each layer's row-parallel mixer outputs and its FFN.
    Under SGLang's DP attention each rank runs the MLA layers' attention and the input embedding whole (attention tp
    size 1, as kvcalc.costs.parallel weighs them), so they reduce nothing."""
    count = 0 if dp_attention else 1  # the embedding's output
    for group in spec.groups:
        whole = dp_attention and isinstance(group.attention, MLA)
        mixer = bool(group.attention.weights(group.layer)) and not whole  # an FFN-only layer (Nemotron-H's) has none
        blocks = mixer + (group.parallel is not None) + (group.cross is not None)  # row-parallel mixer outputs
        count += blocks * len(group.layers)
    if spec.parallel_attn:  # the FFN's output joins the attention's in the layer's one all-reduce
        return count
    return count + sum(run.count for run in ffn_runs(spec) if not isinstance(run.ffn, NoFFN))


def allreduce_seconds(reduce: AllReduce, tp: int, bandwidth: int | Fraction) -> Fraction:
    """An all-reduce's time: 2·(tp − 1)/tp of the bytes through each device's links to the group (one direction,
    `bandwidth`: Hardware.group_bandwidth), summed: a ring through a switch, or in a direct mesh a reduce-scatter and
    all-gather sending each peer its share at once, which take the same time over the links to the tp − 1 peers."""
    return Fraction(2 * (tp - 1) * reduce.bytes, tp) / bandwidth
