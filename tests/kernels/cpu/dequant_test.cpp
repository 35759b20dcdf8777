// Dequantization against vectors from gguf-py (tools/reference/make_dequant_vectors.py).
#include "kernels/cpu/dequant.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace specula {
namespace {

std::vector<std::byte> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  for (size_t i = 0; i < chars.size(); ++i) bytes[i] = static_cast<std::byte>(chars[i]);
  return bytes;
}

// Distance in units in the last place between two finite floats.
int64_t ulp_distance(float a, float b) {
  auto ordered = [](float x) {
    int32_t bits = std::bit_cast<int32_t>(x);
    return bits < 0 ? int64_t{INT32_MIN} - bits : int64_t{bits};
  };
  return std::llabs(ordered(a) - ordered(b));
}

class DequantReference : public ::testing::TestWithParam<TensorType> {};

TEST_P(DequantReference, MatchesGgufPy) {
  TensorType type = GetParam();
  std::string name(tensor_type_name(type));
  std::string dir = std::string(SPECULA_TEST_DATA_DIR) + "/dequant/";
  auto blocks = read_bytes(dir + name + ".bin");
  auto expected_bytes = read_bytes(dir + name + ".f32");
  ASSERT_FALSE(blocks.empty()) << "missing " << dir << name << ".bin";
  ASSERT_EQ(expected_bytes.size() % 4, 0u);

  std::vector<float> expected(expected_bytes.size() / 4);
  std::memcpy(expected.data(), expected_bytes.data(), expected_bytes.size());
  auto traits = tensor_type_traits(type);
  ASSERT_TRUE(traits);
  int64_t n = static_cast<int64_t>(expected.size());
  ASSERT_EQ(blocks.size(), n / traits->block_elems * traits->block_bytes);

  std::vector<float> actual(expected.size(), NAN);
  auto result = dequantize_row(type, blocks.data(), actual.data(), n);
  ASSERT_TRUE(result.ok) << result.error;
  int mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    // Exact but for the affine types (d*q - m), where a fused multiply-add on either side
    // may round once instead of twice: allow 1 ulp of the result there.
    int64_t ulps = ulp_distance(actual[i], expected[i]);
    bool affine = type == TensorType::Q4_1 || type == TensorType::Q5_1 ||
                  type == TensorType::Q4_K || type == TensorType::Q5_K;
    bool equal = ulps == 0 || (affine && ulps <= 1);
    if (!equal && ++mismatches <= 5) {
      ADD_FAILURE() << name << " element " << i << ": got " << actual[i] << ", gguf-py "
                    << expected[i];
    }
  }
  EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantReference,
                         ::testing::Values(TensorType::F32, TensorType::F16, TensorType::BF16,
                                           TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1,
                                           TensorType::Q5_0, TensorType::Q5_1, TensorType::Q4_K,
                                           TensorType::Q5_K, TensorType::Q6_K),
                         [](const auto& info) { return std::string(tensor_type_name(info.param)); });

TEST(Dequant, RejectsPartialBlocks) {
  std::vector<std::byte> block(144);
  std::vector<float> out(256);
  auto result = dequantize_row(TensorType::Q4_K, block.data(), out.data(), 100);
  EXPECT_FALSE(result.ok);
  EXPECT_THAT(result.error, ::testing::HasSubstr("100 elements is not a multiple of the block size 256"));
}

TEST(Dequant, RejectsTypesWithoutKernel) {
  std::vector<std::byte> block(110);
  std::vector<float> out(256);
  auto result = dequantize_row(TensorType::Q3_K, block.data(), out.data(), 256);
  EXPECT_FALSE(result.ok);
  EXPECT_THAT(result.error, ::testing::HasSubstr("Q3_K"));
}

TEST(Dequant, HalfConversionsAreExact) {
  EXPECT_EQ(fp16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(fp16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(fp16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(fp16_to_f32(0x0001), 0x1p-24f);
  EXPECT_TRUE(std::isinf(fp16_to_f32(0x7C00)));
  EXPECT_TRUE(std::isnan(fp16_to_f32(0x7E00)));
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xC040), -3.0f);
}

TEST(Dequant, RoundToBf16IsNearestEven) {
  EXPECT_EQ(round_to_bf16(1.0f), 1.0f);
  // bf16 keeps 8 significant bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 -> even (1).
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f), 1.0f);
  // 1 + 3·2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6 -> even (1 + 2^-6).
  EXPECT_EQ(round_to_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);  // above halfway -> up
  EXPECT_EQ(round_to_bf16(-3.0f), -3.0f);
  EXPECT_TRUE(std::isnan(round_to_bf16(std::nanf(""))));
  std::vector<float> v = {1.0f + 0x1p-8f + 0x1p-20f, 2.0f};
  round_to_bf16(std::span<float>(v));
  EXPECT_EQ(v[0], 1.0f + 0x1p-7f);
  EXPECT_EQ(v[1], 2.0f);
}

TEST(TensorTypeTraits, MatchGgmlBlockGeometry) {
  EXPECT_EQ(tensor_type_traits(TensorType::Q4_1)->block_bytes, 20u);
  EXPECT_EQ(tensor_type_traits(TensorType::Q6_K)->block_bytes, 210u);
  EXPECT_EQ(tensor_type_traits(TensorType::Q8_K)->block_bytes, 292u);
  EXPECT_EQ(tensor_type_traits(TensorType::Q2_K)->block_elems, 256u);
  EXPECT_FALSE(tensor_type_traits(4u).has_value());   // removed Q4_2
  EXPECT_FALSE(tensor_type_traits(31u).has_value());
  EXPECT_EQ(tensor_type_name(TensorType::BF16), "BF16");
}

}  // namespace
}  // namespace specula
