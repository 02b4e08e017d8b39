"""Compile time of `kolong pretrain mlm --compile yes|regions` at the base preset's size (12 x 768), on CPU.

python benchmarks/results/pretrain-compile-regions-cpu/measure.py MODE WORK   (MODE: yes | regions | no; run each
in a fresh process with TORCHINDUCTOR_CACHE_DIR set to an empty folder, so nothing is cached; WORK: a scratch
folder, reused for the corpus)
"""

import itertools
import json
import sys
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

from kolong.checkpoints import build_tiny_bert_checkpoint
from kolong.data.corpus import build_corpus
from kolong.data.samples import korean_document
from kolong.training.pretrain import PretrainArguments, pretrain_mlm

mode, work = sys.argv[1], Path(sys.argv[2])
corpus = work / "corpus"
if not corpus.is_dir():
    tokenizer = build_tiny_bert_checkpoint(work / "tokenizer", max_position_embeddings=512)
    (work / "text.txt").write_text("\n".join(korean_document(40000).split(". ")), encoding="utf-8")
    build_corpus([str(work / "text.txt")], str(tokenizer), corpus, max_length=128, held_out=0.05)


class Clock(TrainerCallback):
    """Seconds from the start of training (the evaluation at step 0 included) to the end of each step."""

    def __init__(self):
        self.start, self.ends = None, []

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter() - self.start)


clock = Clock()
pretrain_mlm(PretrainArguments(corpus=str(corpus), output_dir=str(work / f"run-{mode}"), preset="base", compile=mode,
                               max_steps=4, batch_size=4, eval_blocks=8, eval_every="100", save_steps=100,
                               logging_steps=2, overwrite=True, quiet=True, seed=0, extra={"use_cpu": True}),
             callbacks=[clock])  # fmt: skip
ends = clock.ends
print(json.dumps({"mode": mode, "evaluation_and_first_step_s": round(ends[0], 1),
                  "later_steps_s": [round(b - a, 2) for a, b in itertools.pairwise(ends)], "torch": torch.__version__}))  # fmt: skip
