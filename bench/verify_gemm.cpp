// The stacked split-halves GEMM of a verify step (2T bf16 rows: X's hi halves, then its lo
// halves) on our wgmma kernel (kernels/cuda/verify_gemm.h) against cuBLAS on the same weights,
// side by side in one run: cublasGemmEx's default algorithm and cuBLASLt with the best of its
// heuristic's candidates timed (LtGemm, what the CUDA backend runs for large matrices), with the
// measured copy bandwidth as the ceiling. Bytes counted: the weights once, X (2T·K bf16) and Y
// (2T·N f32). Shapes: bench/gemm_bench.h (the large ones on random weights:
// timing only, and the output says so). --sweep also times every forced split count.
#include <CLI/CLI.hpp>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_info.h"
#include "bench/gemm_bench.h"
#include "engine/backend/cuda_backend_impl.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/verify_gemm.h"

namespace {

#define CHECK_CUDA(call)                                                                  \
  do {                                                                                    \
    const cudaError_t e_ = (call);                                                        \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "bench_verify_gemm: %s: %s\n", #call, cudaGetErrorString(e_)); \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  std::string commit = "unknown", out_path, only_model, only_projection;
  int iterations = 50;
  bool sweep = false, pdl = true;
  std::vector<int64_t> rows = {9, 16, 17, 32, 44, 60, 64};
  CLI::App app{"bench_verify_gemm: a verify's stacked split-halves GEMM, wgmma kernel vs cuBLAS / cuBLASLt"};
  app.add_option("--commit", commit, "commit recorded in the JSON");
  app.add_option("--out", out_path, "JSON results file");
  app.add_option("--iterations", iterations, "timed launches a measurement")->check(CLI::Range(1, 100000));
  app.add_option("--rows", rows, "verify rows T (2T stacked rows; default 9 16 17 32 44 60 64)")
      ->check(CLI::Range(int64_t{1}, specula::cuda::kVerifyGemmMaxRows / 2));
  app.add_option("--model", only_model, "only the shapes whose model name starts with this (e.g. llama)");
  app.add_flag("--sweep", sweep, "also time every forced split count (1-8)");
  app.add_option("--projection", only_projection, "only the projections of this name (qkv, o, gate_up, down, lm_head)");
  app.add_option("--pdl", pdl, "programmatic dependent launch between the timed launches (default true)");
  CLI11_PARSE(app, argc, argv);
  using namespace specula;
  bench::GemmBenchRig rig;
  if (const auto rc = rig.open("bench_verify_gemm")) return *rc;
  cuda::set_programmatic_dependent_launch(pdl);
  const auto& shapes = bench::projection_shapes();
  const auto& copy = rig.copy;
  cudaStream_t stream = rig.stream;
  cublasHandle_t cublas = rig.cublas;
  cudaEvent_t start = rig.start, stop = rig.stop;
  LtGemm lt;
  nlohmann::json results = nlohmann::json::array();
  for (const auto& s : shapes) {
    if (std::string(s.model).rfind(only_model, 0) != 0) continue;
    if (!only_projection.empty() && only_projection != s.name) continue;
    const int64_t max_m = 2 * *std::max_element(rows.begin(), rows.end());
    uint16_t *w = nullptr, *x = nullptr;
    float *y = nullptr, *y_ref = nullptr;
    CHECK_CUDA(cudaMalloc(&w, s.N * s.K * 2));
    CHECK_CUDA(cudaMalloc(&x, max_m * s.K * 2));
    CHECK_CUDA(cudaMalloc(&y, max_m * s.N * 4));
    CHECK_CUDA(cudaMalloc(&y_ref, max_m * s.N * 4));
    cuda::fill_uniform_bf16(w, s.N * s.K, 1, 0.05f, stream);
    cuda::fill_uniform_bf16(x, max_m * s.K, 2, 1.0f, stream);
    for (const int64_t T : rows) {
      const int64_t M = 2 * T;
      // GPU time: `iterations` launches captured into one CUDA graph and replayed, so the host's
      // launch rate (cublasGemmEx and our launch path each cost microseconds) is not what is
      // timed; programmatic launches keep their edges in the graph. The first version of this
      // bench timed eager launches, which on SmolLM2's 1-6 us products measured the host.
      auto time_ms = [&](auto&& fn) {
        fn();  // warm-up eagerly (and cuBLASLt's timed pick, which a capture cannot hold)
        cudaStreamSynchronize(stream);
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return -1.0;
        for (int i = 0; i < iterations; ++i) fn();
        if (cudaStreamEndCapture(stream, &graph) != cudaSuccess || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)
          return -1.0;
        cudaGraphLaunch(exec, stream);  // warm
        cudaEventRecord(start, stream);
        cudaGraphLaunch(exec, stream);
        cudaEventRecord(stop, stream);
        cudaEventSynchronize(stop);
        float ms = 0;
        cudaEventElapsedTime(&ms, start, stop);
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        return static_cast<double>(ms) / iterations;
      };
      const float one = 1, zero = 0;
      const double cublas_ms = time_ms([&] {
        cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(s.N), int(M), int(s.K), &one, w, CUDA_R_16BF, int(s.K), x,
                     CUDA_R_16BF, int(s.K), &zero, y_ref, CUDA_R_32F, int(s.N), CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
      });
      bool lt_ok = true;
      const double lt_ms =
          time_ms([&] { lt_ok = lt_ok && static_cast<bool>(lt.run(w, s.N, s.K, x, M, y_ref, stream)); });
      bool ours_ok = true;
      const double ours_ms =
          time_ms([&] { ours_ok = ours_ok && cuda::verify_gemm(w, s.N, s.K, x, M, y, s.N, stream); });
      CHECK_CUDA(cudaStreamSynchronize(stream));
      CHECK_CUDA(cudaGetLastError());
      if (!ours_ok || !lt_ok || cublas_ms < 0 || lt_ms < 0 || ours_ms < 0) {
        std::fprintf(stderr, "bench_verify_gemm: %s %s T=%lld: %s refused the shape\n", s.model, s.name,
                     static_cast<long long>(T),
                     !ours_ok ? "verify_gemm"
                     : !lt_ok ? "cuBLASLt"
                              : "a graph capture");
        return 1;
      }
      // Agreement with cuBLASLt's product (both sum exact bf16 products in f32, in other orders).
      std::vector<float> a(M * s.N), b(M * s.N);
      CHECK_CUDA(cudaMemcpy(a.data(), y, a.size() * 4, cudaMemcpyDeviceToHost));
      CHECK_CUDA(cudaMemcpy(b.data(), y_ref, b.size() * 4, cudaMemcpyDeviceToHost));
      double num = 0, den = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        num += double(a[i] - b[i]) * (a[i] - b[i]);
        den += double(b[i]) * b[i];
      }
      const cuda::VerifyGemmPlan plan = cuda::verify_gemm_plan(s.N, s.K, M);
      const double bytes = double(s.N * s.K * 2 + M * s.K * 2 + M * s.N * 4);
      auto frac = [&](double ms) { return bytes / (ms * 1e-3) / copy.bytes_per_s; };
      nlohmann::json row = {{"model", s.model},
                            {"projection", s.name},
                            {"N", s.N},
                            {"K", s.K},
                            {"verify_rows", T},
                            {"stacked_rows", M},
                            {"ours_us", ours_ms * 1e3},
                            {"cublas_us", cublas_ms * 1e3},
                            {"cublaslt_tuned_us", lt_ms * 1e3},
                            {"ours_fraction_of_copy", frac(ours_ms)},
                            {"cublas_fraction_of_copy", frac(cublas_ms)},
                            {"cublaslt_fraction_of_copy", frac(lt_ms)},
                            {"ours_over_cublaslt_speed", lt_ms / ours_ms},
                            {"relative_l2_vs_cublaslt", std::sqrt(num / den)},
                            {"plan",
                             {{"tile_rows", 128},
                              {"splits", plan.splits},
                              {"x_rows", plan.x_rows},
                              {"row_blocks", plan.row_blocks}}}};
      std::printf(
          "%-26s %-8s T=%-3lld ours %8.1f us (%4.0f%% of copy; splits %d)  cuBLAS %8.1f (%4.0f%%)  "
          "cuBLASLt %8.1f (%4.0f%%)  rel L2 %.1e\n",
          s.model, s.name, static_cast<long long>(T), ours_ms * 1e3, 100 * frac(ours_ms), plan.splits, cublas_ms * 1e3,
          100 * frac(cublas_ms), lt_ms * 1e3, 100 * frac(lt_ms), std::sqrt(num / den));
      if (sweep) {
        nlohmann::json plans = nlohmann::json::array();
        for (const int row_blocks : {1, 2}) {
          if (row_blocks == 2 && M <= 64) continue;
          cuda::set_verify_gemm_row_blocks(row_blocks);
          for (int splits = 1; splits <= 8; ++splits) {
            cuda::set_verify_gemm_splits(splits);
            const cuda::VerifyGemmPlan forced = cuda::verify_gemm_plan(s.N, s.K, M);
            if (forced.splits != splits) continue;
            const double ms = time_ms([&] { cuda::verify_gemm(w, s.N, s.K, x, M, y, s.N, stream); });
            plans.push_back({{"splits", splits}, {"row_blocks", forced.row_blocks}, {"us", ms * 1e3}});
            std::printf("    row blocks %d, splits %d: %8.1f us (%4.0f%%)\n", forced.row_blocks, splits, ms * 1e3,
                        100 * frac(ms));
          }
        }
        cuda::set_verify_gemm_splits(0);
        cuda::set_verify_gemm_row_blocks(0);
        row["forced_plans"] = plans;
      }
      results.push_back(row);
    }
    cudaFree(w);
    cudaFree(x);
    cudaFree(y);
    cudaFree(y_ref);
  }
  nlohmann::json out = {
      {"bench", "verify_gemm"},
      {"date", bench::utc_now()},
      {"device", rig.device_json()},
      {"host", bench::host_info()},
      {"commit", commit},
      {"command", bench::command_line(argc, argv)},
      {"programmatic_dependent_launch", pdl},
      {"timing", "GPU time: --iterations launches in one CUDA graph, one replay timed with events"},
      {"weights", "random bf16 (timing only: synthetic)"},
      {"bytes_counted", "weights once (N*K*2) + X (2T*K*2) + Y (2T*N*4)"},
      {"copy_bandwidth_GBps", copy.bytes_per_s / 1e9},
      {"results", results},
  };
  if (!out_path.empty()) std::ofstream(out_path) << out.dump(2) << "\n";
  return 0;
}
