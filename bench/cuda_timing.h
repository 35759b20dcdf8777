#pragma once
// What the GPU bench mains share: a CUDA call that must succeed (else the bench says which call
// failed and exits 1), the median of CUDA-event timings of a body (one call or a batch of
// calls), the device as the results JSON names it, and the copy-bandwidth ceiling measured in
// the same run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_info.h"
#include "kernels/cuda/device.h"

namespace specula::bench {

// The bench's name, for its error lines; each bench main defines it.
extern const char* const kBenchName;

inline void check_cuda(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s: %s\n", kBenchName, call, cudaGetErrorString(error));
  std::exit(1);
}

// A kernel entry point that returned false: the bench's error line with its message, exit 1.
inline void check_ok(bool ok, const std::string& error) {
  if (ok) return;
  std::fprintf(stderr, "%s: %s\n", kBenchName, error.c_str());
  std::exit(1);
}

// Bytes a sparse tree-attention call must read, as bench_attention and bench_union_replay count
// them: K and V of every listed block (kv_block_bytes each), once per kv head for `unique`, once
// per list entry for `loaded`; the lists (12 B an entry: block id and member mask, 4 B a list's
// count); and io_bytes (queries, outputs, ancestor masks).
struct SparseReadBytes {
  double unique, loaded, lists;  // lists: the list bytes alone (in both totals)
};
inline SparseReadBytes sparse_read_bytes(double blocks_unique, double blocks_loaded, double lists,
                                         double kv_block_bytes, double io_bytes) {
  const double list_bytes = blocks_loaded * 12.0 + lists * 4.0;
  return {blocks_unique * 2 * kv_block_bytes + list_bytes + io_bytes,
          blocks_loaded * 2 * kv_block_bytes + list_bytes + io_bytes, list_bytes};
}

}  // namespace specula::bench

#define CHECK_CUDA(call) ::specula::bench::check_cuda((call), #call)

namespace specula::bench {

// Median of `repeats` batch timings (ms per call, CUDA events on the default stream): a batch is
// `calls` back-to-back calls of body(r * calls + i) between two events, divided by `calls`;
// after 3 untimed warm-up calls. With calls > 1 a call's launch and prologue may overlap the
// previous call's tail (programmatic dependent launch): the kernels' throughput, without the
// per-call launch latency that one call a batch includes.
template <class F>
double batched_ms(F&& body, int calls, int repeats) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) body(i);
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> t;
  for (int r = 0; r < repeats; ++r) {
    CHECK_CUDA(cudaEventRecord(a));
    for (int i = 0; i < calls; ++i) body(r * calls + i);
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms / static_cast<float>(calls));
  }
  CHECK_CUDA(cudaGetLastError());
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t[t.size() / 2];
}

// Median of `iterations` single-call timings of body(i) (ms), after 3 untimed warm-up calls.
template <class F>
double median_ms(F&& body, int iterations) {
  return batched_ms(body, 1, iterations);
}

// A device buffer of at least `bytes` (256 when asked for none), never freed: the bench exits.
inline void* dalloc(size_t bytes) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
  return p;
}

// GPU 0 as every results file names it (name, compute capability, SMs, driver, runtime).
inline nlohmann::json device_json() {
  cuda::DeviceInfo dev;
  cuda::device_info(0, &dev);
  return {{"name", dev.name},
          {"sm", std::to_string(dev.sm_major) + std::to_string(dev.sm_minor)},
          {"multiprocessors", dev.multiprocessors},
          {"driver", nvidia_driver()},
          {"runtime_version", dev.runtime_version}};
}

// Device-to-device copy bandwidth over a buffer of `bytes` (20 timed copies), by cudaMemcpy and by
// a copy kernel; the ceiling is the faster. A failure is the bench's error line and exit 1.
struct CopyCeiling {
  double memcpy_GBps = 0, kernel_GBps = 0;
  double GBps() const { return std::max(memcpy_GBps, kernel_GBps); }
  nlohmann::json json() const {
    return {{"copy_bandwidth_GBps", GBps()}, {"copy_memcpy_GBps", memcpy_GBps}, {"copy_kernel_GBps", kernel_GBps}};
  }
};
inline CopyCeiling measure_copy_ceiling(uint64_t bytes) {
  cuda::CopyBandwidth memcpy_bw, kernel_bw;
  std::string error;
  if (!cuda::measure_copy_bandwidth(bytes, 20, &memcpy_bw, &error) ||
      !cuda::measure_kernel_copy_bandwidth(bytes, 20, &kernel_bw, &error)) {
    std::fprintf(stderr, "%s: %s\n", kBenchName, error.c_str());
    std::exit(1);
  }
  return {memcpy_bw.bytes_per_s / 1e9, kernel_bw.bytes_per_s / 1e9};
}

}  // namespace specula::bench
