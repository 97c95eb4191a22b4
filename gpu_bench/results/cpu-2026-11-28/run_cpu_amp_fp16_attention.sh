#!/bin/sh
# The attention rules with float32 layers under float16 autocast at model level (gpu_bench --dtype amp-fp16),
# inference (a float16-autocast training step takes many seconds on this CPU): each rule timed call by call against a
# vanilla twin (A/A control on the vanilla row), batch 4 x 64 tokens (4x12x64x64 scores: SDPA in inference and in the
# equivalence check's gradient passes). Two lanes, one thread each: BERT-base and BART-base in one, T5-base in the
# other. GPT-2 left out: its Conv1D projections (float16 addmm under autocast) take most of its time on this CPU.
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 PYTHONPATH=$PWD
D=gpu_bench/results/cpu-2026-11-28
B="python -m gpu_bench --size base --device cpu --dtype amp-fp16 --modes inference --interleave --warmup 1 --repeats 9 --batch-size 4 --seq-len 64"
echo "# commit $(git rev-parse --short HEAD)" > $D/amp-fp16-attention-b4-s64.log
echo "# commit $(git rev-parse --short HEAD)" > $D/amp-fp16-attention-b4-s64-t5.log
$B --models bert,bart --rules ADP001,ADP014 --out $D/amp-fp16-attention-b4-s64 >> $D/amp-fp16-attention-b4-s64.log 2>&1 &
$B --models t5 --rules ADP002 --out $D/amp-fp16-attention-b4-s64-t5 >> $D/amp-fp16-attention-b4-s64-t5.log 2>&1 &
wait
