#!/bin/sh
# Issue 14, item 1, in one command on a CUDA machine (from the repository root):
#
#     sh gpu_bench/run_gpu.sh            # or: make bench-gpu
#
# Needs a CUDA build of torch plus `pip install -e '.[bench,triton]'` (keep your CUDA torch: do not install with
# constraints.txt, which pins the CPU wheel). Writes everything under gpu_bench/results/<gpu>-<date>/:
#   kernel-tests.txt     the kernel tests, Triton kernels on the GPU (tests/kernels, incl. test_kernel_triton.py)
#   bench_kernels.txt    every kernel's fast backend against the original computation, small to large shapes
#   bench_kernels_xformers.txt   the attention kernels with xformers forced (when installed)
#   attention_lengths.txt   ADP010's SDPA against the hand-written core from 128 to 2048 keys (where it starts to pay)
#   attention_lengths_einsum.txt   the same for cores written with torch.einsum (vit-pytorch)
#   base-fp32/, base-bf16/   python -m gpu_bench base-size suite with the torch.compile anchors
#   base-amp-fp16/       the same in float16 autocast with a gradient scaler (mixed precision without bfloat16)
#   commands.txt         the exact commands, environment and load
# Then copy the tables of base-*/results.md into README.md and commit the folder.
set -eu
PYTHON=${PYTHON:-python}
gpu=$($PYTHON -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; \
print(torch.cuda.get_device_name(0).replace('NVIDIA ', '').replace(' ', '-').lower())")
out=${OUT:-gpu_bench/results/${gpu}-$(date -u +%Y-%m-%d)}
mkdir -p "$out"
run() {
    echo "\$ $*" >> "$out/commands.txt"
    "$@"
}
{ echo "# $(date -u) $(uname -a)"; $PYTHON -c "import torch; print('torch', torch.__version__, 'cuda', \
torch.version.cuda, torch.cuda.get_device_name(0))"; echo "load: $(cat /proc/loadavg 2>/dev/null || true)"; } \
    > "$out/commands.txt"
run $PYTHON -m pytest tests/kernels -q -rs 2>&1 | tee "$out/kernel-tests.txt"
run $PYTHON benchmarks/bench_kernels.py --device cuda 2>&1 | tee "$out/bench_kernels.txt"
if $PYTHON -c "import xformers.ops" 2>/dev/null; then
    run $PYTHON benchmarks/bench_kernels.py --device cuda --kernels bert_self_attention,t5_attention,gpt2_attention \
        --force bert_self_attention=xformers,t5_attention=xformers,gpt2_attention=xformers \
        2>&1 | tee "$out/bench_kernels_xformers.txt"
fi
run $PYTHON benchmarks/bench_attention_lengths.py --device cuda --batch 8 --dtypes float32,bfloat16 \
    --modes infer,train --lengths 128,256,384,512,768,1024,2048 2>&1 | tee "$out/attention_lengths.txt"
run $PYTHON benchmarks/bench_attention_lengths.py --device cuda --batch 8 --dtypes float32,bfloat16 \
    --modes infer,train --lengths 128,256,384,512,768,1024,2048 --form einsum 2>&1 | tee "$out/attention_lengths_einsum.txt"
run $PYTHON -m gpu_bench --size base --device cuda --dtype fp32 --out "$out/base-fp32"
run $PYTHON -m gpu_bench --size base --device cuda --dtype bf16 --out "$out/base-bf16"
run $PYTHON -m gpu_bench --size base --device cuda --dtype amp-fp16 --out "$out/base-amp-fp16"
echo "results in $out"
