#include "kernels/cuda/device.h"

#include <cuda_runtime.h>

namespace specula::cuda {
namespace {

bool check(cudaError_t status, const char* what, std::string* error) {
  if (status == cudaSuccess) return true;
  if (error) *error = std::string(what) + ": " + cudaGetErrorString(status);
  return false;
}

// One float4 per thread per iteration, grid-stride: the plain streaming copy.
__global__ void copy_float4(const float4* __restrict__ src, float4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

template <class CopyFn>
bool time_copies(uint64_t bytes, int iterations, CopyBandwidth* out, std::string* error, CopyFn copy) {
  void* src = nullptr;
  void* dst = nullptr;
  cudaEvent_t start{}, stop{};
  bool ok = check(cudaMalloc(&src, bytes), "cudaMalloc(src)", error) &&
            check(cudaMalloc(&dst, bytes), "cudaMalloc(dst)", error) &&
            check(cudaMemset(src, 1, bytes), "cudaMemset", error) &&
            check(cudaEventCreate(&start), "cudaEventCreate", error) &&
            check(cudaEventCreate(&stop), "cudaEventCreate", error);
  float ms = 0;
  if (ok) {
    copy(src, dst, bytes);  // warm-up
    ok = check(cudaDeviceSynchronize(), "warm-up copy", error) && check(cudaEventRecord(start), "record", error);
    for (int i = 0; ok && i < iterations; ++i) copy(src, dst, bytes);
    ok = ok && check(cudaEventRecord(stop), "record", error) && check(cudaEventSynchronize(stop), "sync", error) &&
         check(cudaEventElapsedTime(&ms, start, stop), "elapsed", error) &&
         check(cudaGetLastError(), "copy", error);
  }
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  cudaFree(src);
  cudaFree(dst);
  if (!ok) return false;
  out->buffer_bytes = bytes;
  out->iterations = iterations;
  out->seconds_per_copy = ms / 1e3 / iterations;
  out->bytes_per_s = 2.0 * static_cast<double>(bytes) / out->seconds_per_copy;
  return true;
}

}  // namespace

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" status
    return 0;
  }
  return count;
}

std::string no_device_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess) return count > 0 ? "" : "no CUDA-capable device";
  cudaGetLastError();
  return cudaGetErrorString(status);
}

bool device_info(int index, DeviceInfo* out) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return false;
  out->index = index;
  out->name = prop.name;
  out->sm_major = prop.major;
  out->sm_minor = prop.minor;
  out->multiprocessors = prop.multiProcessorCount;
  out->global_memory_bytes = prop.totalGlobalMem;
  cudaDriverGetVersion(&out->driver_version);
  cudaRuntimeGetVersion(&out->runtime_version);
  return true;
}

bool measure_copy_bandwidth(uint64_t bytes, int iterations, CopyBandwidth* out, std::string* error) {
  return time_copies(bytes, iterations, out, error, [](void* src, void* dst, uint64_t n) {
    cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice);
  });
}

bool measure_kernel_copy_bandwidth(uint64_t bytes, int iterations, CopyBandwidth* out, std::string* error) {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  bytes -= bytes % sizeof(float4);
  return time_copies(bytes, iterations, out, error, [sms](void* src, void* dst, uint64_t n) {
    copy_float4<<<sms * 8, 512>>>(static_cast<const float4*>(src), static_cast<float4*>(dst), n / sizeof(float4));
  });
}

}  // namespace specula::cuda
