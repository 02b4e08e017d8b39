"""kolong's encoder: a BERT-style Transformer whose position scheme is one pluggable module.

Layout (HF single-model-file style): embeddings, attention, feed-forward, layer, the bare model,
then the heads (masked LM, question answering, sequence and token classification). Every head
returns the standard transformers output dataclass with `loss`, so the `Trainer` works unchanged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutputWithPooling,
    MaskedLMOutput,
    ModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

from kolong.attention.dispatch import Plan
from kolong.attention.masks import AttentionMask
from kolong.attention.options import AttentionOptions
from kolong.constants import POSITION_SCALING_KEY
from kolong.models.encoder.attention import KolongAttention
from kolong.models.encoder.configuration import KolongConfig
from kolong.models.encoder.patterns import attends_locally, local_mask, question_tokens
from kolong.positions import PositionEncoding, build_position_encoding

_ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu, "swiglu": F.silu, "geglu": F.gelu}


class KolongEmbeddings(nn.Module):
    """Word (+ token type) embeddings; positions are added by the scheme between lookup and finish."""

    def __init__(self, config: KolongConfig):
        super().__init__()
        width = config.embedding_size or config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, width, padding_idx=config.pad_token_id)
        self.token_type_embeddings = (
            nn.Embedding(config.type_vocab_size, width) if config.type_vocab_size > 0 else None
        )
        self.norm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        # ALBERT / ELECTRA factorised embeddings: E-wide embeddings projected to H.
        self.projection = nn.Linear(width, config.hidden_size) if width != config.hidden_size else None

    def lookup(self, input_ids, inputs_embeds, token_type_ids) -> torch.Tensor:
        x = self.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds  # (b, n, e)
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                # through the module, not .weight[0]: a quantized table (kolong quantize) supports lookups only
                x = x + self.token_type_embeddings(torch.zeros((), dtype=torch.long, device=x.device))
            else:
                x = x + self.token_type_embeddings(token_type_ids)
        return x

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        x = self.dropout(self.norm(x))
        return self.projection(x) if self.projection is not None else x  # (b, n, d)


class KolongFeedForward(nn.Module):
    """FFN(x) = act(x W1) W2, or the gated act(x W) * (x V) W2 for swiglu / geglu (Shazeer 2020)."""

    def __init__(self, config: KolongConfig):
        super().__init__()
        self.gated = config.hidden_act in ("swiglu", "geglu")
        width = config.intermediate_size * (2 if self.gated else 1)
        self.up = nn.Linear(config.hidden_size, width)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size)
        self.act = _ACTIVATIONS[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)  # (b, n, i) or (b, n, 2i)
        if self.gated:
            h, gate = h.chunk(2, dim=-1)
            return self.down(self.act(h) * gate)
        return self.down(self.act(h))


class KolongLayer(GradientCheckpointingLayer):
    """One encoder block with post-LN (BERT), pre-LN or ReZero residuals."""

    def __init__(self, config: KolongConfig):
        super().__init__()
        self.norm_position = config.norm_position
        self.attention = KolongAttention(config)
        self.feed_forward = KolongFeedForward(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        if self.norm_position == "rezero":
            # ReZero (Bachlechner et al. 2020): x + alpha * F(x), alpha = 0 at initialisation.
            self.attention_alpha = nn.Parameter(torch.zeros(1))
            self.feed_forward_alpha = nn.Parameter(torch.zeros(1))
        else:
            self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
            self.feed_forward_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x, mask, positions, layer, state, output_attentions=False):
        """(b, n, d) -> (b, n, d), and the attention weights when asked for (eager path)."""
        if self.norm_position == "post":
            attended, weights = self.attention(x, mask, positions, layer, state, output_attentions)
            x = self.attention_norm(x + self.dropout(attended))
            return self.feed_forward_norm(x + self.dropout(self.feed_forward(x))), weights
        if self.norm_position == "pre":
            attended, weights = self.attention(
                self.attention_norm(x), mask, positions, layer, state, output_attentions
            )
            x = x + self.dropout(attended)
            return x + self.dropout(self.feed_forward(self.feed_forward_norm(x))), weights
        attended, weights = self.attention(x, mask, positions, layer, state, output_attentions)
        x = x + self.attention_alpha * self.dropout(attended)
        return x + self.feed_forward_alpha * self.dropout(self.feed_forward(x)), weights


class KolongPreTrainedModel(PreTrainedModel):
    config_class = KolongConfig
    config: KolongConfig
    base_model_prefix = "kolong"
    supports_gradient_checkpointing = True
    # HF's attn_implementation values: eager (reference, returns weights), sdpa (default), flex_attention.
    _supports_sdpa = True
    _supports_flex_attn = True
    _no_split_modules: ClassVar[list[str]] = ["KolongLayer"]

    def post_init(self):
        super().post_init()
        if getattr(self.config, POSITION_SCALING_KEY, None):  # a keep-short extended checkpoint
            from kolong.extension.scaling import install_position_scaling

            install_position_scaling(self)

    def set_attention_options(self, options: AttentionOptions | None = None, **changes) -> AttentionOptions:
        """Run-time attention choices for every layer (`kolong.attention.options.AttentionOptions`, or its
        fields by name): never saved with the model. Returns the options now in force."""
        layers = [module for module in self.modules() if isinstance(module, KolongAttention)]
        options = dataclasses.replace(options or layers[0].options, **changes)
        for layer in layers:
            layer.options = options
        return options

    def attention_plans(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                        global_attention_mask: torch.Tensor | None = None, mask_layout: tuple[bool, bool] | None = None,
                        ) -> list[Plan]:  # fmt: skip
        """The attention path each layer would take for these inputs, in the model's mode (training or not) and
        under the caller's grad mode, without computing attention: one `Plan` per layer (`plan.kernel`,
        `plan.why`)."""
        model = self.base_model
        mask = AttentionMask.from_attention_mask(attention_mask, layout=mask_layout)
        batch, length = input_ids.shape[:2]
        device, dtype = input_ids.device, next(self.parameters()).dtype
        local = local_mask(model.config, mask, global_attention_mask, batch, length, device)
        head = model.config.hidden_size // model.config.num_attention_heads
        if torch.is_autocast_enabled(device.type):
            dtype = torch.get_autocast_dtype(device.type)
        query = torch.empty(batch, model.config.num_attention_heads, length, head, device=device, dtype=dtype)
        query.requires_grad_(torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters()))
        plans = []
        for depth in range(model.config.num_hidden_layers):
            layer = model.layers[0 if model.config.share_layers else depth]
            layer_mask = local if local is not None and attends_locally(model.config, depth) else mask
            plans.append(layer.attention.plan(query, layer_mask, model.positions))
        return plans

    @torch.no_grad()
    def _init_weights(self, module):
        from transformers import initialization as init

        super()._init_weights(module)
        std = self.config.initializer_range
        if isinstance(module, nn.Embedding) and getattr(module, "init_std", None):
            init.normal_(
                module.weight, mean=0.0, std=module.init_std
            )  # learned positions, e.g. ConvS2S's 0.1
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, PositionEncoding):
            module.init_weights(std)
        elif isinstance(module, KolongLayer) and module.norm_position == "rezero":
            init.zeros_(module.attention_alpha)
            init.zeros_(module.feed_forward_alpha)


class KolongModel(KolongPreTrainedModel):
    def __init__(self, config: KolongConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = KolongEmbeddings(config)
        self.positions = build_position_encoding(config)
        depth = 1 if config.share_layers else config.num_hidden_layers
        self.layers = nn.ModuleList(KolongLayer(config) for _ in range(depth))
        self.final_norm = (
            nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
            if config.norm_position == "pre"
            else None
        )
        # As BERT, heads that never read the pooled vector (MLM, QA, tokens) are built without it.
        use_pooler = config.use_pooler and add_pooling_layer
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size) if use_pooler else None
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        global_attention_mask: torch.Tensor | None = None,
        mask_layout: tuple[bool, bool] | None = None,
    ) -> BaseModelOutputWithPooling | tuple:
        """`mask_layout`: (every token is real, documents are packed) when the caller knows them on the host,
        so that the forward reads nothing back from the device (the pre-training collator gives it)."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        mask = AttentionMask.from_attention_mask(attention_mask, layout=mask_layout)
        batch, length = (input_ids if input_ids is not None else inputs_embeds).shape[:2]
        device = (input_ids if input_ids is not None else inputs_embeds).device
        local = local_mask(self.config, mask, global_attention_mask, batch, length, device)  # None: all full
        real = attention_mask if mask.documents is None else attention_mask.ne(0).long()
        if mask.visible is not None:  # a visible matrix: its diagonal says which tokens are real
            real = attention_mask.diagonal(dim1=1, dim2=2).long()
        if position_ids is None and mask.documents is not None:  # positions restart in each packed document
            position_ids = self.positions.packed_position_ids(mask.document_positions(), real)
        x = self.embeddings.lookup(input_ids, inputs_embeds, token_type_ids)  # (b, n, e)
        x = self.positions(x, input_ids=input_ids, position_ids=position_ids, attention_mask=real)
        x = self.embeddings.finish(x)  # (b, n, d)

        state = self.positions.prepare(x.shape[1], x.device, x.dtype)
        if position_ids is not None and mask.visible is not None:  # soft positions (K-BERT): per-example
            state = self.positions.at_positions(state, position_ids)
        hidden_states = [x] if output_hidden_states else None
        attentions = [] if output_attentions else None
        for depth in range(self.config.num_hidden_layers):
            layer = self.layers[0 if self.config.share_layers else depth]
            layer_mask = local if local is not None and attends_locally(self.config, depth) else mask
            # the depth, or for per-layer tables a 0-d tensor (one graph for every layer compiled alone)
            index = self.positions.layer_argument(depth, x.device)
            x, weights = layer(x, layer_mask, self.positions, index, state, bool(output_attentions))
            if hidden_states is not None:
                hidden_states.append(x)
            if attentions is not None:
                attentions.append(weights)  # (b, h, n, n)
        if self.final_norm is not None:
            x = self.final_norm(x)
            if hidden_states is not None:
                hidden_states[-1] = x
        pooled = torch.tanh(self.pooler(x[:, 0])) if self.pooler is not None else None  # (b, d)

        output = BaseModelOutputWithPooling(
            last_hidden_state=x,
            pooler_output=pooled,
            hidden_states=tuple(hidden_states) if hidden_states is not None else None,
            attentions=tuple(attentions) if attentions is not None else None,
        )
        return output if return_dict is not False else output.to_tuple()


class KolongLMHead(nn.Module):
    """dense -> activation -> LayerNorm -> decoder tied to the word embeddings (BERT, ALBERT, ELECTRA)."""

    def __init__(self, config: KolongConfig):
        super().__init__()
        width = config.embedding_size or config.hidden_size
        self.dense = nn.Linear(config.hidden_size, width)
        self.act = F.gelu if config.hidden_act not in ("relu",) else F.relu
        self.norm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(width, config.vocab_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(self.act(self.dense(x))))  # (b, n, V)

    def logits_and_loss(
        self, hidden, labels, sparse: bool, labelled_bound: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits and MLM loss; `sparse`: only the labelled positions go through the vocabulary projection.

        With `labelled_bound` (at least the labelled count, known to the collator on the host) the rows are
        the labelled positions in order, then unlabelled ones up to the bound: a fixed shape, and no host
        read of the count (boolean indexing waits for every queued kernel). The loss is the same."""
        if labels is not None and sparse and labelled_bound is not None:
            flat = labels.view(-1)
            rows = flat.eq(-100).to(torch.int8).argsort(stable=True)[:labelled_bound]  # labelled first
            logits = self(hidden.reshape(-1, hidden.shape[-1]).index_select(0, rows))  # (bound, V)
            return logits, F.cross_entropy(logits.float(), flat.index_select(0, rows), ignore_index=-100)
        if labels is not None and sparse:
            labelled = labels.view(-1).ne(-100)
            logits = self(hidden.reshape(-1, hidden.shape[-1])[labelled])  # (labelled, V)
            return logits, F.cross_entropy(logits.float(), labels.view(-1)[labelled])
        logits = self(hidden)  # (b, n, V)
        if labels is None:
            return logits, None
        return logits, F.cross_entropy(
            logits.view(-1, logits.shape[-1]).float(), labels.view(-1), ignore_index=-100
        )


def _wrap(output, return_dict):
    return output if return_dict is not False else output.to_tuple()


class KolongForMaskedLM(KolongPreTrainedModel):
    _tied_weights_keys: ClassVar[dict[str, str]] = {
        "lm_head.decoder.weight": "kolong.embeddings.word_embeddings.weight"
    }

    def __init__(self, config: KolongConfig):
        super().__init__(config)
        self.kolong = KolongModel(config, add_pooling_layer=False)
        self.lm_head = KolongLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None,
                return_dict=None, global_attention_mask=None, mask_layout=None,
                labelled_bound=None) -> MaskedLMOutput | tuple:  # fmt: skip
        """`mask_layout` and `labelled_bound`: what the pre-training collator knows of the batch on
        the host (see `KolongModel.forward` and `KolongLMHead.logits_and_loss`); with them, nothing is read back."""
        outputs = self.kolong(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                              output_attentions, output_hidden_states,
                              global_attention_mask=global_attention_mask, mask_layout=mask_layout)  # fmt: skip
        logits, loss = self.lm_head.logits_and_loss(
            outputs.last_hidden_state, labels, self.config.sparse_prediction, labelled_bound
        )
        output = MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return _wrap(output, return_dict)


@dataclass
class KolongForPreTrainingOutput(ModelOutput):
    """MLM + sentence-order prediction (ALBERT): `loss` is the sum of both losses."""

    loss: torch.Tensor | None = None
    prediction_logits: torch.Tensor | None = None
    sop_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class KolongForPreTraining(KolongPreTrainedModel):
    """Masked LM plus ALBERT's sentence-order prediction on the pooled first token."""

    _tied_weights_keys: ClassVar[dict[str, str]] = {
        "lm_head.decoder.weight": "kolong.embeddings.word_embeddings.weight"
    }

    def __init__(self, config: KolongConfig):
        super().__init__(config)
        self.kolong = KolongModel(config, add_pooling_layer=True)
        self.lm_head = KolongLMHead(config)
        self.sop_classifier = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, sentence_order_label=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, global_attention_mask=None, mask_layout=None,
                labelled_bound=None) -> KolongForPreTrainingOutput | tuple:  # fmt: skip
        outputs = self.kolong(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                              output_attentions, output_hidden_states,
                              global_attention_mask=global_attention_mask, mask_layout=mask_layout)  # fmt: skip
        hidden = outputs.last_hidden_state  # (b, n, d)
        pooled = outputs.pooler_output if outputs.pooler_output is not None else hidden[:, 0]
        sop_logits = self.sop_classifier(pooled)  # (b, 2)
        logits, loss = self.lm_head.logits_and_loss(
            hidden, labels, self.config.sparse_prediction, labelled_bound
        )
        if sentence_order_label is not None:
            sop_loss = F.cross_entropy(sop_logits.float(), sentence_order_label.view(-1))
            loss = sop_loss if loss is None else loss + sop_loss
        output = KolongForPreTrainingOutput(loss=loss, prediction_logits=logits, sop_logits=sop_logits,
                                            hidden_states=outputs.hidden_states,
                                            attentions=outputs.attentions)  # fmt: skip
        return _wrap(output, return_dict)


class KolongForQuestionAnswering(KolongPreTrainedModel):
    def __init__(self, config: KolongConfig):
        super().__init__(config)
        self.kolong = KolongModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, start_positions=None, end_positions=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, global_attention_mask=None) -> QuestionAnsweringModelOutput | tuple:  # fmt: skip
        if (
            global_attention_mask is None
            and self.config.attention_pattern == "local+global"
            and input_ids is not None
            and input_ids.shape[1] - 1 > self.config.attention_window  # else every layer attends fully
        ):
            # Longformer's choice for QA: the question attends to, and is seen by, the whole document.
            global_attention_mask = question_tokens(input_ids, token_type_ids, attention_mask,
                                                    getattr(self.config, "sep_token_id", None))  # fmt: skip
        outputs = self.kolong(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                              output_attentions, output_hidden_states,
                              global_attention_mask=global_attention_mask)  # fmt: skip
        logits = self.qa_outputs(outputs.last_hidden_state)  # (b, n, 2)
        start_logits, end_logits = (part.squeeze(-1).contiguous() for part in logits.split(1, dim=-1))
        loss = None
        if start_positions is not None and end_positions is not None:
            # As BERT: positions outside the input are ignored rather than clamped onto a token.
            ignored = start_logits.shape[1]
            start = start_positions.view(-1).clamp(0, ignored)
            end = end_positions.view(-1).clamp(0, ignored)
            loss = (
                F.cross_entropy(start_logits.float(), start, ignore_index=ignored)
                + F.cross_entropy(end_logits.float(), end, ignore_index=ignored)
            ) / 2
        output = QuestionAnsweringModelOutput(
            loss=loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return _wrap(output, return_dict)


def classification_loss(config: KolongConfig, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """HF's rule: 1 label -> regression (MSE), integer labels -> cross-entropy, else multi-label BCE."""
    if config.problem_type is None:
        if config.num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    if config.problem_type == "regression":
        return F.mse_loss(logits.squeeze(-1).float(), labels.float().view(-1))
    if config.problem_type == "single_label_classification":
        return F.cross_entropy(logits.view(-1, config.num_labels).float(), labels.view(-1))
    return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


class KolongForSequenceClassification(KolongPreTrainedModel):
    def __init__(self, config: KolongConfig):
        super().__init__(config)
        self.kolong = KolongModel(config)
        dropout = (
            config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        )
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None,
                return_dict=None, global_attention_mask=None) -> SequenceClassifierOutput | tuple:  # fmt: skip
        outputs = self.kolong(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                              output_attentions, output_hidden_states,
                              global_attention_mask=global_attention_mask)  # fmt: skip
        pooled = (
            outputs.pooler_output if outputs.pooler_output is not None else outputs.last_hidden_state[:, 0]
        )
        logits = self.classifier(self.dropout(pooled))  # (b, labels)
        loss = classification_loss(self.config, logits, labels) if labels is not None else None
        output = SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return _wrap(output, return_dict)


class KolongForTokenClassification(KolongPreTrainedModel):
    def __init__(self, config: KolongConfig):
        super().__init__(config)
        self.kolong = KolongModel(config, add_pooling_layer=False)
        dropout = (
            config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        )
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None,
                return_dict=None, global_attention_mask=None) -> TokenClassifierOutput | tuple:  # fmt: skip
        outputs = self.kolong(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                              output_attentions, output_hidden_states,
                              global_attention_mask=global_attention_mask)  # fmt: skip
        logits = self.classifier(self.dropout(outputs.last_hidden_state))  # (b, n, labels)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits.view(-1, self.config.num_labels).float(), labels.view(-1), ignore_index=-100
            )
        output = TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return _wrap(output, return_dict)
