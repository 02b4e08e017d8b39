"""kolong's byte-level encoder-decoder: ByT5's T5 blocks, optionally with GBST in front of the encoder.

Layout (HF single-model-file style): RMSNorm, feed-forward, attention, the relative position bias, one block,
the encoder (which owns the byte embeddings and the optional GBST layer), the decoder, and the model with
its LM head. Names: b batch, n encoder length in bytes, n' = ceil(n / rate) after GBST, t decoder length,
s cached decoder positions, d hidden size, h heads, d_h head width, V vocabulary.

T5 conventions kept exactly (so converted T5 / ByT5 checkpoints give the same logits, `convert.py`):
RMSNorm before each sublayer with no bias and no mean subtraction, no 1/sqrt(d_h) score scaling, one
relative bias table per stack held by its first layer and reused by all layers (bidirectional buckets in
the encoder, causal buckets in the decoder, none in cross-attention), dropout after the embeddings, in
attention, inside the FFN, after each sublayer and after the final norm; decoding starts with pad (id 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.activations import ACT2FN
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.generation import GenerationMixin
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput

from kolong.attention.terms import attention_dropout_mask
from kolong.models.byte.configuration import KolongByteConfig
from kolong.models.byte.gbst import GBST
from kolong.positions.t5 import relative_position_bucket

# the output field of the decoder cache: `cache` from transformers 5.24, `past_key_values` before
CACHE_FIELD = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"


@dataclass
class KolongByteEncoderOutput(BaseModelOutput):
    """The encoder's output, with the mask of its (possibly GBST-shortened) positions."""

    attention_mask: torch.Tensor | None = None


class KolongByteRMSNorm(nn.Module):
    """T5's LayerNorm: y = w * x / sqrt(mean(x^2) + eps), no bias, no mean subtraction, statistics in fp32."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)  # (..., 1)
        x = x * torch.rsqrt(variance + self.eps)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            x = x.to(self.weight.dtype)
        return self.weight * x


class KolongByteFeedForward(nn.Module):
    """wo(act(wi x)) (T5 1.0) or wo(act(wi_0 x) * wi_1 x) (T5 1.1 / ByT5), no biases."""

    def __init__(self, config: KolongByteConfig):
        super().__init__()
        self.gated = config.is_gated_act
        if self.gated:
            self.wi_0 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
            self.wi_1 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        else:
            self.wi = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.wo = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        factor = config.initializer_factor
        for name in ("wi", "wi_0", "wi_1"):
            if hasattr(self, name):
                getattr(self, name).init_std = factor * config.hidden_size**-0.5
        self.wo.init_std = factor * config.intermediate_size**-0.5
        self.dropout = nn.Dropout(config.dropout_rate)
        self.act = ACT2FN[config.dense_act_fn]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.wi_0(x)) * self.wi_1(x) if self.gated else self.act(self.wi(x))  # (..., d_ff)
        return self.wo(self.dropout(h))  # (..., d)


class KolongByteAttention(nn.Module):
    """Self- or cross-attention; the additive `bias` carries relative positions, padding and causality."""

    def __init__(self, config: KolongByteConfig, layer_idx: int, cross: bool = False):
        super().__init__()
        self.heads = config.num_attention_heads
        self.head_dim = config.head_dim
        inner = self.heads * self.head_dim
        self.q = nn.Linear(config.hidden_size, inner, bias=False)
        self.k = nn.Linear(config.hidden_size, inner, bias=False)
        self.v = nn.Linear(config.hidden_size, inner, bias=False)
        self.o = nn.Linear(inner, config.hidden_size, bias=False)
        factor, d = config.initializer_factor, config.hidden_size
        self.q.init_std = factor * (d * self.head_dim) ** -0.5  # T5: the missing 1/sqrt(d_h) lives here
        self.k.init_std = self.v.init_std = factor * d**-0.5
        self.o.init_std = factor * inner**-0.5
        self.dropout_p = config.dropout_rate
        self.layer_idx = layer_idx
        self.cross = cross

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], self.heads, self.head_dim).transpose(1, 2)  # (b, h, ., d_h)

    def forward(self, x, bias, key_value_states=None, past_key_values=None) -> torch.Tensor:
        batch, length, _ = x.shape
        q = self._heads(self.q(x))  # (b, h, t, d_h)
        if self.cross:
            cache = past_key_values.cross_attention_cache if past_key_values is not None else None
            if cache is not None and past_key_values.is_updated.get(self.layer_idx):
                k, v = (
                    cache.layers[self.layer_idx].keys,
                    cache.layers[self.layer_idx].values,
                )  # (b, h, n', d_h)
            else:
                k, v = self._heads(self.k(key_value_states)), self._heads(self.v(key_value_states))
                if cache is not None:
                    k, v = cache.update(k, v, self.layer_idx)
                    past_key_values.is_updated[self.layer_idx] = True
        else:
            k, v = self._heads(self.k(x)), self._heads(self.v(x))  # (b, h, t, d_h)
            if past_key_values is not None:  # decoder: append to the cached keys and values
                cache = past_key_values.self_attention_cache
                k, v = cache.update(k, v, self.layer_idx)  # (b, h, s + t, d_h)
        dropout_p = self.dropout_p if self.training else 0.0
        if dropout_p > 0 and q.device.type == "cpu":
            # SDPA's CPU kernels take an unfused path with dropout anyway; 16-bit dropout masks are cheaper.
            context = _attend_with_dropout(q, k, v, bias, dropout_p)
        else:
            # T5 does not scale q.k by 1/sqrt(d_h) (the scale is folded into the initialisation).
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p, scale=1.0)
        return self.o(context.transpose(1, 2).reshape(batch, length, self.heads * self.head_dim))  # (b, t, d)


def _attend_with_dropout(q, k, v, bias, p: float) -> torch.Tensor:
    scores = torch.matmul(q, k.transpose(-1, -2))  # (b, h, t, s), unscaled as in T5
    if bias is not None:
        scores = scores + bias
    probs = scores.softmax(dim=-1)
    dropped, keep = attention_dropout_mask(probs.shape, p, probs.device)
    # the 1 / keep rescaling goes on v (s x d_h) rather than on the probabilities (t x s)
    return torch.matmul(probs.masked_fill(dropped, 0.0), v * (1.0 / keep))  # (b, h, t, d_h)


def additive_mask(
    mask: torch.Tensor | None, dtype: torch.dtype, none_if_all_real: bool = True
) -> torch.Tensor | None:
    """(b, n) 1/0 key mask -> (b, 1, 1, n) additive bias (0 or the dtype's minimum), None when all real.

    Checking "all real" waits for the device (a host sync): the decoder, which runs once per generated token,
    passes `none_if_all_real=False` and always gets the bias, and so does a compiled model, where the check
    broke the graph (a compiled GBST encoder on CUDA): a bias of zeros changes nothing.
    """
    if mask is None or (none_if_all_real and not torch.compiler.is_compiling() and bool(mask.all())):
        return None
    return (~mask.bool())[:, None, None, :].to(dtype) * torch.finfo(dtype).min


def relative_bias_table(config) -> nn.Embedding:
    table = nn.Embedding(config.relative_attention_num_buckets, config.num_attention_heads)
    table.init_std = config.initializer_factor * config.hidden_size**-0.5
    return table


def relative_bias(
    table: nn.Embedding, query_length: int, key_length: int, config, causal: bool, offset: int = 0
):
    """T5's position bias: (1, h, q, k) from one learned scalar per (bucket, head); queries start at `offset`."""
    device = table.weight.device
    query = torch.arange(query_length, device=device)[:, None] + offset
    key = torch.arange(key_length, device=device)[None, :]
    buckets = relative_position_bucket(
        key - query,  # j - i: (q, k)
        num_buckets=config.relative_attention_num_buckets,
        max_distance=config.relative_attention_max_distance,
        bidirectional=not causal,
    )
    return table(buckets).permute(2, 0, 1).contiguous()[None]  # (1, h, q, k), read by every layer


class KolongByteBlock(GradientCheckpointingLayer):
    """x + SelfAttn(norm x) [+ CrossAttn(norm x, encoder)] + FFN(norm x), each sublayer followed by dropout."""

    def __init__(self, config: KolongByteConfig, layer_idx: int, is_decoder: bool):
        super().__init__()
        eps = config.layer_norm_epsilon
        self.self_attention_norm = KolongByteRMSNorm(config.hidden_size, eps)
        self.self_attention = KolongByteAttention(config, layer_idx)
        if is_decoder:
            self.cross_attention_norm = KolongByteRMSNorm(config.hidden_size, eps)
            self.cross_attention = KolongByteAttention(config, layer_idx, cross=True)
        self.feed_forward_norm = KolongByteRMSNorm(config.hidden_size, eps)
        self.feed_forward = KolongByteFeedForward(config)
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(self, x, self_bias, encoder_states=None, cross_bias=None, past_key_values=None):
        x = x + self.dropout(
            self.self_attention(self.self_attention_norm(x), self_bias, past_key_values=past_key_values)
        )
        if encoder_states is not None:
            x = x + self.dropout(
                self.cross_attention(
                    self.cross_attention_norm(x), cross_bias, encoder_states, past_key_values=past_key_values
                )
            )
        return x + self.dropout(self.feed_forward(self.feed_forward_norm(x)))


class KolongBytePreTrainedModel(PreTrainedModel):
    config_class = KolongByteConfig
    config: KolongByteConfig
    base_model_prefix = "kolong_byte"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules: ClassVar[list[str]] = ["KolongByteBlock"]

    @torch.no_grad()
    def _init_weights(self, module):
        """T5's initialisation, read from the `init_std` each module was given at construction.

        transformers initialises leaf modules (those holding parameters), so every Linear / Embedding
        carries its own standard deviation; GBST's convolution and projection start as identities.
        """
        from transformers import initialization as init

        if isinstance(module, KolongByteRMSNorm):
            init.ones_(module.weight)
        elif getattr(module, "init_identity", False):  # GBST's depthwise convolution and projection
            if isinstance(module, nn.Conv1d):
                init.dirac_(module.weight, groups=module.groups)
            else:
                init.eye_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, nn.Linear | nn.Embedding) and getattr(module, "init_std", None) is not None:
            init.normal_(module.weight, mean=0.0, std=module.init_std)
            if getattr(module, "bias", None) is not None:
                init.zeros_(module.bias)
        else:
            super()._init_weights(module)


def build_gbst(config: KolongByteConfig) -> GBST:
    return GBST(
        config.hidden_size,
        config.gbst_block_list,
        config.gbst_downsample_rate,
        config.gbst_score_consensus,
        config.gbst_conv_kernel_size,
        config.initializer_factor,
    )


class KolongByteEncoder(KolongBytePreTrainedModel):
    """Byte embeddings -> [GBST: n -> n' = ceil(n / rate)] -> T5 blocks -> final RMSNorm."""

    def __init__(self, config: KolongByteConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)  # shared with the decoder
        self.embed_tokens.init_std = config.initializer_factor * 1.0
        self.gbst = build_gbst(config) if config.use_gbst else None
        self.relative_attention_bias = relative_bias_table(config)
        self.layers = nn.ModuleList(
            KolongByteBlock(config, i, is_decoder=False) for i in range(config.encoder_layers)
        )
        self.final_norm = KolongByteRMSNorm(config.hidden_size, config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> KolongByteEncoderOutput:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        if output_attentions:
            raise ValueError(
                "kolong's byte model attends through scaled_dot_product_attention and returns no weights"
            )
        x = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds  # (b, n, d)
        if self.gbst is not None:
            x, attention_mask = self.gbst(x, attention_mask)  # (b, n', d), (b, n')
        x = self.dropout(x)
        length = x.shape[1]
        bias = relative_bias(
            self.relative_attention_bias, length, length, self.config, causal=False
        )  # (1, h, n, n)
        padding = additive_mask(attention_mask, x.dtype)  # (b, 1, 1, n) or None
        bias = bias.to(x.dtype) if padding is None else bias.to(x.dtype) + padding  # (b|1, h, n, n)
        hidden_states = [x] if output_hidden_states else None
        for layer in self.layers:
            x = layer(x, bias)
            if hidden_states is not None:
                hidden_states.append(x)
        x = self.dropout(self.final_norm(x))
        return KolongByteEncoderOutput(
            last_hidden_state=x,
            hidden_states=tuple(hidden_states) if hidden_states is not None else None,
            attention_mask=attention_mask,
        )


class KolongByteDecoder(KolongBytePreTrainedModel):
    """Causal T5 blocks with cross-attention; reads embeddings computed with the encoder's table."""

    def __init__(self, config: KolongByteConfig):
        super().__init__(config)
        self.relative_attention_bias = relative_bias_table(config)
        self.layers = nn.ModuleList(
            KolongByteBlock(config, i, is_decoder=True) for i in range(config.decoder_layers)
        )
        self.final_norm = KolongByteRMSNorm(config.hidden_size, config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)
        self.post_init()

    def forward(
        self,
        inputs_embeds: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        encoder_attention_mask: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: EncoderDecoderCache | None = None,
        output_hidden_states: bool | None = None,
    ) -> tuple[torch.Tensor, tuple | None]:
        x = self.dropout(inputs_embeds)  # (b, t, d)
        length = x.shape[1]
        cache = past_key_values.self_attention_cache if past_key_values is not None else None
        # A static cache (generate(cache_implementation="static"), which transformers compiles on GPUs) holds
        # keys for its whole preallocated length K and counts what is filled in a device tensor: queries then
        # start at that tensor and the causal mask hides the unfilled keys, with no host sync and fixed shapes.
        fixed = cache is not None and cache.is_compileable
        past = cache.get_seq_length() if cache is not None else 0  # s: an int, or a 0-d tensor (static)
        total = cache.get_max_length() if fixed else past + length  # K, or s + t
        bias = relative_bias(
            self.relative_attention_bias, length, total, self.config, causal=True, offset=past
        ).to(x.dtype)  # (1, h, t, s + t | K)
        future = torch.arange(total, device=x.device)[None, :] > (
            torch.arange(length, device=x.device)[:, None] + past
        )
        bias = bias.masked_fill(future, torch.finfo(x.dtype).min)  # causal (and the unfilled static keys)
        if attention_mask is not None:  # padding among the decoder inputs (keys)
            if attention_mask.dim() == 4:  # generate's prepared (b, 1, t, K) mask
                padding = attention_mask
                if padding.dtype == torch.bool:  # True: attend
                    padding = (~padding).to(x.dtype) * torch.finfo(x.dtype).min
            else:
                if attention_mask.shape[1] == total:
                    keys = attention_mask
                elif fixed:  # the mask of the keys so far: the causal mask hides the rest
                    keys = F.pad(attention_mask, (0, total - attention_mask.shape[1]), value=1)
                else:
                    keys = F.pad(attention_mask, (past, 0), value=1)
                padding = additive_mask(keys, x.dtype, none_if_all_real=False)
            bias = torch.maximum(
                bias + padding.to(x.dtype), torch.tensor(torch.finfo(x.dtype).min, dtype=x.dtype)
            )
        cross_bias = additive_mask(
            encoder_attention_mask, x.dtype, none_if_all_real=False
        )  # (b, 1, 1, n') or None
        hidden_states = [x] if output_hidden_states else None
        for layer in self.layers:
            x = layer(x, bias, encoder_hidden_states, cross_bias, past_key_values)
            if hidden_states is not None:
                hidden_states.append(x)
        x = self.dropout(self.final_norm(x))
        return x, tuple(hidden_states) if hidden_states is not None else None


class KolongByteForConditionalGeneration(KolongBytePreTrainedModel, GenerationMixin):
    """Byte encoder-decoder with an LM head: T5's loss on `labels` (-100 ignored), HF `generate()` support."""

    _tied_weights_keys: ClassVar[dict[str, str]] = {"lm_head.weight": "encoder.embed_tokens.weight"}

    def __init__(self, config: KolongByteConfig):
        super().__init__(config)
        self.encoder = KolongByteEncoder(config)
        self.decoder = KolongByteDecoder(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        # Tied: the embeddings' N(0, 1). Untied: d^-1/2 keeps the initial logits near unit scale.
        self.lm_head.init_std = config.initializer_factor * (
            1.0 if config.tie_word_embeddings else config.hidden_size**-0.5
        )
        self.post_init()

    def get_input_embeddings(self):
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value):
        self.encoder.embed_tokens = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    def _shift_right(self, labels: torch.Tensor) -> torch.Tensor:
        """Decoder inputs from labels: start token first, -100 (ignored positions) read as pad."""
        shifted = labels.new_zeros(labels.shape)
        shifted[..., 1:] = labels[..., :-1]
        shifted[..., 0] = self.config.decoder_start_token_id
        return shifted.masked_fill(shifted == -100, self.config.pad_token_id)

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return self._shift_right(labels)

    def encoder_mask(self, attention_mask: torch.Tensor | None) -> torch.Tensor | None:
        """The mask of the encoder's output positions for a byte-level `attention_mask`."""
        if attention_mask is None or self.encoder.gbst is None:
            return attention_mask
        return self.encoder.gbst.downsample_mask(attention_mask)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs=None,
        past_key_values: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput | tuple:
        # transformers >= 5.24 passes the decoder cache as `cache` (generate, and its callers); older releases
        # as `past_key_values`. Dropping it into **kwargs made every generated byte re-read no past at all.
        if past_key_values is None:
            past_key_values = kwargs.pop("cache", None)
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = KolongByteEncoderOutput(last_hidden_state=encoder_outputs[0])
        cross_mask = getattr(encoder_outputs, "attention_mask", None)
        if cross_mask is None:
            cross_mask = self.encoder_mask(attention_mask)  # (b, n') or None

        if labels is not None and decoder_input_ids is None and decoder_inputs_embeds is None:
            decoder_input_ids = self._shift_right(labels)
        if decoder_inputs_embeds is None:
            decoder_inputs_embeds = self.encoder.embed_tokens(decoder_input_ids)  # (b, t, d)
        if use_cache is None:
            use_cache = bool(self.config.use_cache) and labels is None and not self.training
        if use_cache and past_key_values is None:
            past_key_values = EncoderDecoderCache(DynamicCache(), DynamicCache())
        if not use_cache:
            past_key_values = None
        sequence, decoder_hidden_states = self.decoder(
            decoder_inputs_embeds,
            encoder_outputs.last_hidden_state,
            cross_mask,
            decoder_attention_mask,
            past_key_values,
            output_hidden_states,
        )  # (b, t, d)
        if self.config.scale_decoder_outputs:
            sequence = sequence * self.config.hidden_size**-0.5  # original T5 with a tied head
        logits = self.lm_head(sequence)  # (b, t, V)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits.float().view(-1, logits.shape[-1]),
                labels.to(logits.device).view(-1),
                ignore_index=-100,
            )
        output = Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            **{CACHE_FIELD: past_key_values},
            decoder_hidden_states=decoder_hidden_states,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
        )
        return output if return_dict is not False else output.to_tuple()
