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

}  // namespace specula
