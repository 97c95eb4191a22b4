#!/bin/sh
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 PYTHONPATH=$PWD
R=${R:-5}
echo "start $(date -u) load $(cat /proc/loadavg)"
python -m gpu_bench --size base --device cpu --models bert,gpt2 --batch-size 4 --seq-len 128 --warmup 1 --repeats $R --no-equivalence --out gpu_bench/results/cpu-2026-11-23/bert-gpt2-b4-s128
echo "mid $(date -u) load $(cat /proc/loadavg)"
python -m gpu_bench --size base --device cpu --models resnet --batch-size 8 --warmup 1 --repeats 7 --out gpu_bench/results/cpu-2026-11-23/resnet18-b8
echo "end $(date -u) load $(cat /proc/loadavg)"
