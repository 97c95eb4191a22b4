#!/bin/sh
# float32, where the SDPA subclasses run at every size on CPU: lengths between the powers of two of
# attention_classes_fp32.txt (attention_classes_repeat.txt found bfloat16 slower at 192 and 384 tokens where 256 and
# 512 were faster). Two lanes, one thread each.
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 PYTHONPATH=$PWD
D=gpu_bench/results/cpu-2026-11-28
B="python benchmarks/bench_attention_lengths.py --heads 12 --head-dim 64 --dtypes float32 --modes infer,train --lengths 48,96,192,384"
lane() {  # output file, then kernels
    out=$1; shift
    echo "# commit $(git rev-parse --short HEAD)" > "$out"
    for kernel in "$@"; do
        for batch in 1 4; do
            echo "\$ $B --kernel $kernel --batch $batch" >> "$out"
            $B --kernel $kernel --batch $batch 2>&1 | grep -v pytree >> "$out"
            echo >> "$out"
        done
    done
}
lane $D/attention_classes_fp32_odd_a.txt bert_self_attention gpt2_attention &
lane $D/attention_classes_fp32_odd_b.txt bart_attention &
wait
