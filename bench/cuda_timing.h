#pragma once
// What the GPU bench mains share: a CUDA call that must succeed (else the bench says which call
// failed and exits 1), and the median of CUDA-event timings of a body.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace specula::bench {

// The bench's name, for its error lines; each bench main defines it.
extern const char* const kBenchName;

inline void check_cuda(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s: %s\n", kBenchName, call, cudaGetErrorString(error));
  std::exit(1);
}

}  // namespace specula::bench

#define CHECK_CUDA(call) ::specula::bench::check_cuda((call), #call)

namespace specula::bench {

// Median of `iterations` timings (ms, CUDA events on the default stream) of body(i), after 3
// untimed warm-up calls.
template <class F>
double median_ms(F&& body, int iterations) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) body(i);
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> t;
  for (int i = 0; i < iterations; ++i) {
    CHECK_CUDA(cudaEventRecord(a));
    body(i);
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CHECK_CUDA(cudaGetLastError());
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t[t.size() / 2];
}

// A device buffer of at least `bytes` (256 when asked for none), never freed: the bench exits.
inline void* dalloc(size_t bytes) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
  return p;
}

}  // namespace specula::bench
