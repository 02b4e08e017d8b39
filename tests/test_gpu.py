"""kolong on a CUDA device: same outputs as on the CPU for every position scheme, and a training step.

Marked `gpu`: skipped without CUDA (see conftest.py), run by the suite on a GPU machine.
"""

from __future__ import annotations

import pytest
import torch

from conftest import VOCAB, random_ids, tiny_kolong_config
from kolong.models import KolongForMaskedLM, KolongModel

pytestmark = pytest.mark.gpu

SCHEMES = ("learned", "sinusoidal", "memn2n", "shaw", "t5", "alibi", "rope", "none")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_cuda_matches_cpu(scheme):
    torch.manual_seed(0)
    model = KolongModel(tiny_kolong_config(position_encoding=scheme)).eval()
    ids = random_ids(2, 16)
    mask = torch.ones_like(ids)
    mask[1, 10:] = 0
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).last_hidden_state
        actual = model.cuda()(input_ids=ids.cuda(), attention_mask=mask.cuda()).last_hidden_state
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-4, atol=1e-4)


def test_bf16_training_step_on_cuda_lowers_the_loss():
    torch.manual_seed(0)
    model = KolongForMaskedLM(tiny_kolong_config(position_encoding="shaw")).cuda().train()
    ids = random_ids(4, 16).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(20):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss))
    assert losses[-1] < losses[0] and all(loss == loss for loss in losses)  # falls, never NaN
    assert model.config.vocab_size == VOCAB
