"""ALBERT's sentence-order prediction pairs, built from corpus blocks by the MLM collator."""

from __future__ import annotations

import torch


def sentence_order_pairs(
    features: list[dict], sep_token_id: int, generator=None
) -> tuple[list[dict], list[int]]:
    """[CLS] body [SEP] -> [CLS] A [SEP] B [SEP] (label 0) or [CLS] B [SEP] A [SEP] (label 1), cut at an
    eojeol boundary in the middle half of the body; `token_type_ids` mark segment B."""
    pairs, labels = [], []
    for feature in features:
        ids = list(feature["input_ids"])
        body = slice(1, len(ids) - 1)
        groups = list(feature.get("eojeol_ids", range(len(ids))))[body]
        # split where a new eojeol starts, in the middle half of the body
        starts = [i for i in range(1, len(groups)) if groups[i] != groups[i - 1] and groups[i] >= 0]
        middle = (
            [i for i in starts if len(groups) // 4 <= i <= 3 * len(groups) // 4]
            or starts
            or [len(groups) // 2]
        )
        cut = middle[int(torch.randint(len(middle), (1,), generator=generator))]
        swap = int(torch.rand(1, generator=generator) < 0.5)
        labels.append(swap)
        columns = {
            key: list(feature[key])[body]
            for key in ("input_ids", "eojeol_ids", "morpheme_ids")
            if key in feature
        }
        pair = {}
        for key, values in columns.items():
            first, second = values[:cut], values[cut:]
            if swap:
                first, second = second, first
            special = sep_token_id if key == "input_ids" else -1
            head = ids[0] if key == "input_ids" else -1
            pair[key] = [head, *first, special, *second, special]
            if key == "input_ids":  # segment A: [CLS] first [SEP]; segment B: second [SEP]
                pair["token_type_ids"] = [0] * (len(first) + 2) + [1] * (len(second) + 1)
        pairs.append(pair)
    return pairs, labels
