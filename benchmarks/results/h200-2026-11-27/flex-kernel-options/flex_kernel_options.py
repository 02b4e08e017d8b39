"""Slot-5 diagnostic: which change lets Shaw/T5 FlexAttention with dropout compile (bf16, head 64)."""
import fcntl, json, os, sys, time, traceback
import torch
from kolong.bench.arguments import EncoderBenchArguments
from kolong.bench.encoder import build_model, make_step
from kolong.models.encoder import flex, flex_dropout
from torch.nn.attention.flex_attention import flex_attention as _fa

scheme, variant, length = sys.argv[1], sys.argv[2], int(sys.argv[3])
opts = {"s1": {"num_stages": 1}, "s2": {"num_stages": 2},
        "bwd1": {"bwd_num_stages": 1}, "fwd2bwd1": {"fwd_num_stages": 2, "bwd_num_stages": 1}}.get(variant)
if opts:
    def fa(*a, **kw):
        kw["kernel_options"] = {**(kw.get("kernel_options") or {}), **opts}
        return _fa(*a, **kw)
    flex.flex_attention = fa
    flex_dropout.flex_attention = fa
if variant == "nocast":
    def nocast(function, q, k, v, *args):
        args = tuple(a.to(q.dtype) if isinstance(a, torch.Tensor) and a.requires_grad else a for a in args)
        compiled = flex._compiled.get(function)
        if compiled is None:
            compiled = flex._compiled[function] = torch.compile(function, dynamic=False)
        return compiled(q, k, v, *args)
    flex.flex_call = nocast
args = EncoderBenchArguments(device="cuda", dtype="bf16", attention_dropout=0.1, hidden_size=768, num_hidden_layers=3,
                             num_attention_heads=12, intermediate_size=3072, tokens_per_step=32768)
row = {"scheme": scheme, "variant": variant, "length": length}
try:
    model = build_model(scheme, args, length)
    step = make_step(model, args, length, training=True, name=scheme)
    t0 = time.time()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    row["warmup_s"] = round(time.time() - t0, 1)
    with open("/tmp/diag.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        times = []
        for _ in range(15):
            torch.cuda.synchronize(); t = time.perf_counter(); step(); torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        fcntl.flock(lock, fcntl.LOCK_UN)
    times.sort()
    row["ms"] = round(1000 * times[len(times) // 2], 2)
    row["tok_s"] = round(32768 / times[len(times) // 2])
except Exception as e:
    row["error"] = f"{type(e).__name__}: {str(e)[-300:]}"
print(json.dumps(row), flush=True)
with open(os.path.join(os.environ.get("OUT", "/tmp"), "diag.jsonl"), "a") as f:
    f.write(json.dumps(row) + "\n")
