"""First-call (compile) time of a byte encoder under `bench gbst --compile-scope layers|encoder`.

python benchmarks/results/gbst-compile-scope-cpu/measure.py SCOPE   (run each scope in a fresh process, with
TORCHINDUCTOR_CACHE_DIR set to an empty folder so nothing is cached)
"""

import json
import sys
import time

import torch

from kolong.bench.gbst import compile_encoder
from kolong.models.byte import KolongByteConfig, KolongByteForConditionalGeneration, add_gbst

scope = sys.argv[1]
torch.manual_seed(0)
config = KolongByteConfig(hidden_size=768, num_attention_heads=12, head_dim=64, intermediate_size=2048,
                          encoder_layers=12, decoder_layers=4)  # fmt: skip
encoder = add_gbst(KolongByteForConditionalGeneration(config)).get_encoder()  # the bench's size, with GBST
compile_encoder(encoder, scope)
ids = torch.randint(3, 250, (1, 96))
mask = torch.ones_like(ids)
started = time.perf_counter()
encoder(input_ids=ids, attention_mask=mask).last_hidden_state.float().sum().backward()  # training: compiles
training = time.perf_counter() - started
started = time.perf_counter()
with torch.inference_mode():
    encoder(input_ids=ids, attention_mask=mask)  # inference: compiles again (another grad mode)
inference = time.perf_counter() - started
print(json.dumps({"scope": scope, "training_first_call_s": round(training, 1),
                  "inference_first_call_s": round(inference, 1), "torch": torch.__version__}))  # fmt: skip
