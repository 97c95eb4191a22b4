#!/bin/sh
# The SDPA subclasses of transformers' attention classes (ADP001 BERT, ADP002 T5, ADP003 GPT-2, ADP014 BART) against
# the original classes over sequence lengths, at batch 1 and 4, where `auto` takes SDPA on CPU: float32 inference and
# training (BERT, GPT-2, BART) and bfloat16 inference (all four). Two lanes, one thread each (2-core machine).
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 PYTHONPATH=$PWD
D=gpu_bench/results/cpu-2026-11-28
B="python benchmarks/bench_attention_lengths.py --lengths 16,32,64,128,256,512 --heads 12 --head-dim 64"
sweep() {  # output file, then the runs' arguments, one run per line
    out=$1; shift
    echo "# commit $(git rev-parse --short HEAD)" > "$out"
    echo "$@" | while read -r args; do
        [ -n "$args" ] || continue
        echo "\$ $B $args" >> "$out"
        $B $args >> "$out" 2>&1
        echo >> "$out"
    done
}
runs_bf16=""
runs_fp32=""
for kernel in bert_self_attention t5_attention gpt2_attention bart_attention; do
    for batch in 1 4; do
        runs_bf16="$runs_bf16
--kernel $kernel --batch $batch --dtypes bfloat16 --modes infer"
        [ $kernel = t5_attention ] || runs_fp32="$runs_fp32
--kernel $kernel --batch $batch --dtypes float32 --modes infer,train"
    done
done
sweep $D/attention_classes_bf16.txt "$runs_bf16" &
sweep $D/attention_classes_fp32.txt "$runs_fp32" &
wait
