#pragma once
// What the GEMM benches (bench_skinny_gemm, bench_verify_gemm) share: the projection shapes they
// time and the rig they time them on. The shapes: SmolLM2-135M's
// fused projections and lm_head, Llama-3.1-8B's, and the attention side and router of a
// 2048-wide MoE model (OLMoE-1B-7B; Qwen1.5-MoE-A2.7B has the same qkv and o, 60 experts, and a
// 151936-row lm_head). The large ones run on random weights: timing only, and the model names
// say "synthetic".
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_info.h"
#include "kernels/cuda/device.h"

namespace specula::bench {

struct ProjectionShape {
  const char* model;
  const char* name;
  int64_t N, K;  // W is (N, K)
};

inline const std::vector<ProjectionShape>& projection_shapes() {
  static const std::vector<ProjectionShape> shapes = {
      {"SmolLM2-135M", "qkv", 960, 576},
      {"SmolLM2-135M", "gate_up", 3072, 576},
      {"SmolLM2-135M", "down", 576, 1536},
      {"SmolLM2-135M", "lm_head", 49152, 576},
      {"llama-3.1-8b (synthetic)", "qkv", 6144, 4096},
      {"llama-3.1-8b (synthetic)", "o", 4096, 4096},
      {"llama-3.1-8b (synthetic)", "gate_up", 28672, 4096},
      {"llama-3.1-8b (synthetic)", "down", 4096, 14336},
      {"llama-3.1-8b (synthetic)", "lm_head", 128256, 4096},
      {"olmoe-1b-7b (synthetic)", "qkv", 6144, 2048},
      {"olmoe-1b-7b (synthetic)", "o", 2048, 2048},
      {"olmoe-1b-7b (synthetic)", "router", 64, 2048},
      {"olmoe-1b-7b (synthetic)", "lm_head", 50304, 2048},
  };
  return shapes;
}

// The GPU check, the device's facts, the measured copy bandwidth (the ceiling the results are
// fractions of), a cuBLAS handle on the bench's stream, and two timing events.
struct GemmBenchRig {
  cuda::DeviceInfo dev;
  cuda::CopyBandwidth copy;
  cublasHandle_t cublas = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;

  GemmBenchRig() = default;
  GemmBenchRig(const GemmBenchRig&) = delete;
  GemmBenchRig& operator=(const GemmBenchRig&) = delete;
  ~GemmBenchRig() {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (cublas) cublasDestroy(cublas);
    if (stream) cudaStreamDestroy(stream);
  }

  // Empty when ready; else the exit code, with the reason printed under `bench`'s name (0 without
  // a GPU: a visible skip, not a failure).
  std::optional<int> open(const char* bench) {
    if (cuda::device_count() == 0) {
      std::fprintf(stderr, "%s: skipped: no GPU (%s)\n", bench, cuda::no_device_reason().c_str());
      return 0;
    }
    cuda::device_info(0, &dev);
    std::string error;
    if (!cuda::measure_copy_bandwidth(1ull << 30, 20, &copy, &error)) {
      std::fprintf(stderr, "%s: %s\n", bench, error.c_str());
      return 1;
    }
    const char* failed = cudaStreamCreate(&stream) != cudaSuccess         ? "cudaStreamCreate"
                         : cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS ? "cublasCreate"
                         : cudaEventCreate(&start) != cudaSuccess         ? "cudaEventCreate"
                         : cudaEventCreate(&stop) != cudaSuccess          ? "cudaEventCreate"
                                                                          : nullptr;
    if (failed) {
      std::fprintf(stderr, "%s: %s failed\n", bench, failed);
      return 1;
    }
    cublasSetStream(cublas, stream);
    return std::nullopt;
  }

  // The results file's "device" entry.
  nlohmann::json device_json() const {
    return {{"name", dev.name},
            {"sm", std::to_string(dev.sm_major) + std::to_string(dev.sm_minor)},
            {"driver", nvidia_driver()},
            {"runtime_version", dev.runtime_version}};
  }
};

}  // namespace specula::bench
