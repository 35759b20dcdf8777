// Programmatic dependent launch must not let a kernel read its predecessor's output early
// (kernels/cuda/pdl.cuh). A "late writer" kernel lets its successor launch at once
// (pdl_trigger), waits ~100 us, then writes X; the skinny GEMM launched right after it (PDL on)
// must give the bits of the same GEMM run after a full synchronization. Before session 16, ptxas
// moved two activation loads of the one-row normed kernel (K in (1024, 2048], the QKV projection
// of 2048-wide models) above griddepcontrol.wait, through X's const __restrict__ qualifier: they
// read the stale X, and OLMoE's and Qwen1.5-MoE's graphed decoding differed from run to run.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <utility>
#include <vector>

#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/skinny_gemm.h"
#include "kernels/cuda/sparse_verify.h"
#include "tests/kernels/cuda/gpu_test_support.h"

namespace specula::cuda {
namespace {

using testing::download;
using testing::upload;

// Copies src into dst (n floats) after spinning ~`wait_ns`, having let the next kernel launch.
__global__ void late_writer_kernel(const float* src, float* dst, int64_t n, unsigned wait_ns) {
  pdl_trigger();
  const long long start = clock64();
  // ~1.7 GHz: clock64 counts SM cycles; a loop of __nanosleep alone may return early.
  while (clock64() - start < static_cast<long long>(wait_ns) * 2) __nanosleep(1000);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

enum class Gemm { kPlain, kNorm, kNormSwiGlu };

class PdlOrderTest : public testing::GpuRandomTest {
 protected:
  // Y after [late writer of X; GEMM], and after the same GEMM once X is in place: equal bits.
  void check(Gemm kind, int64_t N, int64_t K) {
    const auto x_host = random(static_cast<size_t>(K));
    const auto w = bf16_weights(static_cast<size_t>((kind == Gemm::kNormSwiGlu ? 2 : 1) * N * K), 0.05f);
    const auto gamma_host = random(static_cast<size_t>(K));
    float* x_src = upload(x_host);
    float* x = upload(std::vector<float>(static_cast<size_t>(K), 7.0f));  // stale values
    uint16_t* W = upload(w.bits);
    float* gamma = upload(gamma_host);
    float* y = upload(std::vector<float>(static_cast<size_t>(N), 0.0f));
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    auto gemm = [&]() {
      switch (kind) {
        case Gemm::kPlain:
          return skinny_gemm(W, N, K, x, K, 1, y, N, false, s);
        case Gemm::kNorm:
          return skinny_gemm_norm(W, N, K, x, K, 1, gamma, 1e-5f, y, N, s);
        case Gemm::kNormSwiGlu:
          return skinny_gemm_norm_swiglu(W, N, K, x, K, 1, gamma, 1e-5f, y, N, s);
      }
      return false;
    };
    set_programmatic_dependent_launch(true);
    late_writer_kernel<<<4, 256, 0, s>>>(x_src, x, K, 100000);
    ASSERT_TRUE(gemm());
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const auto raced = download(y, static_cast<size_t>(N));
    ASSERT_TRUE(gemm());
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const auto settled = download(y, static_cast<size_t>(N));
    int64_t differ = 0;
    for (int64_t i = 0; i < N; ++i) differ += raced[i] != settled[i];
    EXPECT_EQ(differ, 0) << "K " << K << ": " << differ << " of " << N << " outputs read X before it was written";
    cudaStreamDestroy(s);
    for (void* p : std::initializer_list<void*>{x_src, x, W, gamma, y}) cudaFree(p);
  }
};

// The K of each prefetch depth of the one-row kernels (4 steps up to 1024, 8 up to 2048, 1 past).
TEST_F(PdlOrderTest, OneRowGemmsWaitForTheirInput) {
  for (const int64_t K : {576, 1536, 2048, 4096}) {
    check(Gemm::kPlain, 512, K);
    check(Gemm::kNorm, 512, K);
    check(Gemm::kNormSwiGlu, 256, K);
  }
}

// The verify's row adapters and split conversions (programmatic launches since session 20): each
// right after a late writer of its input must give the bits it gives once the input is in place.
TEST_F(PdlOrderTest, RowAdaptersWaitForTheirInput) {
  const int64_t T = 60, width = 4096, n = T * width;
  std::vector<int32_t> order(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) order[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7) % T);
  const auto src_host = random(static_cast<size_t>(n));  // n floats: also n bf16 pairs' worth of bits
  float* src = upload(src_host);
  float* in = upload(std::vector<float>(static_cast<size_t>(n), 7.0f));  // stale values
  int32_t* d_order = upload(order);
  auto* out_f = upload(std::vector<float>(static_cast<size_t>(n), 0.0f));
  auto* out_h = upload(std::vector<uint16_t>(static_cast<size_t>(2 * n), 0));
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const auto* in_bf16 = reinterpret_cast<const uint16_t*>(in);
  const std::vector<std::pair<const char*, std::function<void()>>> adapters = {
      {"q_rows_to_bf16", [&] { q_rows_to_bf16(in, width, T, width, d_order, out_h, s); }},
      {"rows_bf16_to_f32", [&] { rows_bf16_to_f32(in_bf16, T, width, d_order, out_f, s); }},
      {"rows_bf16_to_split", [&] { rows_bf16_to_split(in_bf16, T, width, d_order, out_h, out_h + n, s); }},
      {"f32_to_bf16_split", [&] { f32_to_bf16_split(in, n, out_h, out_h + n, s); }},
      {"add_split_halves", [&] { add_split_halves(in, T / 2, width, out_f, width, false, s); }},
  };
  set_programmatic_dependent_launch(true);
  for (const auto& [name, run] : adapters) {
    ASSERT_EQ(cudaMemcpy(in, std::vector<float>(static_cast<size_t>(n), 7.0f).data(), n * 4, cudaMemcpyHostToDevice),
              cudaSuccess);
    late_writer_kernel<<<4, 256, 0, s>>>(src, in, n, 100000);
    run();
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const auto raced_f = download(out_f, static_cast<size_t>(n));
    const auto raced_h = download(out_h, static_cast<size_t>(2 * n));
    run();
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    // Bits, not values: the random floats read as bf16 pairs hold NaNs, and NaN != NaN.
    const auto settled_f = download(out_f, static_cast<size_t>(n));
    const auto settled_h = download(out_h, static_cast<size_t>(2 * n));
    EXPECT_EQ(std::memcmp(raced_f.data(), settled_f.data(), n * sizeof(float)), 0)
        << name << " read its input before it was written";
    EXPECT_EQ(raced_h, settled_h) << name << " read its input before it was written";
  }
  cudaStreamDestroy(s);
  for (void* p : std::initializer_list<void*>{src, in, d_order, out_f, out_h}) cudaFree(p);
}

}  // namespace
}  // namespace specula::cuda
