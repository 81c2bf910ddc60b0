"""The settings of a cost question, passed whole to every cost function, and the choice lists they draw on.

The CLI's choices (dtypes, MLA layouts and schedules) are generated from these lists, so each is written once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvcalc.dtypes import DTYPES, dtype_bits
from kvcalc.errors import KvcalcError, brief

if TYPE_CHECKING:
    from kvcalc.hardware import Hardware

__all__ = ["DTYPES", "ENGINES", "MLA_CACHE_LAYOUTS", "MLA_SCHEDULES", "Settings", "resolve_schedule"]

# MLA's cache layouts (the latent c_KV + k_R, or per-head K and V) and decode schedules (K/V rebuilt, or W_UK/W_UV
# absorbed): kvcalc.attention.mla reads them from here, so the command line knows them without importing the kinds
MLA_CACHE_LAYOUTS = ("latent", "expanded")
MLA_SCHEDULES = ("naive", "absorbed")
# Serving engines whose paged KV cache kvcalc counts (kvcalc.costs.paged): ideal (exact tokens), vLLM, SGLang
ENGINES = ("ideal", "vllm", "sglang")
QUANTISED = ("fp8", "int8", "int4")  # KV dtypes a --kv-quant scheme's scales go with
TOKENS_LIMIT = 2**40  # contexts, gen and encoder positions
LIMITS = {"batch": 2**20, "tp": 2**16, "pp": 2**16, "dp": 2**16, "ep": 2**16, "block_size": 2**20}  # others: TOKENS_LIMIT


def resolve_schedule(mla_cache: str, mla_schedule: str | None) -> str:
    """The MLA decode schedule: as asked, else absorbed from a latent cache and naive from an expanded one."""
    if mla_schedule is None:
        return "absorbed" if mla_cache == "latent" else "naive"
    if mla_schedule not in MLA_SCHEDULES:
        raise KvcalcError(f"unknown MLA schedule {mla_schedule!r}: choose {' or '.join(MLA_SCHEDULES)}")
    if mla_schedule == "absorbed" and mla_cache == "expanded":
        raise KvcalcError("--mla-schedule absorbed attends in the latent space: it needs --mla-cache latent")
    return mla_schedule


def _check_count(name: str, value: object) -> None:
    """A count setting (ctx, batch, gen, enc_ctx, tp, pp, dp, ep) is a positive int within kvcalc's bound."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        what = {"batch": "sequences", "tp": "ranks", "pp": "stages", "dp": "replicas", "ep": "ranks",
                "block_size": "tokens"}.get(name, "tokens")
        shown = f"{value:,}" if type(value) is int else brief(value)  # np.int64(4096): 'numpy.int64 np.int64(4096)'
        raise KvcalcError(f"{name} must be a positive whole number of {what} (a Python int), got {shown}")
    if value > LIMITS.get(name, TOKENS_LIMIT):
        digits = int(value.bit_length() * 0.30103) + 1  # about; str() of an int past 4,300 digits raises
        raise KvcalcError(f"{name} {value if value < 10**30 else f'of about {digits:,} digits'}: "
                          f"at most {LIMITS.get(name, TOKENS_LIMIT):,} (kvcalc's bound for {name}, the command "
                          f"line's --{name.replace('_', '-')})")


def _check_types(s: Settings) -> None:
    """Each setting of the type it is declared with (the API's callers: the CLI's options are typed already): a flag a
    bool (mtp="no" would count the MTP layers), a name a str, hardware a Hardware, as one KvcalcError."""
    for name in ("dense_attn", "mtp", "dp_attention"):
        if type(getattr(s, name)) is not bool:
            raise KvcalcError(f"{name} must be True or False, got {brief(getattr(s, name))}")
    for name, optional in (("kv_dtype", False), ("weights_dtype", False), ("mla_cache", False), ("kv_quant", False),
                           ("mla_schedule", True), ("state_dtype", True), ("engine", True)):
        value = getattr(s, name)
        if not isinstance(value, str) and not (optional and value is None):
            raise KvcalcError(f"{name} must be a name (a str{' or None' if optional else ''}), got {brief(value)}")
    if s.hardware is not None:
        from kvcalc.hardware import Hardware

        if not isinstance(s.hardware, Hardware):
            raise KvcalcError(f"hardware must be a kvcalc.hardware.Hardware (load_hardware(name)) or None, got "
                              f"{brief(s.hardware)}")


@dataclass(frozen=True)
class Settings:
    """The knobs of a cost question (checked on creation).

    ctx: tokens held per sequence (k = 1024); batch: sequences; gen: tokens generated after a prompt of ctx;
    kv_dtype / weights_dtype: storage types; mla_cache: MLA cache layout; mla_schedule: MLA decode schedule (None:
    absorbed from a latent cache, naive from an expanded one); dense_attn: count prefill attention as N×N;
    hardware: a kvcalc.hardware.Hardware for roofline times, or None; state_dtype: storage of constant states
    (linear attention, SSMs), default the KV dtype (several engines keep SSM state in fp32); kv_quant: the
    quantisation scheme whose scales the cache stores (kvcalc.costs.quant); engine / block_size: a serving engine
    whose paged cache to count (kvcalc.costs.paged), and its page size in tokens (None: the engine's default).
    """

    ctx: int
    batch: int = 1
    gen: int = 1024
    kv_dtype: str = "bf16"
    weights_dtype: str = "bf16"
    mla_cache: str = "latent"
    mla_schedule: str | None = None
    dense_attn: bool = False
    hardware: Hardware | None = None
    state_dtype: str | None = None  # constant states (linear attention, SSMs); None: the KV dtype
    enc_ctx: int | None = None  # encoder positions cross-attention caches; None: the model's source_len
    mtp: bool = False  # count the multi-token-prediction layers (their cache and weights), as speculative decoding does
    tp: int = 1  # tensor-parallel ranks
    pp: int = 1  # pipeline stages
    dp: int = 1  # data-parallel replicas
    ep: int = 1  # expert-parallel ranks among a stage's tp · dp GPUs (routed experts whole, ceil(E / ep) each)
    dp_attention: bool = False  # SGLang's DP attention: a replica's tp ranks split its sequences' latent cache
    kv_quant: str = "none"  # quantisation scheme of the cache: its scales and zero points are counted
    engine: str | None = None  # a serving engine whose paged cache is counted (engine_kv_bytes)
    block_size: int | None = None  # the engine's page size in tokens; None: its default

    def __post_init__(self) -> None:
        for name in ("ctx", "batch", "gen", "enc_ctx", "tp", "pp", "dp", "ep"):
            value = getattr(self, name)
            if type(value) is int and 0 < value <= LIMITS.get(name, TOKENS_LIMIT) or name == "enc_ctx" and value is None:
                continue  # the usual case, at once (a sweep of the API makes a Settings a row)
            _check_count(name, value)
        if not (type(self.dense_attn) is type(self.mtp) is type(self.dp_attention) is bool
                and type(self.kv_dtype) is type(self.weights_dtype) is type(self.mla_cache) is type(self.kv_quant) is str
                and self.engine is self.state_dtype is self.mla_schedule is self.hardware is None):
            _check_types(self)  # the usual case passes the line above at once
        if self.ep > 1 and (self.tp * self.dp) % self.ep:  # vLLM: ep = tp · dp; SGLang: ep divides tp
            raise KvcalcError(f"--ep {self.ep}: expert parallelism spreads a stage's experts over its tp · dp = "
                              f"{self.tp * self.dp} GPU(s), so ep must divide tp · dp: give --tp or --dp to match")
        if 1 < self.ep < self.tp and self.tp % self.ep:  # SGLang splits each expert over tp / ep ranks
            raise KvcalcError(f"--ep {self.ep}: below --tp {self.tp} it must divide tp, each expert split over the "
                              "tp / ep ranks that share it (SGLang's moe_tp_size)")
        if self.engine == "vllm" and self.ep > 1 and self.ep != self.tp * self.dp:
            # vLLM's --enable-expert-parallel is a switch: the experts span every GPU of a stage (ep = tp · dp)
            raise KvcalcError(f"--ep {self.ep} --engine vllm: vLLM's expert parallelism (--enable-expert-parallel) "
                              f"spans all tp · dp = {self.tp * self.dp} GPUs of a stage: give --ep {self.tp * self.dp}")
        if self.engine == "sglang" and self.ep > self.tp:
            # SGLang's ep_size splits the tp group's experts (moe_tp_size = tp / ep); dp replicas each hold all
            raise KvcalcError(f"--ep {self.ep} --engine sglang: SGLang spreads experts over the tp group (ep must "
                              f"divide --tp {self.tp})")
        dtype_bits(self.kv_dtype, "kv")
        dtype_bits(self.weights_dtype, "weights")
        object.__setattr__(self, "kv_dtype", self.kv_dtype.lower())
        object.__setattr__(self, "weights_dtype", self.weights_dtype.lower())
        if self.state_dtype is not None:
            dtype_bits(self.state_dtype, "state")
            object.__setattr__(self, "state_dtype", self.state_dtype.lower())
        if self.mla_cache not in MLA_CACHE_LAYOUTS:
            raise KvcalcError(f"unknown MLA cache layout {self.mla_cache!r}: choose {' or '.join(MLA_CACHE_LAYOUTS)}")
        resolve_schedule(self.mla_cache, self.mla_schedule)
        self._check_serving()

    def _check_serving(self) -> None:
        from kvcalc.costs.quant import check_scheme

        object.__setattr__(self, "kv_quant", check_scheme(self.kv_quant.lower()))
        if self.kv_quant == "fp8-ds-mla" and self.kv_dtype != "fp8":
            raise KvcalcError("--kv-quant fp8-ds-mla is an fp8 layout: it needs --kv-dtype fp8")
        if self.kv_quant != "none" and self.kv_dtype not in QUANTISED:
            raise KvcalcError(f"--kv-quant {self.kv_quant} stores scales beside quantised values: it needs --kv-dtype "
                              f"{', '.join(QUANTISED)} (got {self.kv_dtype})")
        if self.engine is not None:
            object.__setattr__(self, "engine", self.engine.lower())
            if self.engine not in ENGINES:
                raise KvcalcError(f"unknown engine {self.engine!r}: choose one of {', '.join(ENGINES)}")
            if self.engine == "vllm" and self.hardware is not None and self.hardware.platform == "apple":
                # vllm/platforms/__init__.py cpu_platform_plugin: on macOS vLLM 0.34.0 runs its CPU platform, which sizes
                # the cache from the process's memory (cpu_worker.py determine_available_memory, VLLM_CPU_KVCACHE_SPACE)
                # with its own batch defaults (arg_utils.py get_batch_defaults: 2,048 tokens, 128 sequences)
                raise KvcalcError(f"--engine vllm --hardware {self.hardware.name}: vLLM runs on Apple silicon through "
                                  "its CPU backend, whose cache sizing and defaults kvcalc does not model (give no "
                                  "--engine)")
            if self.engine == "sglang" and self.hardware is not None and self.hardware.platform == "apple":
                # SGLang 0.5.23 on Apple (Torch MPS) sizes its pools from Metal's working-set limit
                # (utils/common.py get_mps_memory_capacity: torch.mps.recommended_max_memory(), "smaller than unified
                # system RAM"), a figure the preset does not hold; its MPS path also runs tp = pp = dp = 1, unquantized
                # weights and no multimodal checkpoint (validation_hook.py validate_standard_mps_server_args,
                # validate_mps_model_config)
                raise KvcalcError(f"--engine sglang --hardware {self.hardware.name}: SGLang on Apple silicon sizes its "
                                  "pools from Metal's working-set limit (torch.mps.recommended_max_memory), below the "
                                  "unified memory and not in the preset: not modelled (give no --engine)")
        if self.block_size is not None:
            _check_count("block_size", self.block_size)  # the command line's --block-size bound, 2^20
            if self.engine is None:
                raise KvcalcError("--block-size is the page size of a serving engine: give --engine too")

    @property
    def gpus(self) -> int:
        """GPUs the layout uses: tp · pp · dp."""
        return self.tp * self.pp * self.dp

    @property
    def state_storage(self) -> str:
        """The dtype constant states are stored in: state_dtype, else the KV dtype; under vLLM a KV dtype of fewer
        than 16 bits leaves the states at bf16 (CacheConfig.mamba_cache_dtype "auto": the model's dtype, not the KV
        cache's); SGLang's Mamba pool is bf16 whatever the KV dtype (srt/configs/mamba_utils.py: SGLANG_MAMBA_CONV_DTYPE
        bf16; its recurrent states: kvcalc.costs.state)."""
        if self.state_dtype:
            return self.state_dtype
        if (self.engine == "vllm" and dtype_bits(self.kv_dtype) < 16) or self.engine == "sglang":
            return "bf16"
        return self.kv_dtype

    def encoder_tokens(self, spec_source_len: int | None) -> int:
        """Encoder positions the cross-attention caches: enc_ctx, else the model's source length (0: no encoder)."""
        if spec_source_len is None:
            return 0
        return self.enc_ctx or spec_source_len

    @property
    def schedule(self) -> str:
        """The MLA decode schedule in effect."""
        return resolve_schedule(self.mla_cache, self.mla_schedule)

    def at(self, ctx: int) -> Settings:
        """The same settings at another context.

        Only ctx is checked: the rest was when these settings were made. (A sweep makes one Settings a row; checking
        every field again took longer than the row's cache.)"""
        if type(ctx) is not int or not 0 < ctx <= TOKENS_LIMIT:  # a plain int in range passes at once
            _check_count("ctx", ctx)
        out = object.__new__(type(self))  # as _changed, without its keyword arguments' dict
        values = out.__dict__
        values.update(self.__dict__)
        values["ctx"] = ctx
        return out

    def with_schedule(self, schedule: str) -> Settings:
        """The same settings under another MLA decode schedule."""
        resolve_schedule(self.mla_cache, schedule)
        return self._changed(mla_schedule=schedule)

    def _changed(self, **checked: object) -> Settings:
        """A copy with fields the caller has checked changed (frozen: set past __setattr__, as __post_init__ does)."""
        out = object.__new__(type(self))
        out.__dict__.update(self.__dict__, **checked)
        return out
