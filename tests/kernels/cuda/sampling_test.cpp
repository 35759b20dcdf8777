// kernels/cuda/sampling.h against the host: argmax_rows equals argmax_f32 row by row (exact ties
// to the lowest index, NaN skipped, a leading NaN gives 0, all -inf gives 0) on chosen and random
// rows; top_k_softmax_row lists the k largest logits in order (ties lower id first) with
// apply_sampling_filters' probabilities to float rounding.
#include "kernels/cuda/sampling.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/cpu/activation.h"
#include "tests/kernels/cuda/gpu_test_support.h"

namespace specula::cuda {
namespace {

using testing::download;
using testing::upload;

class Sampling : public testing::GpuRandomTest {};

std::vector<int32_t> gpu_argmax(const std::vector<float>& logits, int64_t rows, int64_t vocab) {
  float* d = upload(logits);
  int32_t* out = nullptr;
  EXPECT_EQ(cudaMalloc(&out, static_cast<size_t>(rows) * sizeof(int32_t)), cudaSuccess);
  argmax_rows(d, rows, vocab, out, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  auto ids = download(out, static_cast<size_t>(rows));
  cudaFree(d);
  cudaFree(out);
  return ids;
}

std::vector<int32_t> host_argmax(const std::vector<float>& logits, int64_t rows, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    ids[static_cast<size_t>(r)] = static_cast<int32_t>(argmax_f32(logits.data() + r * vocab, vocab));
  return ids;
}

TEST_F(Sampling, ArgmaxOfChosenRowsTiesNanAndInfinity) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  constexpr int64_t V = 3000;  // more than one value per thread, not a multiple of the block
  std::vector<std::vector<float>> rows(7, std::vector<float>(V, 0.0f));
  rows[0][2999] = 5.0f;
  rows[0][1500] = 5.0f;  // tie: the lower index
  rows[0][2048] = 5.0f;
  rows[1][0] = nan;  // leading NaN: 0
  rows[1][7] = 9.0f;
  for (auto& v : rows[2]) v = nan;   // all NaN: 0
  for (auto& v : rows[3]) v = -inf;  // all -inf: 0
  rows[4][1] = nan;                  // NaN never wins
  rows[4][5] = 1.0f;
  rows[4][1030] = 1.0f;
  rows[5][2] = -0.0f;  // zeros of both signs tie: 0 is first
  rows[6][3] = inf;    // +inf wins
  rows[6][2000] = inf;
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  const auto gpu = gpu_argmax(flat, 7, V);
  EXPECT_EQ(gpu, host_argmax(flat, 7, V));
  EXPECT_EQ(gpu, (std::vector<int32_t>{1500, 0, 0, 0, 5, 0, 3}));
}

TEST_F(Sampling, ArgmaxOfRandomRowsWithPlantedTies) {
  constexpr int64_t V = 49152, R = 61;
  auto logits = random(static_cast<size_t>(V * R), 8.0f);
  for (int64_t r = 0; r < R; ++r) {  // every other row: the max planted twice
    if (r % 2) continue;
    const int64_t a = static_cast<int64_t>(rng_() % V), b = static_cast<int64_t>(rng_() % V);
    logits[static_cast<size_t>(r * V + a)] = 100.0f;
    logits[static_cast<size_t>(r * V + b)] = 100.0f;
  }
  EXPECT_EQ(gpu_argmax(logits, R, V), host_argmax(logits, R, V));
}

TEST_F(Sampling, TopKListsTheLargestLogitsWithSoftmaxProbabilities) {
  constexpr int64_t V = 49152;
  for (float temperature : {1.0f, 0.6f}) {
    auto row = random(static_cast<size_t>(V), 6.0f);
    row[123] = row[40000] = 7.5f;  // a tie at the top: 123 first
    constexpr int k = 10;
    float* d = upload(row);
    int32_t* ids_d = nullptr;
    float* probs_d = nullptr;
    ASSERT_EQ(cudaMalloc(&ids_d, k * sizeof(int32_t)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&probs_d, k * sizeof(float)), cudaSuccess);
    top_k_softmax_row(d, V, k, temperature, ids_d, probs_d, nullptr);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    const auto ids = download(ids_d, k);
    const auto probs = download(probs_d, k);
    cudaFree(d);
    cudaFree(ids_d);
    cudaFree(probs_d);
    std::vector<int32_t> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    double total = 0;
    for (float v : row) total += std::exp((static_cast<double>(v) - 7.5) / temperature);
    for (int j = 0; j < k; ++j) {
      EXPECT_EQ(ids[j], order[static_cast<size_t>(j)]) << "rank " << j;
      const double want = std::exp((static_cast<double>(row[order[j]]) - 7.5) / temperature) / total;
      EXPECT_NEAR(probs[j], want, 1e-6 * want) << "rank " << j;
    }
    EXPECT_EQ(ids[0], 123);
    EXPECT_EQ(ids[1], 40000);
  }
}

}  // namespace
}  // namespace specula::cuda
