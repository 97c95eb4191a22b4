#!/bin/sh
# The SDPA subclasses under bfloat16 autocast on CPU (float32 layers: what `gpu_bench --dtype bf16` and CPU mixed
# precision run), where `auto` decided by the float32 rule; and bfloat16 inference at batch 1 to 1024 keys, where
# attention_classes_bf16.txt left BERT's 512 slower. Two lanes, one thread each (2-core machine).
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 PYTHONPATH=$PWD
D=gpu_bench/results/cpu-2026-11-28
B="python benchmarks/bench_attention_lengths.py --heads 12 --head-dim 64"
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
A="--autocast --dtypes float32 --lengths 16,32,64,128,256,512"
sweep $D/attention_classes_autocast_a.txt "
--kernel bert_self_attention --batch 1 $A --modes infer,train
--kernel bert_self_attention --batch 4 $A --modes infer,train
--kernel gpt2_attention --batch 1 $A --modes infer,train
--kernel gpt2_attention --batch 4 $A --modes infer" &
sweep $D/attention_classes_autocast_b.txt "
--kernel bart_attention --batch 1 $A --modes infer,train
--kernel bart_attention --batch 4 $A --modes infer
--kernel gpt2_attention --batch 4 $A --modes train
--kernel bert_self_attention --batch 1 --dtypes bfloat16 --modes infer --lengths 512,768,1024
--kernel t5_attention --batch 1 --dtypes bfloat16 --modes infer --lengths 512,768,1024
--kernel gpt2_attention --batch 1 --dtypes bfloat16 --modes infer --lengths 512,768,1024
--kernel bart_attention --batch 1 --dtypes bfloat16 --modes infer --lengths 512,768,1024" &
wait
