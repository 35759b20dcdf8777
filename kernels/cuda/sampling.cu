#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/sampling.h"

namespace specula::cuda {
namespace {

constexpr int kThreads = 1024;

// A candidate token: its logit and index; index < 0 = none yet.
struct Best {
  float value;
  int index;
};

// Whether (value, index) ranks before b: a larger value, or the same value at a lower index.
__device__ bool ranks_before(float value, int index, Best b) {
  return b.index < 0 || value > b.value || (value == b.value && index < b.index);
}

// The first token of row in the order (value falling, index rising) that ranks after
// (after_value, after_index), NaN skipped; after_index < 0: the first of all. Every thread gets
// the answer. Uses (and leaves reusable) the block's shared scratch.
__device__ Best block_best(const float* row, int64_t vocab, float after_value, int after_index) {
  __shared__ Best warp_best[kThreads / 32];
  __shared__ Best answer;
  Best mine{0.0f, -1};
  // Each thread's indices rise, so `>` alone keeps the lowest index of a tie.
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = row[i];
    if (v != v) continue;
    if (after_index >= 0 && !(v < after_value || (v == after_value && i > after_index))) continue;
    if (mine.index < 0 || v > mine.value) mine = {v, static_cast<int>(i)};
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float v = __shfl_down_sync(0xffffffffu, mine.value, offset);
    const int i = __shfl_down_sync(0xffffffffu, mine.index, offset);
    if (i >= 0 && ranks_before(v, i, mine)) mine = {v, i};
  }
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) warp_best[warp] = mine;
  __syncthreads();
  if (warp == 0) {
    mine = warp_best[lane];  // kThreads / 32 == 32 warps
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float v = __shfl_down_sync(0xffffffffu, mine.value, offset);
      const int i = __shfl_down_sync(0xffffffffu, mine.index, offset);
      if (i >= 0 && ranks_before(v, i, mine)) mine = {v, i};
    }
    if (lane == 0) answer = mine;
  }
  __syncthreads();
  const Best best = answer;
  __syncthreads();  // the next call may overwrite answer
  return best;
}

__device__ double block_sum(double x) {
  __shared__ double warp_sum[kThreads / 32];
  __shared__ double total;
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_down_sync(0xffffffffu, x, offset);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) warp_sum[warp] = x;
  __syncthreads();
  if (warp == 0) {
    x = warp_sum[lane];
    for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_down_sync(0xffffffffu, x, offset);
    if (lane == 0) total = x;
  }
  __syncthreads();
  const double sum = total;
  __syncthreads();
  return sum;
}

__global__ void __launch_bounds__(kThreads) argmax_rows_kernel(const float* logits, int64_t vocab, int32_t* out) {
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const Best best = block_best(row, vocab, 0.0f, -1);
  if (threadIdx.x == 0) {
    const float first = row[0];
    out[blockIdx.x] = first != first || best.index < 0 ? 0 : best.index;
  }
}

__global__ void __launch_bounds__(kThreads)
    top_k_softmax_kernel(const float* row, int64_t vocab, int k, float temperature, int32_t* ids, float* probs) {
  const float first = row[0];
  Best best = block_best(row, vocab, 0.0f, -1);
  if (first != first || best.index < 0 || !(best.value > -INFINITY)) {
    // No distribution: a point mass at the argmax (sampling_filters' rule).
    if (threadIdx.x == 0) {
      ids[0] = first != first || best.index < 0 ? 0 : best.index;
      probs[0] = 1.0f;
      for (int j = 1; j < k; ++j) {
        ids[j] = -1;
        probs[j] = 0.0f;
      }
    }
    return;
  }
  const double max_logit = best.value;
  const double inv_t = 1.0 / static_cast<double>(temperature);
  double part = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = row[i];
    if (v > -INFINITY) part += exp((static_cast<double>(v) - max_logit) * inv_t);
  }
  const double total = block_sum(part);
  for (int j = 0; j < k; ++j) {
    if (j > 0) best = block_best(row, vocab, best.value, best.index);
    if (threadIdx.x == 0) {
      ids[j] = best.index;
      probs[j] = best.index < 0 || !(best.value > -INFINITY)
                     ? 0.0f
                     : static_cast<float>(exp((static_cast<double>(best.value) - max_logit) * inv_t) / total);
    }
    if (best.index < 0) {  // only NaN left: the rest stay empty
      if (threadIdx.x == 0) {
        for (int r = j + 1; r < k; ++r) {
          ids[r] = -1;
          probs[r] = 0.0f;
        }
      }
      return;
    }
  }
}

}  // namespace

void argmax_rows(const float* logits, int64_t rows, int64_t vocab, int32_t* out, cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return;
  argmax_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, vocab, out);
}

void top_k_softmax_row(const float* row, int64_t vocab, int k, float temperature, int32_t* ids, float* probs,
                       cudaStream_t stream) {
  if (vocab <= 0 || k < 1 || k > kTopKMax) return;
  top_k_softmax_kernel<<<1, kThreads, 0, stream>>>(row, vocab, k, temperature, ids, probs);
}

}  // namespace specula::cuda
