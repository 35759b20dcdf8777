// The sparse FFN and the MoE FFN on the GPU (kernels/cuda/sparse_ffn.h, moe.h), synthetic:
// random bf16 weights, timing only.
//  - Sparse FFN at Llama-3.1-8B's shape (dim 4096, F 14336), 1/8/64 rows, tau set so that the
//    union of kept channels is 10/30/50/100% of F, against our dense FFN path (the CUDA
//    backend's: fused RMSNorm + gate_up + SwiGLU, then down; skinny kernels at one row, cuBLAS
//    with the hi/lo split of X above). The sparse path is RMSNorm + sparse_ffn (its own gate
//    GEMM), and, above one row, also with the gate from the backend's cuBLAS route
//    (sparse_ffn_from_gate). Bytes counted: what must be read, W_gate whole, the active up rows
//    and down columns, X, plus Y written; the down columns' 32-byte sectors touched are reported
//    beside them (a scattered column gather reads whole sectors).
//  - MoE at a Qwen2-MoE-like shape (60 experts, top-4, expert FFN 1408, dim 2048, shared expert
//    5632), 1/8/64 tokens, without and with skipping (thresholds calibrated as the engine does:
//    the median of r_s over 64 random tokens). Bytes: the router, the weights of the experts
//    that ran (counted on the device per call) and the shared expert. Token sets rotate (8 of
//    them), so runs route to different experts.
// Times are medians of per-call CUDA event timings after warm-up; bandwidth is reported as a
// fraction of the measured device-to-device copy bandwidth (read + write), the method of
// bench/gpu_copy.cpp.
#include <CLI/CLI.hpp>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_info.h"
#include "engine/model/moe.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/skinny_gemm.h"
#include "kernels/cuda/sparse_ffn.h"

namespace {

using specula::cuda::bf16_bits;

#define CHECK_CUDA(call)                                                                  \
  do {                                                                                    \
    const cudaError_t e_ = (call);                                                        \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "bench_ffn_moe: %s: %s\n", #call, cudaGetErrorString(e_));     \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

template <class T>
T* device_alloc(int64_t count) {
  T* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, static_cast<size_t>(count) * sizeof(T)));
  return p;
}

std::vector<float> host_random(std::mt19937& rng, int64_t n, float scale) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

// The CUDA backend's dense projection routing (engine/backend/cuda_gemm.cpp, gemm() and
// gate_up_swiglu()), reproduced here because that file keeps it private.
struct DensePath {
  cublasHandle_t cublas = nullptr;
  cudaStream_t stream = nullptr;
  bf16_bits* x_bf16 = nullptr;  // (2 T, K) hi and lo halves
  float* y_split = nullptr;     // (2 T, N)
  static constexpr int64_t kTcMaxWeights = int64_t{4} << 20;

  void gemm(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t T, float* Y, int64_t ldy,
            bool accumulate) {
    using namespace specula::cuda;
    if (skinny_gemm_pays(N, K, T) && skinny_gemm(W, N, K, X, K, T, Y, ldy, accumulate, stream)) return;
    if (T <= kSkinnyTcMaxRows && N * K <= kTcMaxWeights && skinny_gemm_tc(W, N, K, X, K, T, Y, ldy, accumulate, stream))
      return;
    f32_to_bf16_split(X, T * K, x_bf16, x_bf16 + T * K, stream);
    const float one = 1.0f, zero = 0.0f;
    cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(2 * T), int(K), &one, W, CUDA_R_16BF, int(K), x_bf16,
                 CUDA_R_16BF, int(K), &zero, y_split, CUDA_R_32F, int(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    add_split_halves(y_split, T, N, Y, ldy, accumulate, stream);
  }
  // y += down · swiglu(gate_up · rmsnorm(x)): the fused kernel where the backend takes it, else
  // RMSNorm into normed (T, dim), the GEMM into gu (T, 2 ffn) and SwiGLU into act (T, ffn).
  void ffn(const bf16_bits* gate_up, const bf16_bits* down, const float* gamma, int64_t dim, int64_t ffn,
           const float* x, int64_t T, float* normed, float* gu, float* act, float* y, bool accumulate = true) {
    using namespace specula::cuda;
    const bool f32_pays = skinny_gemm_pays(2 * ffn, dim, T) || (T <= kSkinnyTcMaxRows && 2 * ffn * dim <= kTcMaxWeights);
    if (!(f32_pays && skinny_gemm_norm_swiglu(gate_up, ffn, dim, x, dim, T, gamma, 1e-5f, act, ffn, stream)) &&
        !(T <= kSkinnyTcMaxRows && 2 * ffn * dim <= kTcMaxWeights &&
          skinny_gemm_tc_norm_swiglu(gate_up, ffn, dim, x, dim, T, gamma, 1e-5f, act, ffn, stream))) {
      rmsnorm_rows(x, dim, gamma, T, dim, 1e-5f, normed, stream);
      gemm(gate_up, 2 * ffn, dim, normed, T, gu, 2 * ffn, false);
      swiglu_rows(gu, T, ffn, act, stream);
    }
    gemm(down, dim, ffn, act, T, y, dim, accumulate);
  }
};

// Median of per-call event timings, in ms.
template <class Fn>
double median_ms(cudaStream_t stream, int iterations, Fn&& fn) {
  for (int i = 0; i < 3; ++i) fn(i);
  std::vector<cudaEvent_t> ev(static_cast<size_t>(2 * iterations));
  for (auto& e : ev) CHECK_CUDA(cudaEventCreate(&e));
  for (int i = 0; i < iterations; ++i) {
    CHECK_CUDA(cudaEventRecord(ev[2 * i], stream));
    fn(i);
    CHECK_CUDA(cudaEventRecord(ev[2 * i + 1], stream));
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaGetLastError());
  std::vector<double> ms;
  for (int i = 0; i < iterations; ++i) {
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]));
    ms.push_back(t);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string commit = "unknown", out_path;
  int iterations = 30;
  CLI::App app{"bench_ffn_moe: sparse FFN and MoE FFN kernels (synthetic weights, timing only)"};
  app.add_option("--commit", commit);
  app.add_option("--out", out_path);
  app.add_option("--iterations", iterations)->check(CLI::Range(3, 100000));
  CLI11_PARSE(app, argc, argv);
  using namespace specula;
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "bench_ffn_moe: skipped: no GPU (%s)\n", cuda::no_device_reason().c_str());
    return 0;
  }
  cuda::DeviceInfo dev;
  cuda::device_info(0, &dev);
  cuda::CopyBandwidth copy;
  std::string error;
  if (!cuda::measure_copy_bandwidth(1ull << 30, 20, &copy, &error)) {
    std::fprintf(stderr, "bench_ffn_moe: %s\n", error.c_str());
    return 1;
  }
  const double copy_Bps = copy.bytes_per_s;
  std::printf("device %s, copy bandwidth %.0f GB/s\n", dev.name.c_str(), copy_Bps / 1e9);
  std::mt19937 rng(12345);
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  DensePath dense;
  dense.stream = stream;
  if (cublasCreate(&dense.cublas) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "bench_ffn_moe: cublasCreate failed\n");
    return 1;
  }
  cublasSetStream(dense.cublas, stream);
  const int64_t max_T = 64;
  auto gbps = [](double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; };

  // ---- Sparse FFN, Llama-3.1-8B shape.
  nlohmann::json sparse_results = nlohmann::json::array();
  {
    const int64_t dim = 4096, F = 14336;
    bf16_bits* gate_up = device_alloc<bf16_bits>(2 * F * dim);
    bf16_bits* down = device_alloc<bf16_bits>(dim * F);
    cuda::fill_uniform_bf16(gate_up, 2 * F * dim, 1, 0.05f, stream);
    cuda::fill_uniform_bf16(down, dim * F, 2, 0.05f, stream);
    float* gamma = device_alloc<float>(dim);
    cuda::fill_f32(gamma, dim, 1.0f, stream);
    float* x = device_alloc<float>(max_T * dim);
    const auto hx = host_random(rng, max_T * dim, 1.0f);
    CHECK_CUDA(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
    float* xn = device_alloc<float>(max_T * dim);
    float* y = device_alloc<float>(max_T * dim);
    float* gu = device_alloc<float>(max_T * 2 * F);
    float* act = device_alloc<float>(max_T * F);
    dense.x_bf16 = device_alloc<bf16_bits>(2 * max_T * F);
    dense.y_split = device_alloc<float>(2 * max_T * 2 * F);
    void* scratch_mem = device_alloc<char>(static_cast<int64_t>(cuda::sparse_ffn_scratch_bytes(max_T, F)));
    const cuda::SparseFfnScratch scratch = cuda::sparse_ffn_scratch(scratch_mem, max_T, F);
    for (const int64_t T : {1, 8, 64}) {
      CHECK_CUDA(cudaMemset(y, 0, T * dim * 4));
      const double dense_ms = median_ms(stream, iterations, [&](int) {
        dense.ffn(gate_up, down, gamma, dim, F, x, T, xn, gu, act, y);
      });
      const double dense_bytes = 3.0 * F * dim * 2 + 2.0 * T * dim * 4;
      std::printf("sparse FFN llama-8B T=%-2lld dense %8.1f us (%5.0f GB/s, %.2f of copy)\n", static_cast<long long>(T),
                  dense_ms * 1e3, gbps(dense_bytes, dense_ms), gbps(dense_bytes, dense_ms) * 1e9 / copy_Bps);
      // tau for each target fraction of the union: the quantile of max_t |silu(gate)| over channels.
      cuda::rmsnorm_rows(x, dim, gamma, T, dim, 1e-5f, xn, stream);
      if (!cuda::sparse_ffn(gate_up, down, dim, F, xn, dim, T, 0.0f, true, y, dim, true, scratch, stream)) {
        std::fprintf(stderr, "bench_ffn_moe: sparse_ffn refused T=%lld\n", static_cast<long long>(T));
        return 1;
      }
      CHECK_CUDA(cudaStreamSynchronize(stream));
      std::vector<float> g(static_cast<size_t>(T * F));
      CHECK_CUDA(cudaMemcpy(g.data(), scratch.gate, g.size() * 4, cudaMemcpyDeviceToHost));
      std::vector<float> score(static_cast<size_t>(F), 0.0f);
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t c = 0; c < F; ++c) {
          const float v = g[t * F + c];
          score[c] = std::max(score[c], std::fabs(v / (1.0f + std::exp(-v))));
        }
      }
      std::vector<float> sorted = score;
      std::sort(sorted.begin(), sorted.end());
      for (const double fraction : {0.1, 0.3, 0.5, 1.0}) {
        const float tau = fraction >= 1.0 ? 0.0f : sorted[static_cast<size_t>((1.0 - fraction) * F)];
        auto sparse_own = [&](int) {
          cuda::rmsnorm_rows(x, dim, gamma, T, dim, 1e-5f, xn, stream);
          cuda::sparse_ffn(gate_up, down, dim, F, xn, dim, T, tau, true, y, dim, true, scratch, stream);
        };
        auto sparse_backend_gate = [&](int) {
          cuda::rmsnorm_rows(x, dim, gamma, T, dim, 1e-5f, xn, stream);
          dense.gemm(gate_up, F, dim, xn, T, scratch.gate, F, false);
          cuda::sparse_ffn_from_gate(gate_up, down, dim, F, xn, dim, T, tau, true, y, dim, true, scratch, stream);
        };
        const double own_ms = median_ms(stream, iterations, sparse_own);
        const double bgate_ms = T > 1 ? median_ms(stream, iterations, sparse_backend_gate) : own_ms;
        int32_t counts[2];
        CHECK_CUDA(cudaMemcpy(counts, scratch.counts, 8, cudaMemcpyDeviceToHost));
        std::vector<int32_t> active(static_cast<size_t>(counts[1]));
        CHECK_CUDA(cudaMemcpy(active.data(), scratch.active, active.size() * 4, cudaMemcpyDeviceToHost));
        // 32-byte sectors of one down row holding an active channel (16 channels a sector).
        int64_t sectors = 0;
        for (size_t i = 0; i < active.size(); ++i) sectors += i == 0 || active[i] / 16 != active[i - 1] / 16;
        const int64_t n = counts[1];
        const double must_read = double(F) * dim * 2 + 2.0 * n * dim * 2 + 2.0 * T * dim * 4;
        const double sector_bytes = double(F) * dim * 2 + double(n) * dim * 2 + double(sectors) * 32 * dim +
                                    2.0 * T * dim * 4;
        const double best_ms = std::min(own_ms, bgate_ms);
        sparse_results.push_back({{"rows", T},
                                  {"target_active_fraction", fraction},
                                  {"active_channels", n},
                                  {"active_fraction", double(n) / F},
                                  {"tau", tau},
                                  {"dense_us", dense_ms * 1e3},
                                  {"sparse_us", own_ms * 1e3},
                                  {"sparse_backend_gate_us", bgate_ms * 1e3},
                                  {"speedup_over_dense", dense_ms / best_ms},
                                  {"bytes_must_read", must_read},
                                  {"bytes_with_down_sectors", sector_bytes},
                                  {"down_sectors_touched_fraction", double(sectors) / (F / 16)},
                                  {"sparse_GBps", gbps(must_read, best_ms)},
                                  {"sparse_fraction_of_copy", gbps(must_read, best_ms) * 1e9 / copy_Bps},
                                  {"sparse_sector_GBps", gbps(sector_bytes, best_ms)},
                                  {"dense_GBps", gbps(dense_bytes, dense_ms)},
                                  {"dense_fraction_of_copy", gbps(dense_bytes, dense_ms) * 1e9 / copy_Bps}});
        std::printf("  active %5.1f%% (%5lld ch): sparse %8.1f us, with cuBLAS gate %8.1f us, dense %8.1f us -> "
                    "%.2fx; %5.0f GB/s needed bytes (%.2f of copy), down sectors %.0f%%\n",
                    100.0 * n / F, static_cast<long long>(n), own_ms * 1e3, bgate_ms * 1e3, dense_ms * 1e3,
                    dense_ms / best_ms, gbps(must_read, best_ms), gbps(must_read, best_ms) * 1e9 / copy_Bps,
                    100.0 * sectors / (F / 16));
      }
    }
    for (void* p : {static_cast<void*>(gate_up), static_cast<void*>(down), static_cast<void*>(gamma),
                    static_cast<void*>(x), static_cast<void*>(xn), static_cast<void*>(y), static_cast<void*>(gu),
                    static_cast<void*>(act), static_cast<void*>(dense.x_bf16), static_cast<void*>(dense.y_split),
                    scratch_mem}) {
      cudaFree(p);
    }
  }

  // ---- MoE, Qwen2-MoE-like shape.
  nlohmann::json moe_results = nlohmann::json::array();
  const cuda::MoeShape shape{.dim = 2048, .n_experts = 60, .top_k = 4, .expert_ffn = 1408, .shared_ffn = 5632,
                             .normalize = false};
  {
    const int64_t dim = shape.dim, E = shape.n_experts, k = shape.top_k, F = shape.expert_ffn, SF = shape.shared_ffn;
    bf16_bits* router = device_alloc<bf16_bits>(E * dim);
    bf16_bits* gate_up = device_alloc<bf16_bits>(E * 2 * F * dim);
    bf16_bits* down = device_alloc<bf16_bits>(E * dim * F);
    bf16_bits* sgu = device_alloc<bf16_bits>(2 * SF * dim);
    bf16_bits* sdown = device_alloc<bf16_bits>(dim * SF);
    float* sgate = device_alloc<float>(dim);
    cuda::fill_uniform_bf16(router, E * dim, 3, 0.05f, stream);
    cuda::fill_uniform_bf16(gate_up, E * 2 * F * dim, 4, 0.05f, stream);
    cuda::fill_uniform_bf16(down, E * dim * F, 5, 0.05f, stream);
    cuda::fill_uniform_bf16(sgu, 2 * SF * dim, 6, 0.05f, stream);
    cuda::fill_uniform_bf16(sdown, dim * SF, 7, 0.05f, stream);
    const auto hsg = host_random(rng, dim, 0.05f);
    CHECK_CUDA(cudaMemcpy(sgate, hsg.data(), dim * 4, cudaMemcpyHostToDevice));
    const cuda::MoeDeviceWeights w{router, gate_up, down, sgu, sdown, sgate};
    constexpr int kSets = 8;  // token sets rotated between calls
    float* xs = device_alloc<float>(kSets * max_T * dim);
    const auto hx = host_random(rng, kSets * max_T * dim, 1.0f);
    CHECK_CUDA(cudaMemcpy(xs, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
    float* y = device_alloc<float>(max_T * dim);
    CHECK_CUDA(cudaMemset(y, 0, max_T * dim * 4));
    void* scratch_mem = device_alloc<char>(static_cast<int64_t>(cuda::moe_scratch_bytes(shape, max_T)));
    const cuda::MoeScratch m = cuda::moe_scratch(scratch_mem, shape, max_T);
    // The dense path's buffers for the shared expert (bench only).
    float* ones = device_alloc<float>(dim);
    cuda::fill_f32(ones, dim, 1.0f, stream);
    float* normed = device_alloc<float>(max_T * dim);
    float* gu = device_alloc<float>(max_T * 2 * SF);
    float* act = device_alloc<float>(max_T * SF);
    float* shared_out = device_alloc<float>(max_T * dim);
    dense.x_bf16 = device_alloc<bf16_bits>(2 * max_T * SF);
    dense.y_split = device_alloc<float>(2 * max_T * 2 * SF);
    // Calibration: route 64 tokens (set 0) on the device, tau_s = median of r_s (engine/model/moe.h).
    if (!cuda::moe_ffn(shape, w, xs, dim, max_T, nullptr, y, dim, true, m, stream)) {
      std::fprintf(stderr, "bench_ffn_moe: moe_ffn refused the shape\n");
      return 1;
    }
    std::vector<float> wts(static_cast<size_t>(max_T * k));
    CHECK_CUDA(cudaMemcpy(wts.data(), m.weights, wts.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<double> thresholds;
    for (int s = 1; s < k; ++s) {
      std::vector<double> r;
      for (int64_t t = 0; t < max_T; ++t) r.push_back(skip_ratio({wts.data() + t * k, static_cast<size_t>(k)}, s));
      std::nth_element(r.begin(), r.begin() + r.size() / 2, r.end());
      thresholds.push_back(r[r.size() / 2]);
    }
    double* d_thr = device_alloc<double>(k - 1);
    CHECK_CUDA(cudaMemcpy(d_thr, thresholds.data(), thresholds.size() * 8, cudaMemcpyHostToDevice));
    const cuda::MoeDeviceSkip skip{static_cast<int>(k - 1), d_thr, static_cast<int>(k - 1)};
    for (const int64_t T : {1, 8, 64}) {
      for (const bool skipping : {false, true}) {
        const cuda::MoeDeviceSkip* rule = skipping ? &skip : nullptr;
        // Experts run and pairs skipped, per token set (one call each, outside the timing).
        double experts_run = 0, pairs_skipped = 0;
        for (int set = 0; set < kSets; ++set) {
          cuda::moe_ffn(shape, w, xs + set * max_T * dim, dim, T, rule, y, dim, true, m, stream);
          int32_t n_active = 0;
          std::vector<int32_t> skipped(static_cast<size_t>(T));
          CHECK_CUDA(cudaMemcpy(&n_active, m.n_active, 4, cudaMemcpyDeviceToHost));
          CHECK_CUDA(cudaMemcpy(skipped.data(), m.skipped, T * 4, cudaMemcpyDeviceToHost));
          experts_run += n_active;
          for (int32_t v : skipped) pairs_skipped += v;
        }
        experts_run /= kSets;
        pairs_skipped /= kSets;
        const double ms = median_ms(stream, iterations, [&](int i) {
          cuda::moe_ffn(shape, w, xs + (i % kSets) * max_T * dim, dim, T, rule, y, dim, true, m, stream);
        });
        // The routed part alone (router, routing, buckets, the grouped expert GEMMs, combine): what
        // the grouped GEMM's bandwidth is counted on.
        const double routed_ms = median_ms(stream, iterations, [&](int i) {
          const float* xi = xs + (i % kSets) * max_T * dim;
          cuda::moe_route(shape, w, xi, dim, T, rule, m, stream);
          cuda::moe_experts(shape, w, xi, dim, T, m, stream);
          cuda::moe_combine(shape, T, m.shared_out, y, dim, true, m, stream);
        });
        // The shared expert through the backend's dense path instead of our kernels (its fused
        // RMSNorm included: the real call would skip it), into shared_out, then the combine.
        const double dense_shared_ms = median_ms(stream, iterations, [&](int i) {
          const float* xi = xs + (i % kSets) * max_T * dim;
          cuda::moe_route(shape, w, xi, dim, T, rule, m, stream);
          cuda::moe_experts(shape, w, xi, dim, T, m, stream);
          dense.ffn(sgu, sdown, ones, dim, SF, xi, T, normed, gu, act, shared_out, false);
          cuda::moe_combine(shape, T, shared_out, y, dim, true, m, stream);
        });
        const double expert_bytes = experts_run * 3.0 * F * dim * 2;
        const double bytes = double(cuda::moe_weight_bytes(shape, 0)) + expert_bytes + 2.0 * T * dim * 4;
        const double routed_bytes = double(E * dim * 2) + expert_bytes + 2.0 * T * dim * 4;
        moe_results.push_back({{"tokens", T},
                               {"skipping", skipping},
                               {"experts_run_mean", experts_run},
                               {"pairs_routed", T * k},
                               {"pairs_skipped_mean", pairs_skipped},
                               {"us", ms * 1e3},
                               {"bytes_read", bytes},
                               {"GBps", gbps(bytes, ms)},
                               {"fraction_of_copy", gbps(bytes, ms) * 1e9 / copy_Bps},
                               {"routed_only_us", routed_ms * 1e3},
                               {"routed_only_bytes", routed_bytes},
                               {"routed_only_GBps", gbps(routed_bytes, routed_ms)},
                               {"routed_only_fraction_of_copy", gbps(routed_bytes, routed_ms) * 1e9 / copy_Bps},
                               {"with_dense_shared_us", dense_shared_ms * 1e3}});
        std::printf("MoE qwen2-like T=%-2lld %-8s %5.1f experts ran, %5.1f of %3lld pairs skipped: %8.1f us "
                    "(%5.0f GB/s, %.2f of copy); routed only %8.1f us (%5.0f GB/s, %.2f); shared via dense path "
                    "%8.1f us\n",
                    static_cast<long long>(T), skipping ? "skipping" : "all", experts_run, pairs_skipped,
                    static_cast<long long>(T * k), ms * 1e3, gbps(bytes, ms), gbps(bytes, ms) * 1e9 / copy_Bps,
                    routed_ms * 1e3, gbps(routed_bytes, routed_ms), gbps(routed_bytes, routed_ms) * 1e9 / copy_Bps,
                    dense_shared_ms * 1e3);
      }
    }
    for (void* p : {static_cast<void*>(router), static_cast<void*>(gate_up), static_cast<void*>(down),
                    static_cast<void*>(sgu), static_cast<void*>(sdown), static_cast<void*>(sgate),
                    static_cast<void*>(xs), static_cast<void*>(y), static_cast<void*>(d_thr), scratch_mem,
                    static_cast<void*>(ones), static_cast<void*>(normed), static_cast<void*>(gu),
                    static_cast<void*>(act), static_cast<void*>(shared_out), static_cast<void*>(dense.x_bf16),
                    static_cast<void*>(dense.y_split)}) {
      cudaFree(p);
    }
  }

  nlohmann::json out = {
      {"bench", "ffn_moe"},
      {"date", bench::utc_now()},
      {"device", {{"name", dev.name}, {"sm", std::to_string(dev.sm_major) + std::to_string(dev.sm_minor)},
                  {"driver", bench::nvidia_driver()}, {"runtime_version", dev.runtime_version}}},
      {"host", bench::host_info()},
      {"commit", commit},
      {"command", bench::command_line(argc, argv)},
      {"synthetic", "random bf16 weights and activations: timing only, no model quality"},
      {"timing", "median of per-call CUDA event timings after 3 warm-up calls"},
      {"copy_bandwidth_GBps", copy_Bps / 1e9},
      {"copy_bandwidth_counts", "read + write (2 x buffer per cudaMemcpy D2D, 1 GiB)"},
      {"sparse_ffn",
       {{"model", "llama-3.1-8b shape (dim 4096, ffn 14336), synthetic"},
        {"mask", "union over rows (ffn_union); tau at the quantile of max_t |silu(gate)| giving the target"},
        {"dense_path", "CUDA backend routing: fused RMSNorm+gate_up+SwiGLU (skinny at 1 row), else RMSNorm + "
                       "cuBLAS (X split hi/lo) + SwiGLU; down: skinny at 1 row, else cuBLAS"},
        {"sparse_path", "RMSNorm + sparse_ffn (own gate GEMM); sparse_backend_gate: gate via the dense routing + "
                        "sparse_ffn_from_gate"},
        {"bytes_must_read", "W_gate whole + active up rows + active down columns (2 bytes each) + X + Y"},
        {"bytes_with_down_sectors", "the same with the down columns counted as the 32-byte sectors they touch"},
        {"results", sparse_results}}},
      {"moe",
       {{"model", "qwen2-moe-like (60 experts, top-4, expert ffn 1408, dim 2048, shared ffn 5632), synthetic"},
        {"skip", "thresholds = median of r_s over 64 tokens routed on the device (the engine's calibration rule), "
                 "budget k-1"},
        {"bytes_read", "router + 3*F*dim*2 per expert that ran (mean over 8 token sets) + shared expert + X + Y"},
        {"routed_only", "moe_route + moe_experts + moe_combine (no shared expert): bytes = router + experts run + X + Y"},
        {"with_dense_shared", "routed part + the shared expert through the CUDA backend's dense routing (cuBLAS above "
                              "a few rows) + combine"},
        {"results", moe_results}}},
  };
  if (!out_path.empty()) std::ofstream(out_path) << out.dump(2) << "\n";
  cublasDestroy(dense.cublas);
  return 0;
}
