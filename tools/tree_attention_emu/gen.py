#!/usr/bin/env python3
"""Copies the kernels of kernels/cuda/tree_attention.cu (KernelArgs through the merge kernel) into
<out>/kernels.inc for the host emulation in emu.cpp: shared memory becomes a pointer, the CUDA
attributes go. The wrappers (cp.async, mma, ldmatrix, PDL) are emu.cpp's own."""
import re
import sys

root, out = sys.argv[1], sys.argv[2]
src = open(f"{root}/kernels/cuda/tree_attention.cu").read()
region = src[src.index("struct KernelArgs {"):src.index("// One compiled configuration of the chunk kernel.")]
# The wgmma / warp-specialized tiers (their own headers, included at the end of the region) are
# not emulated: they need TMA, mbarriers and wgmma.
region = re.sub(r'#include "kernels/cuda/tree_attention_w[a-z]*\.cuh".*\n', "", region)
region = region.replace("extern __shared__ __align__(16) unsigned char smem_raw[];",
                        "unsigned char* smem_raw = emu::smem;")
region = re.sub(r"__global__ void __launch_bounds__\([^)]*\)\s*", "void ", region)
if "__global__" in region or "asm" in region:
    sys.exit("gen.py: unexpected CUDA construct left in the kernels; update the transformation")
# mma_sync.cuh's softmax row helpers (plain arithmetic; the header's MMA wrappers are emu.cpp's own).
helpers = open(f"{root}/kernels/cuda/mma_sync.cuh").read()
first = helpers.index("template <int N>\n__device__ __forceinline__ float row_max")
last = helpers.index("\n}\n", helpers.index("__device__ __forceinline__ float exp_row")) + 3
region = helpers[first:last] + "\n" + region
open(f"{out}/kernels.inc", "w").write(region)
