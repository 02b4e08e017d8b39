"""Reading held-out text with an MLM: fixed masked blocks, per-token losses, chunked reading, position buckets.

The measurements `kolong experiment extension-init` (and the sensitivity study) rest on: every variant reads
the same blocks with the same masks, so losses compare token by token.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from kolong.experiments.extension_report import bucket_edges, bucket_labels


def unique_contexts(examples) -> list[str]:
    """Each question's context once, in order (an article's paragraphs or whole articles)."""
    return list(dict.fromkeys(e.context for e in examples))


def evaluation_blocks(
    tokenizer, texts: list[str], length: int, mask_rate: float, seed: int, limit: int, stream: bool = False
):
    """[CLS] tokens [SEP] blocks of exactly `length` from each text, and a fixed mask per block.

    With `stream`, the texts are one stream with [SEP] after each (how the pre-training corpus packs
    documents) and reading stops once `limit` blocks are full, so `texts` may be a long iterator.
    """
    body = length - 2
    blocks, pending = [], []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if stream:
            pending += [*ids, tokenizer.sep_token_id]
            while len(pending) >= body and not (limit and len(blocks) >= limit):
                blocks.append([tokenizer.cls_token_id, *pending[:body], tokenizer.sep_token_id])
                pending = pending[body:]
            if limit and len(blocks) >= limit:
                break
        else:
            blocks += [[tokenizer.cls_token_id, *ids[i : i + body], tokenizer.sep_token_id]
                       for i in range(0, len(ids) - body + 1, body)]  # fmt: skip
    if limit:
        blocks = blocks[:limit]
    rng = np.random.default_rng(seed)
    masks = rng.random((len(blocks), length)) < mask_rate
    masks[:, 0] = masks[:, -1] = False
    return np.array(blocks, dtype=np.int64).reshape(-1, length), masks


def heldout_reviews(shared_data: str | Path, trained: int):
    """NSMC reviews after the base's first `trained` ones, skipping any text it trained on (a generator)."""
    from kolong.data.corpus import read_documents

    documents = read_documents(["nsmc"], shared_data)
    seen = set(itertools.islice(documents, trained))
    return (text for text in documents if text not in seen)


def token_losses(model, ids: np.ndarray, masks: np.ndarray, mask_id: int, batch: int) -> np.ndarray:
    """Cross-entropy at every masked token (NaN elsewhere), (blocks, n)."""
    import torch

    out = np.full(ids.shape, np.nan)
    with torch.inference_mode():
        for start in range(0, len(ids), batch):
            target = torch.from_numpy(ids[start : start + batch])
            mask = torch.from_numpy(masks[start : start + batch])
            logits = model(input_ids=torch.where(mask, mask_id, target)).logits.float()
            loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none")
            out[start : start + batch] = torch.where(mask, loss, torch.nan).numpy()
    return out


def chunked_losses(model, ids: np.ndarray, masks: np.ndarray, mask_id: int, chunk: int, batch: int):
    """The same blocks read by a `chunk`-position model in [CLS] piece [SEP] chunks, mapped back."""
    cls, sep = ids[0, 0], ids[0, -1]
    body, masks_body = ids[:, 1:-1], masks[:, 1:-1]
    out = np.full(ids.shape, np.nan)
    width = chunk - 2
    for start in range(0, body.shape[1], width):
        piece = body[:, start : start + width]
        rows = np.concatenate([np.full((len(ids), 1), cls), piece, np.full((len(ids), 1), sep)], axis=1)
        row_masks = np.pad(masks_body[:, start : start + width], ((0, 0), (1, 1)))
        losses = token_losses(model, rows, row_masks, mask_id, batch)
        out[:, 1 + start : 1 + start + piece.shape[1]] = losses[:, 1:-1]
    return out


def bucket_means(losses: np.ndarray, length: int) -> dict[str, np.ndarray]:
    """Per bucket, each block's mean loss over its masked tokens in the bucket."""
    edges = zip(bucket_labels(length), bucket_edges(length), strict=True)
    return {label: _masked_mean(losses[:, low:high]) for label, (low, high) in edges}


BOUNDARY_REACH = 64
BOUNDARY = f"512-boundaries ±{BOUNDARY_REACH}"  # the positions boundary_means reads, as a bucket name


def boundary_means(losses: np.ndarray, length: int, reach: int = BOUNDARY_REACH) -> np.ndarray:
    """Each block's mean loss over its masked tokens within `reach` of a multiple of 512 inside the block.

    There a 512 model reading chunks has lost the most context (the tokens past the cut), so an extended
    model that uses context across 512 tokens gains most there."""
    near = np.zeros(length, dtype=bool)
    for cut in range(512, length, 512):
        near[max(0, cut - reach) : cut + reach] = True
    return _masked_mean(losses[:, near])


def _masked_mean(part: np.ndarray) -> np.ndarray:
    """Each row's mean over its scored (not NaN) entries; 0 for a row with none."""
    return np.nansum(part, axis=1) / np.maximum((~np.isnan(part)).sum(axis=1), 1)


def position_row_spread(model_path: str, group: int = 128) -> dict:
    """How trained the base's position rows are, per range of `group` rows.

    `std`: the rows' standard deviation beside the initializer_range. `neighbour_cosine`: the mean cosine
    similarity of each row with the next one. Trained tables are smooth (neighbouring positions get similar
    rows, BERT's about 0.9) while independently initialised rows give about 0. Rows still random were
    barely trained: extending from them (interpolate, last) is then no better than random rows."""
    from transformers import AutoModelForMaskedLM

    from kolong.extension.position_table import find_position_table

    model = AutoModelForMaskedLM.from_pretrained(model_path)
    rows = find_position_table(model).real_rows().float()
    ranges = [(a, min(a + group, len(rows))) for a in range(0, len(rows), group)]
    neighbours = neighbour_cosine(rows)
    return {
        "std": {f"{a}-{b - 1}": float(rows[a:b].std()) for a, b in ranges},
        "neighbour_cosine": {f"{a}-{b - 1}": float(neighbours[a : b - 1].mean()) for a, b in ranges},
        "initializer_range": float(getattr(model.config, "initializer_range", 0.02)),
    }


def neighbour_cosine(rows):
    """(n - 1,) cosine similarity of row i with row i + 1 of an (n, d) table."""
    import torch

    return torch.nn.functional.cosine_similarity(rows[:-1], rows[1:], dim=-1)
