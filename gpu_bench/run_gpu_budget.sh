#!/bin/sh
# run_gpu.sh's work inside a fixed time budget (a short GPU lease, a spot instance), from the repository root:
#
#     BUDGET=540 sh gpu_bench/run_gpu_budget.sh
#
# Each step runs under `timeout` with at most its own cap and never past the budget; what a step finished is kept
# (gpu_bench rewrites its results after every model, marking the run incomplete). In order of value:
#   kernel-tests.txt        the kernel tests, Triton kernels on the GPU
#   bench_kernels.txt       every kernel's fast backend against the original computation (small, base, large)
#   attention_lengths.txt   ADP010's SDPA against the hand-written core from 128 to 1024 keys (where it starts to pay)
#   attention_lengths_einsum.txt  the same for cores written with torch.einsum (vit-pytorch), 128, 512, 1024 keys
#   base-fp32/, base-bf16/  the base-size suite, eager (no compile anchors), the models of MODELS (all but llama
#                           and vilt), those where rules pay first; bf16 timed in alternation with vanilla (--interleave)
#   compile-bf16/           bf16 again with the torch.compile anchors, for the models in COMPILE_MODELS
#   commands.txt            the exact commands, each step's exit status and the seconds spent so far
# llama (TinyLlama-1.1B shapes) is left out: its ~14 builds at 1.1B parameters do not fit a short budget (smollm,
# last in MODELS, runs its rules at 135M); run `python -m gpu_bench --size base --models llama` for it (and `--models vilt`, a CPU-sized ADP010 check). DEVICE=cpu SIZE=tiny is a dry run without a GPU.
set -u
PYTHON=${PYTHON:-python}
BUDGET=${BUDGET:-540}
DEVICE=${DEVICE:-cuda}
SIZE=${SIZE:-base}
MODELS=${MODELS:-gpt2,bert,bart,nanogpt,vit_einsum,gpt_neo,t5,resnet,dpt,groupvit,smollm}
COMPILE_MODELS=${COMPILE_MODELS:-bert,gpt2,nanogpt,resnet}
start=$(date +%s)
name=$($PYTHON -c "import torch, sys; cuda = torch.cuda.is_available(); \
sys.exit('no CUDA device') if sys.argv[1] == 'cuda' and not cuda else None; \
print(torch.cuda.get_device_name(0).replace('NVIDIA ', '').replace(' ', '-').lower() if cuda else 'cpu')" "$DEVICE") \
    || exit 1
out=${RESULTS:-gpu_bench/results/${name}-$(date -u +%Y-%m-%d)}
mkdir -p "$out"
{ echo "# $(date -u) $(uname -a)"; $PYTHON -c "import torch; print('torch', torch.__version__, 'cuda', \
torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-')"; \
  echo "# budget ${BUDGET} s; load: $(cat /proc/loadavg 2>/dev/null || true)"; } > "$out/commands.txt"

# step CAP FILE COMMAND...: run COMMAND with its output in FILE, for at most CAP seconds and what is left.
step() {
    cap=$1 file=$2
    shift 2
    limit=$((BUDGET - ($(date +%s) - start)))
    [ "$limit" -gt "$cap" ] && limit=$cap
    if [ "$limit" -lt 20 ]; then
        echo "# skipped, budget spent: $*" >> "$out/commands.txt"
        return
    fi
    echo "\$ timeout $limit $* > $file" >> "$out/commands.txt"
    timeout "$limit" "$@" > "$out/$file" 2>&1
    echo "# exit $? at $(($(date +%s) - start)) s" >> "$out/commands.txt"
}

step 150 kernel-tests.txt $PYTHON -m pytest tests/kernels -q -rs -p no:cacheprovider
step 180 bench_kernels.txt $PYTHON benchmarks/bench_kernels.py --device "$DEVICE" --repeats 11 --min-time 0.01
step 60 attention_lengths.txt $PYTHON benchmarks/bench_attention_lengths.py --device "$DEVICE" --batch 8 \
    --dtypes float32,bfloat16 --modes infer,train --lengths 128,256,384,512,768,1024 --repeats 11 --min-time 0.01
step 45 attention_lengths_einsum.txt $PYTHON benchmarks/bench_attention_lengths.py --device "$DEVICE" --batch 8 \
    --dtypes float32,bfloat16 --modes infer,train --lengths 128,512,1024 --repeats 11 --min-time 0.01 --form einsum
# fp32 unpaired (it gives the peak-memory columns); bf16 paired call by call with a vanilla twin (--interleave),
# since two unpaired bf16 runs of BERT minutes apart disagreed far beyond their spreads on an H200.
step 120 base-fp32.log $PYTHON -m gpu_bench --size "$SIZE" --device "$DEVICE" --dtype fp32 --no-compile \
    --repeats 20 --models "$MODELS" --out "$out/base-fp32"
step 120 base-bf16.log $PYTHON -m gpu_bench --size "$SIZE" --device "$DEVICE" --dtype bf16 --no-compile \
    --interleave --repeats 20 --models "$MODELS" --out "$out/base-bf16"
step 600 compile-bf16.log $PYTHON -m gpu_bench --size "$SIZE" --device "$DEVICE" --dtype bf16 --compile \
    --models "$COMPILE_MODELS" --out "$out/compile-bf16"
echo "results in $out"
