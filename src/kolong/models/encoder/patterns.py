"""Sparse attention patterns: which layers attend locally, and which tokens are global.

    full layer:   every token attends to every token (BERT)
    local layer:  token i attends to keys j with |i - j| <= attention_window (Longformer, ModernBERT)
    + global:     global tokens attend to, and are attended by, every token (Longformer, BigBird)

`attention_pattern` in `KolongConfig` picks `full`, `local` or `local+global`; with
`full_attention_every = k`, layers 0, k, 2k, ... stay full (ModernBERT's alternation). Global tokens
come from the task: `global_attention_mask` (Longformer's input, 1 = global) when given, otherwise
[CLS] (the first token) and, for question answering, the question (`question_tokens`).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from kolong.attention.masks import AttentionMask

PATTERNS = ("full", "local", "local+global")


def attends_locally(config, depth: int) -> bool:
    """Whether layer `depth` uses the local window (False: full attention)."""
    if config.attention_pattern == "full":
        return False
    every = config.full_attention_every
    return not (every and depth % every == 0)


def local_mask(
    config, mask: AttentionMask, global_attention_mask, batch: int, length: int, device
) -> AttentionMask | None:
    """The mask of the local layers (None when every layer is full): the same padding and documents,
    plus the window and the global tokens, one row per batch row (FlexAttention's mask_mod reads row b)."""
    if global_attention_mask is not None:
        global_attention_mask = _checked(global_attention_mask, batch, length)
    if not any(attends_locally(config, depth) for depth in range(config.num_hidden_layers)):
        return None
    if config.attention_window >= length - 1:  # the window covers the input: full attention, same kernels
        return None
    global_tokens = None
    if config.attention_pattern == "local+global":
        if global_attention_mask is None:
            global_tokens = torch.zeros(batch, length, dtype=torch.bool, device=device)
            global_tokens[:, 0] = True  # [CLS]
        else:
            global_tokens = global_attention_mask.expand(batch, length)
        if mask.real is not None:
            global_tokens = global_tokens & mask.real  # padding is never global
    return replace(mask, window=config.attention_window, global_tokens=global_tokens, _kept={})


def _checked(global_attention_mask: torch.Tensor, batch: int, length: int) -> torch.Tensor:
    shape = tuple(global_attention_mask.shape)
    if len(shape) != 2 or shape[1] != length or shape[0] not in (1, batch):
        raise ValueError(
            f"global_attention_mask must be ({batch}, {length}) (or (1, {length}) for every row) with 1 for "
            f"global tokens, got shape {shape}"
        )
    return global_attention_mask != 0


def question_tokens(input_ids, token_type_ids, attention_mask, sep_token_id) -> torch.Tensor:
    """(b, n) bool: [CLS], the question and its [SEP] of `question [SEP] context` inputs.

    Read from the token types (0 before the context) when the tokenizer sets them, else from the first
    separator (RoBERTa-style inputs have one token type)."""
    real = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask != 0
    if token_type_ids is not None and bool((token_type_ids != 0).any()):
        return (token_type_ids == 0) & real
    if sep_token_id is None:
        raise ValueError(
            "question answering with attention_pattern='local+global' finds the question by token_type_ids "
            "or the config's sep_token_id, and neither is set: pass global_attention_mask (1 on the question)"
        )
    separators = (input_ids == sep_token_id).int()
    # positions up to and including the first separator
    return ((separators.cumsum(1) - separators) == 0) & real
