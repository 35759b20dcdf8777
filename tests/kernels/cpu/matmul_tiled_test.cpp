// The row-tiled int8 kernel (tile_rows + matmul_quantized) against a double-precision reference
// over the dequantized weights and the dequantized int8 activations, for Q4_0, Q4_1 and Q8_0:
// odd block counts, token counts across the 8-token chunk, row ranges that cut tiles, and
// accumulation. Also: a token's result does not depend on how many tokens share the call
// (what keeps speculative greedy equal to plain greedy).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/dequant.h"
#include "kernels/cpu/matmul.h"

namespace specula {
namespace {

std::vector<std::byte> random_quantized_rows(TensorType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  std::vector<std::byte> out;
  auto push_f16 = [&](float v) {
    const uint16_t h = f32_to_f16_bits(v);
    out.push_back(static_cast<std::byte>(h & 0xFF));
    out.push_back(static_cast<std::byte>(h >> 8));
  };
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      push_f16(scale(rng));
      if (type == TensorType::Q4_1) push_f16(-8.0f * scale(rng));
      const int n = type == TensorType::Q8_0 ? 32 : 16;
      for (int j = 0; j < n; ++j) out.push_back(static_cast<std::byte>(byte(rng)));
    }
  }
  return out;
}

PackedMatrix packed(TensorType type, const std::vector<std::byte>& raw, int64_t rows, int64_t cols) {
  PackedMatrix w;
  init_packed_matrix(w, packed_format_for(type, false), rows, cols);
  EXPECT_EQ(pack_rows(w, 0, type, raw.data(), rows), "");
  return w;
}

double max_rel_error(const std::vector<float>& got, const std::vector<double>& want) {
  double scale = 0, worst = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  return worst / scale;
}

class MatmulTiledTest : public ::testing::TestWithParam<TensorType> {};

TEST_P(MatmulTiledTest, MatchesReferenceOverDequantizedInt8Activations) {
  const TensorType type = GetParam();
  std::mt19937 rng(std::random_device{}());
  struct Shape {
    int64_t rows, cols, tokens;
  };
  for (Shape shape : {Shape{16, 96, 1}, Shape{32, 576, 9}, Shape{48, 160, 17}, Shape{64, 64, 3}, Shape{16, 32, 8}}) {
    SCOPED_TRACE("rows " + std::to_string(shape.rows) + " cols " + std::to_string(shape.cols) + " tokens " +
                 std::to_string(shape.tokens));
    const auto raw = random_quantized_rows(type, shape.rows, shape.cols, rng);
    PackedMatrix pairs = packed(type, raw, shape.rows, shape.cols);
    PackedMatrix tiled = packed(type, raw, shape.rows, shape.cols);
    ASSERT_TRUE(tile_rows(tiled));
    ASSERT_TRUE(tiled.tiled());
    EXPECT_EQ(tiled.qs.size(), 0u);

    std::vector<float> want_row(static_cast<size_t>(shape.cols)), got_row(want_row.size());
    std::vector<float> w(static_cast<size_t>(shape.rows * shape.cols));
    for (int64_t r = 0; r < shape.rows; ++r) {  // unpacking stays exact
      unpack_row(pairs, r, want_row.data());
      unpack_row(tiled, r, got_row.data());
      ASSERT_EQ(0, std::memcmp(want_row.data(), got_row.data(), want_row.size() * 4)) << "row " << r;
      std::copy(got_row.begin(), got_row.end(), w.begin() + r * shape.cols);
    }

    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(shape.tokens * shape.cols));
    for (auto& v : x) v = normal(rng);
    x[1] = 30.0f;  // an outlier
    QuantizedRows q;
    q.resize(shape.tokens, shape.cols);
    quantize_rows(x.data(), shape.cols, q, 0, shape.tokens);
    std::vector<double> want(static_cast<size_t>(shape.tokens * shape.rows));
    for (int64_t t = 0; t < shape.tokens; ++t) {
      for (int64_t r = 0; r < shape.rows; ++r) {
        double sum = 0;
        for (int64_t k = 0; k < shape.cols; ++k) {
          const int64_t p = k / 64, j = k % 64;
          const double xq = q.qs[(t * q.pairs + p) * 64 + j] * static_cast<double>(q.dv[(t * q.pairs + p) * 16 + (j / 32) * 8]);
          sum += static_cast<double>(w[r * shape.cols + k]) * xq;
        }
        want[t * shape.rows + r] = sum;
      }
    }
    std::vector<float> y(want.size(), 0.0f);
    matmul_quantized(tiled, q, y.data(), shape.rows, 0, shape.rows, false);
    EXPECT_LT(max_rel_error(y, want), 1e-5);

    // Row ranges that cut tiles, accumulating onto 1.
    std::vector<float> y2(y.size(), 1.0f);
    const int64_t cut = shape.rows > 16 ? 21 : 5;
    matmul_quantized(tiled, q, y2.data(), shape.rows, 0, cut, true);
    matmul_quantized(tiled, q, y2.data(), shape.rows, cut, shape.rows, true);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y2[i], y[i] + 1.0f) << i;

    // Each token alone gives bit-identical results to the batch.
    for (int64_t t = 0; t < shape.tokens; ++t) {
      QuantizedRows one;
      one.resize(1, shape.cols);
      quantize_rows(x.data() + t * shape.cols, shape.cols, one, 0, 1);
      std::vector<float> y1(static_cast<size_t>(shape.rows));
      matmul_quantized(tiled, one, y1.data(), shape.rows, 0, shape.rows, false);
      ASSERT_EQ(0, std::memcmp(y1.data(), y.data() + t * shape.rows, y1.size() * 4)) << "token " << t;
    }

    // matmul_f32 still works on a tiled matrix.
    std::vector<float> yf(y.size()), yf_pairs(y.size());
    matmul_f32(tiled, x.data(), shape.cols, shape.tokens, yf.data(), shape.rows, 0, shape.rows, false);
    matmul_f32(pairs, x.data(), shape.cols, shape.tokens, yf_pairs.data(), shape.rows, 0, shape.rows, false);
    for (size_t i = 0; i < yf.size(); ++i) ASSERT_NEAR(yf[i], yf_pairs[i], 1e-4f * (1 + std::fabs(yf_pairs[i])));
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulTiledTest, ::testing::Values(TensorType::Q4_1, TensorType::Q4_0, TensorType::Q8_0),
                         [](const auto& info) { return std::string(tensor_type_name(info.param)); });

TEST(MatmulTiled, RefusesWhatItCannotTile) {
  std::mt19937 rng(1);
  const auto raw = random_quantized_rows(TensorType::Q4_1, 20, 64, rng);
  PackedMatrix odd = packed(TensorType::Q4_1, raw, 20, 64);
  EXPECT_FALSE(tile_rows(odd));  // 20 rows: not whole tiles
  EXPECT_FALSE(odd.tiled());
  EXPECT_GT(odd.qs.size(), 0u);
  PackedMatrix f32;
  init_packed_matrix(f32, WeightFormat::F32, 16, 64);
  EXPECT_FALSE(tile_rows(f32));
  PackedMatrix ok = packed(TensorType::Q4_1, raw, 16, 64);
  EXPECT_TRUE(tile_rows(ok));
  EXPECT_FALSE(tile_rows(ok));  // already tiled
}

}  // namespace
}  // namespace specula
