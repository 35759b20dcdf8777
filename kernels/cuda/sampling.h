#pragma once
// Greedy and top-k token choice on the GPU, so a forward hands back token ids (and a few
// probabilities) instead of its (rows, vocab) f32 logits. Host-callable from plain C++: no CUDA
// headers here. Every launch is asynchronous on `stream`; callers check cudaGetLastError.
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace specula::cuda {

// The most tokens top_k_softmax_row returns.
inline constexpr int kTopKMax = 64;

// out[r] = the lowest index of the largest value of row r of logits ((rows, vocab) f32,
// row-major), as kernels/cpu/activation.h argmax_f32 and std::max_element: NaN never wins, and a
// row whose first value is NaN (or that has no other value) gives 0. One CTA per row.
void argmax_rows(const float* logits, int64_t rows, int64_t vocab, int32_t* out, cudaStream_t stream);

// The k most probable tokens of softmax(row / temperature) (temperature > 0, 1 <= k <= kTopKMax,
// k <= vocab): ids[j] by falling logit, ties lower index first (NaN and -inf never listed while
// another value is left); probs[j] = exp((row[ids[j]] - max) / temperature) / the sum of that over
// the row (NaN and -inf count 0), in double, rounded to float. A row without a value above -inf
// gives ids[0] = its argmax with probability 1 and the rest probability 0. One CTA.
void top_k_softmax_row(const float* row, int64_t vocab, int k, float temperature, int32_t* ids, float* probs,
                       cudaStream_t stream);

}  // namespace specula::cuda
