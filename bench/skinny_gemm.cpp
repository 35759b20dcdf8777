// The projections of a decode or verify step, T = 1..64 rows: our skinny kernel (bf16 weights,
// f32 activations; kernels/cuda/skinny_gemm.h) against cuBLAS's bf16 GEMM on the same weights
// (activations rounded to bf16 first, as the CUDA backend does for prefill), side by side in one
// run, with the measured copy bandwidth as the ceiling. Bytes counted: the weights once, X and Y.
// Shapes: bench/gemm_bench.h (SmolLM2-135M's, Llama-3.1-8B's and OLMoE's; the large ones
// on random weights: timing only, and the output says so).
#include <CLI/CLI.hpp>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_info.h"
#include "bench/gemm_bench.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/skinny_gemm.h"

namespace {

#define CHECK_CUDA(call)                                                                  \
  do {                                                                                    \
    const cudaError_t e_ = (call);                                                        \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "bench_skinny_gemm: %s: %s\n", #call, cudaGetErrorString(e_)); \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  std::string commit = "unknown", out_path;
  int iterations = 50;
  std::vector<int64_t> rows = {1, 2, 4, 8, 12, 16, 32, 64};
  std::string only_model;
  int outputs_per_warp = 0, row_group = 0;
  CLI::App app{"bench_skinny_gemm: decode/verify projections, skinny kernel vs cuBLAS bf16 GEMM"};
  app.add_option("--commit", commit);
  app.add_option("--out", out_path);
  app.add_option("--iterations", iterations)->check(CLI::Range(1, 100000));
  app.add_option("--rows", rows, "row counts T to time (default 1 2 4 8 12 16 32 64)")
      ->check(CLI::Range(int64_t{1}, specula::cuda::kSkinnyMaxRows));
  app.add_option("--model", only_model, "only the shapes whose model name starts with this (e.g. SmolLM2)");
  app.add_option("--outputs-per-warp", outputs_per_warp,
                 "multi-row kernel's output columns per warp (1, 2, 4; 0: chosen by shape; -1: no staged X)")
      ->check(CLI::IsMember({-1, 0, 1, 2, 4}));
  app.add_option("--row-group", row_group, "register kernel's rows per block (4, 8; -1: all; 0: chosen by rows)")
      ->check(CLI::IsMember({-1, 0, 4, 8}));
  CLI11_PARSE(app, argc, argv);
  using namespace specula;
  cuda::set_skinny_outputs_per_warp(outputs_per_warp);
  cuda::set_skinny_row_group(row_group);
  bench::GemmBenchRig rig;
  if (const auto rc = rig.open("bench_skinny_gemm")) return *rc;
  const auto& shapes = bench::projection_shapes();
  const auto& copy = rig.copy;
  cudaStream_t stream = rig.stream;
  cublasHandle_t cublas = rig.cublas;
  cudaEvent_t start = rig.start, stop = rig.stop;
  nlohmann::json results = nlohmann::json::array();
  for (const auto& s : shapes) {
    if (std::string(s.model).rfind(only_model, 0) != 0) continue;
    uint16_t* w = nullptr;
    float *x = nullptr, *y = nullptr, *gamma = nullptr;
    uint16_t* xb = nullptr;
    const int64_t max_T = *std::max_element(rows.begin(), rows.end());
    CHECK_CUDA(cudaMalloc(&w, s.N * s.K * 2));
    CHECK_CUDA(cudaMalloc(&x, max_T * s.K * 4));
    CHECK_CUDA(cudaMalloc(&xb, max_T * s.K * 2));
    CHECK_CUDA(cudaMalloc(&y, max_T * s.N * 4));
    CHECK_CUDA(cudaMalloc(&gamma, s.K * 4));
    cuda::fill_f32(gamma, s.K, 1.0f, stream);
    cuda::fill_uniform_bf16(w, s.N * s.K, 1, 0.05f, stream);
    cuda::fill_f32(x, max_T * s.K, 0.5f, stream);
    for (int64_t T : rows) {
      auto time_ms = [&](auto&& fn) {
        fn();  // warm-up
        cudaEventRecord(start, stream);
        for (int i = 0; i < iterations; ++i) fn();
        cudaEventRecord(stop, stream);
        cudaEventSynchronize(stop);
        float ms = 0;
        cudaEventElapsedTime(&ms, start, stop);
        return static_cast<double>(ms) / iterations;
      };
      const double skinny_ms = time_ms([&] { cuda::skinny_gemm(w, s.N, s.K, x, s.K, T, y, s.N, false, stream); });
      // The fused kernel the CUDA backend runs at this shape where the skinny kernel pays: RMSNorm
      // + QKV, RMSNorm + gate_up + SwiGLU (N/2 outputs), RMSNorm + lm_head; down and o accumulate.
      const std::string proj = s.name;
      const bool normed = proj != "down" && proj != "o";
      auto fused = [&] {
        if (proj == "gate_up") {
          cuda::skinny_gemm_norm_swiglu(w, s.N / 2, s.K, x, s.K, T, gamma, 1e-5f, y, s.N / 2, stream);
        } else if (!normed) {
          cuda::skinny_gemm(w, s.N, s.K, x, s.K, T, y, s.N, true, stream);
        } else {
          cuda::skinny_gemm_norm(w, s.N, s.K, x, s.K, T, gamma, 1e-5f, y, s.N, stream);
        }
      };
      const double fused_ms = time_ms(fused);
      // One row normed: the same fused product with each warp staging its own x ⊙ gamma (the
      // kernel before session 17's skinny_norm_row_kernel), side by side.
      double fused_register_ms = 0.0;
      if (T == 1 && normed) {
        cuda::set_skinny_norm_row_staged(false);
        fused_register_ms = time_ms(fused);
        cuda::set_skinny_norm_row_staged(true);
      }
      // The tensor-core path (1..16 rows; X split into bf16 hi + lo in the kernel).
      const bool tc = T <= cuda::kSkinnyTcMaxRows;
      const double tc_ms =
          tc ? time_ms([&] { cuda::skinny_gemm_tc(w, s.N, s.K, x, s.K, T, y, s.N, false, stream); }) : 0.0;
      const float alpha = 1, beta = 0;
      const double cublas_ms = time_ms([&] {
        cuda::f32_to_bf16(x, T * s.K, xb, stream);
        cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(s.N), int(T), int(s.K), &alpha, w, CUDA_R_16BF, int(s.K), xb,
                     CUDA_R_16BF, int(s.K), &beta, y, CUDA_R_32F, int(s.N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      });
      CHECK_CUDA(cudaGetLastError());
      const double bytes = double(s.N * s.K * 2 + T * s.K * 4 + T * s.N * 4);
      const double skinny_gbps = bytes / (skinny_ms * 1e-3) / 1e9, cublas_gbps = bytes / (cublas_ms * 1e-3) / 1e9;
      results.push_back({{"model", s.model},
                         {"projection", s.name},
                         {"N", s.N},
                         {"K", s.K},
                         {"rows", T},
                         {"skinny_us", skinny_ms * 1e3},
                         {"cublas_bf16_us", cublas_ms * 1e3},
                         {"skinny_GBps", skinny_gbps},
                         {"cublas_GBps", cublas_gbps},
                         {"skinny_fraction_of_copy", skinny_gbps * 1e9 / copy.bytes_per_s},
                         {"skinny_over_cublas_speed", cublas_ms / skinny_ms},
                         {"fused_us", fused_ms * 1e3},
                         {"fused_kernel", proj == "gate_up" ? "norm_swiglu"
                                          : normed          ? "norm"
                                                            : "accumulate"}});
      if (fused_register_ms > 0.0) results.back()["fused_unstaged_us"] = fused_register_ms * 1e3;
      if (tc) {
        results.back()["tensor_core_us"] = tc_ms * 1e3;
        results.back()["tensor_core_GBps"] = bytes / (tc_ms * 1e-3) / 1e9;
        results.back()["tensor_core_over_cublas_speed"] = cublas_ms / tc_ms;
      }
      std::printf(
          "%-26s %-8s T=%-3lld skinny %8.1f us (%6.0f GB/s)  fused %8.1f us (unstaged %6.1f)  tensor-core %8.1f us  "
          "cuBLAS %8.1f us (%6.0f GB/s)\n",
          s.model, s.name, static_cast<long long>(T), skinny_ms * 1e3, skinny_gbps, fused_ms * 1e3,
          fused_register_ms * 1e3, tc_ms * 1e3, cublas_ms * 1e3, cublas_gbps);
    }
    cudaFree(w);
    cudaFree(x);
    cudaFree(xb);
    cudaFree(y);
    cudaFree(gamma);
  }
  nlohmann::json out = {
      {"bench", "skinny_gemm"},
      {"date", bench::utc_now()},
      {"device", rig.device_json()},
      {"host", bench::host_info()},
      {"commit", commit},
      {"command", bench::command_line(argc, argv)},
      {"outputs_per_warp", outputs_per_warp},
      {"row_group", row_group},
      {"weights", "random bf16 (timing only: synthetic)"},
      {"bytes_counted", "weights once (N*K*2) + X (T*K*4) + Y (T*N*4)"},
      {"copy_bandwidth_GBps", copy.bytes_per_s / 1e9},
      {"results", results},
  };
  if (!out_path.empty()) std::ofstream(out_path) << out.dump(2) << "\n";
  return 0;
}
