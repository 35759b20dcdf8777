// Matmul kernels against a naive double-precision reference on random data: every packed
// format, both activation paths, tile shapes and tails (row/token counts not multiples of 4,
// an odd number of 32-weight blocks), accumulation, and packing round trips.
#include "kernels/cpu/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/dequant.h"

namespace specula {
namespace {

// Random ggml-layout rows of `type` (rows × cols), built block by block.
std::vector<std::byte> random_rows(TensorType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f), value(-2.0f, 2.0f);
  std::vector<std::byte> out;
  auto push_f16 = [&](float v) {
    uint16_t h = f32_to_f16_bits(v);
    out.push_back(static_cast<std::byte>(h & 0xFF));
    out.push_back(static_cast<std::byte>(h >> 8));
  };
  for (int64_t r = 0; r < rows; ++r) {
    if (type == TensorType::F32) {
      for (int64_t k = 0; k < cols; ++k) {
        float v = value(rng);
        const auto* p = reinterpret_cast<const std::byte*>(&v);
        out.insert(out.end(), p, p + 4);
      }
      continue;
    }
    if (type == TensorType::F16 || type == TensorType::BF16) {
      for (int64_t k = 0; k < cols; ++k) {
        float v = value(rng);
        uint16_t h;
        if (type == TensorType::F16) {
          h = f32_to_f16_bits(v);
        } else {
          uint32_t bits;
          std::memcpy(&bits, &v, 4);
          h = static_cast<uint16_t>(bits >> 16);
        }
        out.push_back(static_cast<std::byte>(h & 0xFF));
        out.push_back(static_cast<std::byte>(h >> 8));
      }
      continue;
    }
    for (int64_t b = 0; b < cols / 32; ++b) {
      push_f16(scale(rng));
      if (type == TensorType::Q4_1) push_f16(-8.0f * scale(rng));
      const int n = type == TensorType::Q8_0 ? 32 : 16;
      for (int j = 0; j < n; ++j) out.push_back(static_cast<std::byte>(byte(rng)));
    }
  }
  return out;
}

std::vector<float> dequantized(TensorType type, const std::vector<std::byte>& data, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  const int64_t row_bytes = static_cast<int64_t>(data.size()) / rows;
  for (int64_t r = 0; r < rows; ++r) {
    auto result = dequantize_row(type, data.data() + r * row_bytes, out.data() + r * cols, cols);
    EXPECT_TRUE(result.ok) << result.error;
  }
  return out;
}

std::vector<float> random_activations(int64_t n, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (auto& v : x) v = normal(rng);
  x[3] = 25.0f;  // an outlier, as real hidden states have
  return x;
}

// y[t][r] = Σ_k w[r][k] x[t][k] in double.
std::vector<double> reference(const std::vector<float>& w, const std::vector<float>& x, int64_t rows, int64_t cols,
                              int64_t n) {
  std::vector<double> y(static_cast<size_t>(n * rows));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t k = 0; k < cols; ++k) sum += static_cast<double>(w[r * cols + k]) * x[t * cols + k];
      y[t * rows + r] = sum;
    }
  return y;
}

double max_rel_error(const std::vector<float>& got, const std::vector<double>& want) {
  double scale = 0, worst = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  return worst / scale;
}

struct Shape {
  int64_t rows, cols, tokens;
};

class MatmulTest : public ::testing::TestWithParam<TensorType> {};

TEST_P(MatmulTest, PackedMatchesDequantizedReference) {
  const TensorType type = GetParam();
  std::mt19937 rng(std::random_device{}());
  for (Shape shape : {Shape{13, 96, 1}, Shape{8, 64, 4}, Shape{23, 160, 11}, Shape{4, 32, 70}, Shape{64, 576, 9}}) {
    SCOPED_TRACE("rows " + std::to_string(shape.rows) + " cols " + std::to_string(shape.cols) + " tokens " +
                 std::to_string(shape.tokens));
    auto raw = random_rows(type, shape.rows, shape.cols, rng);
    auto w = dequantized(type, raw, shape.rows, shape.cols);
    auto x = random_activations(shape.tokens, shape.cols, rng);
    auto want = reference(w, x, shape.rows, shape.cols, shape.tokens);

    for (bool force_f32 : {false, true}) {
      PackedMatrix packed;
      init_packed_matrix(packed, packed_format_for(type, force_f32), shape.rows, shape.cols);
      // Two pack_rows calls at different offsets, as fused QKV packing does.
      const int64_t split = shape.rows / 2, row_bytes = static_cast<int64_t>(raw.size()) / shape.rows;
      ASSERT_EQ(pack_rows(packed, 0, type, raw.data(), split), "");
      ASSERT_EQ(pack_rows(packed, split, type, raw.data() + split * row_bytes, shape.rows - split), "");

      std::vector<float> row(static_cast<size_t>(shape.cols));
      for (int64_t r = 0; r < shape.rows; ++r) {  // unpacking is exact
        unpack_row(packed, r, row.data());
        ASSERT_EQ(0, std::memcmp(row.data(), w.data() + r * shape.cols, row.size() * 4)) << "row " << r;
      }

      // f32 activations: only summation order differs from the reference.
      std::vector<float> y(static_cast<size_t>(shape.tokens * shape.rows), 0.0f);
      matmul_f32(packed, x.data(), shape.cols, shape.tokens, y.data(), shape.rows, 0, shape.rows, false);
      EXPECT_LT(max_rel_error(y, want), 2e-6) << "f32 activations, force_f32 " << force_f32;

      // Split rows the way threads do, with accumulate: y = old + W x.
      std::vector<float> y2(y.size(), 1.0f);
      matmul_f32(packed, x.data(), shape.cols, shape.tokens, y2.data(), shape.rows, 0, 4, true);
      matmul_f32(packed, x.data(), shape.cols, shape.tokens, y2.data(), shape.rows, 4, shape.rows, true);
      for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y2[i], y[i] + 1.0f, 1e-4f * (1 + std::fabs(y[i])));

      if (!packed.quantized()) continue;
      // int8 activations: the error of rounding x to 8 bits per 32-value block.
      QuantizedRows q;
      q.resize(shape.tokens, shape.cols);
      quantize_rows(x.data(), shape.cols, q, 0, shape.tokens);
      std::vector<float> yq(y.size(), 0.0f);
      matmul_quantized(packed, q, yq.data(), shape.rows, 0, shape.rows, false);
      EXPECT_LT(max_rel_error(yq, want), 6e-2) << "int8 activations";  // ~1/127 per value, outlier blocks worse
      // Exactly: the reference over the dequantized int8 activations.
      std::vector<float> xq(x.size());
      for (int64_t t = 0; t < shape.tokens; ++t)
        for (int64_t k = 0; k < shape.cols; ++k) {
          const int64_t p = k / 64, j = k % 64;
          xq[t * shape.cols + k] = q.qs[(t * q.pairs + p) * 64 + j] * q.dv[(t * q.pairs + p) * 16 + (j / 32) * 8];
        }
      EXPECT_LT(max_rel_error(yq, reference(w, xq, shape.rows, shape.cols, shape.tokens)), 1e-5)
          << "int8 activations vs their own dequantized values";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulTest,
                         ::testing::Values(TensorType::Q4_1, TensorType::Q4_0, TensorType::Q8_0, TensorType::F32,
                                           TensorType::F16, TensorType::BF16),
                         [](const auto& info) { return std::string(tensor_type_name(info.param)); });

TEST(Matmul, QuantizeRowsRoundTrip) {
  std::mt19937 rng(std::random_device{}());
  const int64_t cols = 96;  // one full pair and one half pair
  auto x = random_activations(3, cols, rng);
  QuantizedRows q;
  q.resize(3, cols);
  quantize_rows(x.data(), cols, q, 0, 3);
  ASSERT_EQ(q.pairs, 2);
  for (int64_t t = 0; t < 3; ++t) {
    for (int64_t b = 0; b < 4; ++b) {
      const float d = q.dv[(t * 2 + b / 2) * 16 + (b % 2) * 8];
      int sum = 0;
      for (int j = 0; j < 32; ++j) {
        const int64_t k = b * 32 + j;
        const int v = q.qs[(t * 2 + b / 2) * 64 + (b % 2) * 32 + j];
        sum += v;
        if (k < cols) {
          EXPECT_NEAR(v * d, x[t * cols + k], d * 0.5f + 1e-6f);
        } else {
          EXPECT_EQ(v, 0) << "padding must be zero";
        }
      }
      EXPECT_NEAR(q.sv[(t * 2 + b / 2) * 16 + (b % 2) * 8] * 8.0f, d * sum, 1e-4f * (1 + std::fabs(d * sum)));
    }
  }
}

TEST(Matmul, F16Conversion) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.1f, -1234.5f}) {
    EXPECT_EQ(f16_bits_to_f32(f32_to_f16_bits(v)), fp16_to_f32(f32_to_f16_bits(v)));
    EXPECT_NEAR(f16_bits_to_f32(f32_to_f16_bits(v)), v, std::fabs(v) * 1e-3f + 1e-7f) << v;
  }
  EXPECT_EQ(f32_to_f16_bits(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16_bits(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16_bits(1e6f), 0x7C00);                // overflow to inf
  EXPECT_EQ(f32_to_f16_bits(1.0f + 1.0f / 2048), 0x3C00);  // tie rounds to even
  EXPECT_EQ(f32_to_f16_bits(1.0f + 3.0f / 2048), 0x3C02);  // tie rounds to even (up)
}

TEST(Matmul, RejectsMismatchedPacking) {
  PackedMatrix packed;
  init_packed_matrix(packed, WeightFormat::U4, 2, 64);
  std::vector<std::byte> q8(2 * 2 * 34);
  EXPECT_NE(pack_rows(packed, 0, TensorType::Q8_0, q8.data(), 2), "");
  EXPECT_NE(pack_rows(packed, 1, TensorType::Q4_1, q8.data(), 2), "");  // out of range
}

}  // namespace
}  // namespace specula
