"""A biaffine dependency parser (Dozat & Manning 2017) over any encoder: kolong's or an HF one.

Each eojeol is represented by its first sub-word's hidden state; a learned ROOT vector is node 0.
Two MLPs give every node a dependent and a head view, and biaffine products score arcs and labels:

    s_arc[i, j]      = d_i^T U h_j + h_j^T u          (dependent i = 1..w, head j = 0..w)        (Eq. 5)
    s_label[i, j, l] = d'_i^T U_l h'_j + W_l [d'_i; h'_j] + b_l                                   (Eq. 6)

Training: cross-entropy of each eojeol's gold head over the candidate heads, plus of its gold label at the
gold head. Decoding: each eojeol's best-scoring head (no tree constraint, as KLUE-baseline), then its best
label at that head. The encoder is a sub-model: `from_encoder(path)` starts from any `AutoModel`
checkpoint (a kolong encoder with any position scheme, BERT, RoBERTa, ...); `save_pretrained` writes
one checkpoint that `AutoModel.from_pretrained` loads after `import kolong`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import ModelOutput


class DependencyParserConfig(PretrainedConfig):
    r"""
    Args:
        encoder (`dict`): the encoder's config (`to_dict()` of any AutoConfig).
        num_labels (`int`): dependency labels (KLUE-DP: 38).
        arc_size (`int`, defaults to 512), label_size (`int`, defaults to 128): widths of the MLP views.
        parser_dropout (`float`, defaults to 0.33): dropout of the MLP views (Dozat & Manning).
    """

    model_type = "kolong-dependency-parser"
    sub_configs = {"encoder": AutoConfig}  # noqa: RUF012  (transformers' class attribute)

    def __init__(self, encoder=None, arc_size: int = 512, label_size: int = 128, parser_dropout: float = 0.33,
                 **kwargs):  # fmt: skip
        if isinstance(encoder, dict):
            encoder = AutoConfig.for_model(**encoder)
        self.encoder = encoder
        self.arc_size, self.label_size, self.parser_dropout = arc_size, label_size, parser_dropout
        super().__init__(**kwargs)


@dataclass
class DependencyParserOutput(ModelOutput):
    loss: torch.Tensor | None = None
    arc_logits: torch.Tensor | None = None  # (b, w, w + 1): head scores of each eojeol, column 0 = ROOT
    label_logits: torch.Tensor | None = None  # (b, w, labels): at the gold heads (training) or predicted ones
    heads: torch.Tensor | None = None  # (b, w) predicted heads, 0 = ROOT
    labels: torch.Tensor | None = None  # (b, w) predicted label ids


class _View(nn.Sequential):
    def __init__(self, hidden: int, size: int, dropout: float):
        super().__init__(nn.Linear(hidden, size), nn.GELU(), nn.Dropout(dropout))


class BiaffineDependencyParser(PreTrainedModel):
    config_class = DependencyParserConfig
    base_model_prefix = "parser"

    def __init__(self, config: DependencyParserConfig, encoder: nn.Module | None = None):
        super().__init__(config)
        self.encoder = encoder if encoder is not None else AutoModel.from_config(config.encoder)
        hidden = config.encoder.hidden_size
        self.root = nn.Parameter(torch.zeros(hidden))
        self.arc_dependent = _View(hidden, config.arc_size, config.parser_dropout)
        self.arc_head = _View(hidden, config.arc_size, config.parser_dropout)
        self.label_dependent = _View(hidden, config.label_size, config.parser_dropout)
        self.label_head = _View(hidden, config.label_size, config.parser_dropout)
        self.arc_weight = nn.Parameter(torch.zeros(config.arc_size, config.arc_size))
        self.arc_bias = nn.Parameter(torch.zeros(config.arc_size))
        self.label_weight = nn.Parameter(torch.zeros(config.num_labels, config.label_size, config.label_size))
        self.label_linear = nn.Linear(2 * config.label_size, config.num_labels)
        self.post_init()

    @classmethod
    def from_encoder(cls, path: str, num_labels: int, id2label: dict | None = None, **options):
        """A parser whose encoder starts from the `AutoModel` checkpoint at `path` (the head starts fresh)."""
        encoder = AutoModel.from_pretrained(path)
        config = DependencyParserConfig(encoder=encoder.config.to_dict(), num_labels=num_labels,
                                        id2label=id2label, **options)  # fmt: skip
        return cls(config, encoder=encoder)

    def _init_weights(self, module):
        """The parser's own weights; the encoder's modules keep their own initialisation (or checkpoint)."""
        if module is self:
            nn.init.normal_(self.root, std=0.02)
            nn.init.xavier_uniform_(self.arc_weight)
            nn.init.zeros_(self.arc_bias)
            nn.init.xavier_uniform_(self.label_weight)
        elif isinstance(module, _View) or module is self.label_linear:
            linear = module[0] if isinstance(module, _View) else module
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def forward(self, input_ids=None, attention_mask=None, word_starts=None, heads=None, dep_labels=None,
                token_type_ids=None, return_dict=None) -> DependencyParserOutput:  # fmt: skip
        """word_starts (b, w): index of each eojeol's first sub-word, -1 for padding eojeols; heads (b, w):
        gold heads (0 = ROOT, i = the i-th eojeol) and dep_labels (b, w): gold label ids, -100 for padding."""
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        hidden = self.encoder(**inputs).last_hidden_state  # (b, n, d)
        real = word_starts >= 0  # (b, w)
        index = word_starts.clamp(min=0)[..., None].expand(-1, -1, hidden.shape[-1])
        words = hidden.gather(1, index)  # (b, w, d)
        nodes = torch.cat(
            [self.root.expand(words.shape[0], 1, -1).to(words.dtype), words], dim=1
        )  # (b, w+1, d)

        dependent, head = self.arc_dependent(words), self.arc_head(nodes)  # (b, w, a), (b, w+1, a)
        arc = (
            torch.einsum("bia,ac,bjc->bij", dependent, self.arc_weight, head)
            + (head @ self.arc_bias)[:, None, :]
        )
        candidates = torch.cat([real.new_ones(real.shape[0], 1), real], dim=1)  # ROOT and real eojeols
        width = words.shape[1]
        dependents, heads_at = (
            torch.arange(width, device=arc.device),
            torch.arange(width + 1, device=arc.device),
        )
        no_self = (heads_at[None, :] != dependents[:, None] + 1)[None]  # eojeol i is node i + 1
        arc = arc.masked_fill(~(candidates[:, None, :] & no_self), torch.finfo(arc.dtype).min)  # (b, w, w+1)

        predicted_heads = arc.argmax(-1)  # (b, w)
        chosen = heads.clamp(min=0) if heads is not None and self.training else predicted_heads
        label_dependent, label_head = self.label_dependent(words), self.label_head(nodes)
        at_head = label_head.gather(1, chosen[..., None].expand(-1, -1, label_head.shape[-1]))  # (b, w, l)
        label = torch.einsum("bil,klm,bim->bik", label_dependent, self.label_weight, at_head)
        label = label + self.label_linear(torch.cat([label_dependent, at_head], dim=-1))  # (b, w, labels)

        loss = None
        if heads is not None and dep_labels is not None:
            gold_heads = heads.masked_fill(~real, -100)
            loss = F.cross_entropy(arc.flatten(0, 1).float(), gold_heads.flatten(), ignore_index=-100)
            if not self.training:  # scored at the gold heads, whatever was predicted
                at_gold = label_head.gather(
                    1, heads.clamp(min=0)[..., None].expand(-1, -1, label_head.shape[-1])
                )
                gold_label = torch.einsum("bil,klm,bim->bik", label_dependent, self.label_weight, at_gold)
                gold_label = gold_label + self.label_linear(torch.cat([label_dependent, at_gold], dim=-1))
            else:
                gold_label = label
            loss = loss + F.cross_entropy(
                gold_label.flatten(0, 1).float(), dep_labels.flatten(), ignore_index=-100
            )
        return DependencyParserOutput(loss=loss, arc_logits=arc, label_logits=label, heads=predicted_heads,
                                      labels=label.argmax(-1))  # fmt: skip


def register_auto_classes() -> None:
    AutoConfig.register(DependencyParserConfig.model_type, DependencyParserConfig, exist_ok=True)
    AutoModel.register(DependencyParserConfig, BiaffineDependencyParser, exist_ok=True)
