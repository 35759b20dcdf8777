#pragma once
// Elementwise activations and softmax.
#include <cstdint>

namespace specula {

// out[i] = silu(gate[i]) · up[i], silu(g) = g / (1 + e^-g).   (gate, up, out: (n))
void swiglu(const float* gate, const float* up, float* out, int64_t n);
// In place: x = softmax(x) over n values. -inf entries become 0. Returns the row's max.
float softmax(float* x, int64_t n);
// y[i] = e^x[i] (vectorized, ~2 ulp).
void exp_inplace(float* x, int64_t n);

// Dot product and y += a·x over n floats (vectorized helpers for attention).
float dot_f32(const float* a, const float* b, int64_t n);
void axpy_f32(float a, const float* x, float* y, int64_t n);
// The first index of the largest of x[0..n) (n > 0), as a scan keeping the first strictly larger
// value finds it; NaNs are skipped (a NaN at 0 gives 0). Vectorized: greedy verification takes
// one per verified row over a 49152-entry vocabulary.
int64_t argmax_f32(const float* x, int64_t n);

}  // namespace specula
