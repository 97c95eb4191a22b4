#!/bin/sh
# LLaMA's rules (ADP004, ADP009, ADP011-ADP013) on CPU at a published LLaMA-architecture size: SmolLM-135M's
# shapes (the suite's smollm), batch 4 at 128 tokens like the other text models of run_cpu_realistic.sh, with the
# equivalence check; TinyLlama (the suite's llama) needs ~18 GB of training state per model, two models at once.
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 PYTHONPATH=$PWD
D=gpu_bench/results/cpu-2026-11-28
name=smollm-b4-s128
echo "commit $(git rev-parse --short HEAD)"
start="$(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
python -m gpu_bench --size base --device cpu --interleave --warmup 1 --repeats 9 --batch-size 4 --seq-len 128 \
    --models smollm --out "$D/$name" > "$D/$name.log" 2>&1
rc=$?
echo "$name: start $start, end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg), rc $rc"
