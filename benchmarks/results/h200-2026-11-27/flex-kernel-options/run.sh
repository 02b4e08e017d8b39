#!/bin/bash
# one call: setup, then every variant in parallel (timed sections serialised by a lock)
bash .ci/gpu-step setup > /tmp/setup.log 2>&1 || { tail -30 /tmp/setup.log; exit 1; }
export PYTHONPATH="/tmp/site:src" PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=2
mkdir -p /tmp/diaglogs
for case in "learned base" "alibi base" "shaw nocast" "shaw s1" "shaw s2" "shaw bwd1" "t5 nocast" "t5 s1" "t5 fwd2bwd1"; do
  timeout 150 python3 diag/flex_smem.py $case 512 > /tmp/diaglogs/${case// /-}.txt 2>&1 &
done
wait
tar czf $OUT/logs.tgz -C /tmp diaglogs
cat $OUT/diag.jsonl
