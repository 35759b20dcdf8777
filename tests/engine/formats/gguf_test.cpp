#include "engine/formats/gguf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <sys/stat.h>

#include "tests/engine/formats/gguf_writer.h"

namespace specula {
namespace {

using ::testing::HasSubstr;
using testing::GgufBytes;
using testing::GgufTensorSpec;
using testing::GgufWriter;
namespace gw = specula::testing;

Expected<GgufFile> parse(const std::vector<std::byte>& bytes) {
  return GgufFile::parse(bytes, "mem.gguf");
}

std::string parse_error(const std::vector<std::byte>& bytes) {
  auto file = parse(bytes);
  EXPECT_FALSE(file.ok()) << "expected a parse error";
  return file.ok() ? std::string() : file.error().message;
}

std::vector<float> iota_floats(size_t n) {
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = static_cast<float>(i) * 0.5f - 3.0f;
  return values;
}

// A small file with every value type, a nested array and two tensors.
GgufWriter rich_writer(uint32_t version) {
  GgufWriter writer;
  writer.version = version;
  writer.kv("u8", gw::kU8, GgufBytes().put<uint8_t>(200))
      .kv("i8", gw::kI8, GgufBytes().put<int8_t>(-100))
      .kv("u16", gw::kU16, GgufBytes().put<uint16_t>(60000))
      .kv("i16", gw::kI16, GgufBytes().put<int16_t>(-30000))
      .kv_u32("u32", 4000000000u)
      .kv("i32", gw::kI32, GgufBytes().put<int32_t>(-2000000000))
      .kv_f32("f32", 1.5f)
      .kv_bool("bool", true)
      .kv_str("general.architecture", "llama")
      .kv("u64", gw::kU64, GgufBytes().put<uint64_t>(1ull << 40))
      .kv("i64", gw::kI64, GgufBytes().put<int64_t>(-(1ll << 40)))
      .kv("f64", gw::kF64, GgufBytes().put<double>(-2.25))
      .kv_strings("tokens", {"a", "bc", ""});
  // [[1, 2], [3]]: array of arrays of u32.
  GgufBytes nested;
  nested.put<uint32_t>(gw::kArray).put<uint64_t>(2);
  nested.put<uint32_t>(gw::kU32).put<uint64_t>(2).put<uint32_t>(1).put<uint32_t>(2);
  nested.put<uint32_t>(gw::kU32).put<uint64_t>(1).put<uint32_t>(3);
  writer.kv("nested", gw::kArray, nested);
  writer.tensor({"w.f32", {4, 2}, 0, gw::f32_bytes(iota_floats(8)), std::nullopt});
  std::vector<std::byte> q8(34, std::byte{1});  // one Q8_0 block
  writer.tensor({"w.q8", {32}, 8, q8, std::nullopt});
  return writer;
}

class GgufVersions : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufVersions, ReadsEveryValueTypeAndTensors) {
  auto file = parse(rich_writer(GetParam()).build());
  ASSERT_TRUE(file.ok()) << file.error().message;
  EXPECT_EQ(file->version(), GetParam());
  EXPECT_EQ(file->alignment(), 32u);
  EXPECT_EQ(file->find("u8")->as_int(), 200);
  EXPECT_EQ(file->find("i8")->as_int(), -100);
  EXPECT_EQ(file->find("u16")->as_int(), 60000);
  EXPECT_EQ(file->find("i16")->as_int(), -30000);
  EXPECT_EQ(*file->get_int("u32"), 4000000000);
  EXPECT_EQ(*file->get_int("i32"), -2000000000);
  EXPECT_EQ(*file->get_float("f32"), 1.5);
  EXPECT_EQ(file->find("bool")->as_bool(), true);
  EXPECT_EQ(*file->get_string("general.architecture"), "llama");
  EXPECT_EQ(*file->get_int("u64"), int64_t{1} << 40);
  EXPECT_EQ(*file->get_int("i64"), -(int64_t{1} << 40));
  EXPECT_EQ(*file->get_float("f64"), -2.25);
  EXPECT_EQ(file->find("u8")->type, GgufValueType::UINT8);
  EXPECT_EQ(file->find("f64")->type, GgufValueType::FLOAT64);
  EXPECT_EQ(file->get_string_array("tokens"), (std::vector<std::string>{"a", "bc", ""}));

  const GgufArray* nested = file->find("nested")->as_array();
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->element_type, GgufValueType::ARRAY);
  ASSERT_EQ(nested->items.size(), 2u);
  const GgufArray* first = nested->items[0].as_array();
  const GgufArray* second = nested->items[1].as_array();
  ASSERT_TRUE(first && second);
  ASSERT_EQ(first->items.size(), 2u);
  EXPECT_EQ(first->items[1].as_int(), 2);
  ASSERT_EQ(second->items.size(), 1u);
  EXPECT_EQ(second->items[0].as_int(), 3);

  ASSERT_EQ(file->tensors().size(), 2u);
  const GgufTensorInfo* w = file->find_tensor("w.f32");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->type, TensorType::F32);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(w->n_elements, 8u);
  EXPECT_EQ(w->n_bytes, 32u);
  EXPECT_EQ(w->offset, 0u);
  float values[8];
  std::memcpy(values, w->data.data(), sizeof(values));
  EXPECT_EQ(values[0], -3.0f);
  EXPECT_EQ(values[7], 0.5f);
  const GgufTensorInfo* q8 = file->find_tensor("w.q8");
  ASSERT_NE(q8, nullptr);
  EXPECT_EQ(q8->type, TensorType::Q8_0);
  EXPECT_EQ(q8->n_bytes, 34u);
  EXPECT_EQ(q8->offset, 32u);
  EXPECT_EQ(file->find_tensor("missing"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(V2AndV3, GgufVersions, ::testing::Values(2u, 3u));

TEST(Gguf, HonoursCustomAlignment) {
  GgufWriter writer;
  writer.alignment = 64;
  writer.kv_u32("general.alignment", 64);
  writer.tensor({"a", {3}, 0, gw::f32_bytes({1, 2, 3}), std::nullopt});
  writer.tensor({"b", {2}, 0, gw::f32_bytes({4, 5}), std::nullopt});
  auto bytes = writer.build();
  auto file = parse(bytes);
  ASSERT_TRUE(file.ok()) << file.error().message;
  EXPECT_EQ(file->alignment(), 64u);
  const auto* b = file->find_tensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->offset, 64u);
  EXPECT_EQ((b->data.data() - bytes.data()) % 64, 0);
  float value;
  std::memcpy(&value, b->data.data(), 4);
  EXPECT_EQ(value, 4.0f);
}

TEST(Gguf, RejectsAlignmentThatIsNotAPowerOfTwo) {
  for (uint32_t alignment : {0u, 48u}) {
    GgufWriter writer;
    writer.kv_u32("general.alignment", alignment);
    EXPECT_THAT(parse_error(writer.build()), HasSubstr("general.alignment must be a nonzero power of 2"));
  }
}

TEST(Gguf, OpensFileFromDisk) {
  auto path = std::filesystem::temp_directory_path() / "specula_gguf_test_open.gguf";
  rich_writer(3).write(path);
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok()) << file.error().message;
  EXPECT_EQ(file->path(), path);
  EXPECT_EQ(file->tensors().size(), 2u);
  std::filesystem::remove(path);
}

TEST(Gguf, EveryTruncationIsAnError) {
  auto bytes = rich_writer(3).build();
  for (size_t size = 0; size < bytes.size(); ++size) {
    std::vector<std::byte> prefix(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(size));
    auto file = parse(prefix);
    ASSERT_FALSE(file.ok()) << "prefix of " << size << " bytes parsed";
    EXPECT_THAT(file.error().message, HasSubstr("mem.gguf: "));
    if (size > 0 && size < 24) {
      EXPECT_THAT(file.error().message, HasSubstr("truncated"));
    }
  }
}

TEST(Gguf, ZeroLengthFile) {
  EXPECT_THAT(parse_error({}), HasSubstr("empty file"));
  auto path = std::filesystem::temp_directory_path() / "specula_gguf_test_empty.gguf";
  std::ofstream(path).close();
  auto file = GgufFile::open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.error().message, HasSubstr(path.string() + ": empty file"));
  std::filesystem::remove(path);
}

TEST(Gguf, BadMagic) {
  GgufWriter writer;
  writer.magic = 0x46554746;
  EXPECT_THAT(parse_error(writer.build()), HasSubstr("not a GGUF file (bad magic)"));
}

TEST(Gguf, RejectsVersionsOtherThanTwoAndThree) {
  for (uint32_t version : {1u, 4u, 0xFFFFFFFFu}) {
    GgufWriter writer;
    writer.version = version;
    EXPECT_THAT(parse_error(writer.build()),
                HasSubstr("unsupported GGUF version " + std::to_string(version) + " (supported: 2, 3)"));
  }
}

TEST(Gguf, AbsurdCountsFailFast) {
  auto start = std::chrono::steady_clock::now();
  GgufWriter tensors;
  tensors.tensor_count_override = uint64_t{1} << 60;
  EXPECT_THAT(parse_error(tensors.build()), HasSubstr("tensor count 1152921504606846976 cannot fit"));
  GgufWriter kvs;
  kvs.kv_count_override = ~uint64_t{0};
  EXPECT_THAT(parse_error(kvs.build()), HasSubstr("metadata count 18446744073709551615 cannot fit"));
  GgufWriter array;
  array.kv("big", gw::kArray, GgufBytes().put<uint32_t>(gw::kU64).put<uint64_t>(uint64_t{1} << 61));
  EXPECT_THAT(parse_error(array.build()), HasSubstr("metadata key 'big': array of 2305843009213693952 UINT64 elements cannot fit"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST(Gguf, CapsTotalArrayElements) {
  // 5M one-byte elements fit in the file but would cost ~240 MB as GgufValues.
  GgufBytes payload;
  payload.put<uint32_t>(gw::kU8).put<uint64_t>(5'000'000);
  payload.bytes.resize(payload.bytes.size() + 5'000'000);
  GgufWriter writer;
  writer.kv("bytes", gw::kArray, payload);
  EXPECT_THAT(parse_error(writer.build()), HasSubstr("metadata key 'bytes': metadata arrays hold more than 4194304 elements in total"));
}

TEST(Gguf, AbsurdStringLengths) {
  GgufWriter value;
  value.kv("name", gw::kString, GgufBytes().put<uint64_t>(uint64_t{1} << 62));
  EXPECT_THAT(parse_error(value.build()), HasSubstr("metadata key 'name': string length 4611686018427387904"));
  // A key whose own length is absurd.
  GgufBytes raw;
  raw.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
  raw.put<uint64_t>(~uint64_t{0}).put<uint32_t>(0).put<uint8_t>(0);
  EXPECT_THAT(parse_error(raw.bytes), HasSubstr("metadata key #0: string length 18446744073709551615"));
}

TEST(Gguf, UnknownValueTypes) {
  GgufWriter value;
  value.kv("odd", 13, GgufBytes().put<uint32_t>(0));
  EXPECT_THAT(parse_error(value.build()), HasSubstr("metadata key 'odd': unknown value type 13"));
  GgufWriter element;
  element.kv("odd", gw::kArray, GgufBytes().put<uint32_t>(77).put<uint64_t>(1));
  EXPECT_THAT(parse_error(element.build()), HasSubstr("unknown array element type 77"));
  GgufWriter boolean;
  boolean.kv("flag", gw::kBool, GgufBytes().put<uint8_t>(2));
  EXPECT_THAT(parse_error(boolean.build()), HasSubstr("metadata key 'flag': bool value 2 is not 0 or 1"));
}

TEST(Gguf, DeeplyNestedArraysAreRefused) {
  GgufBytes payload;
  for (int i = 0; i < 40; ++i) payload.put<uint32_t>(gw::kArray).put<uint64_t>(1);
  payload.put<uint32_t>(gw::kU8).put<uint64_t>(0);
  GgufWriter writer;
  writer.kv("deep", gw::kArray, payload);
  EXPECT_THAT(parse_error(writer.build()), HasSubstr("arrays nested deeper than 16"));
}

TEST(Gguf, DuplicateKeysAndTensors) {
  GgufWriter keys;
  keys.kv_u32("a", 1).kv_u32("a", 2);
  EXPECT_THAT(parse_error(keys.build()), HasSubstr("duplicate metadata key 'a'"));
  GgufWriter tensors;
  tensors.tensor({"t", {1}, 0, gw::f32_bytes({1}), std::nullopt});
  tensors.tensor({"t", {1}, 0, gw::f32_bytes({2}), std::nullopt});
  EXPECT_THAT(parse_error(tensors.build()), HasSubstr("duplicate tensor name 't'"));
}

TEST(Gguf, AbsurdDimensions) {
  GgufWriter too_many;
  too_many.tensor({"t", {1, 1, 1, 1, 1}, 0, gw::f32_bytes({1}), std::nullopt});
  EXPECT_THAT(parse_error(too_many.build()), HasSubstr("tensor 't': 5 dimensions (supported: 1 to 4)"));
  GgufWriter none;
  none.tensor({"t", {}, 0, {}, std::nullopt});
  EXPECT_THAT(parse_error(none.build()), HasSubstr("tensor 't': 0 dimensions"));
  GgufWriter zero;
  zero.tensor({"t", {4, 0}, 0, {}, std::nullopt});
  EXPECT_THAT(parse_error(zero.build()), HasSubstr("tensor 't': dimension 1 is 0 (must be > 0)"));
  GgufWriter overflow;
  overflow.tensor({"t", {uint64_t{1} << 40, uint64_t{1} << 40}, 0, {}, std::nullopt});
  EXPECT_THAT(parse_error(overflow.build()), HasSubstr("element count overflows"));
  GgufWriter huge;  // fits in u64 elements but not in the file
  huge.tensor({"t", {uint64_t{1} << 30, uint64_t{1} << 30}, 0, gw::f32_bytes({1}), std::nullopt});
  EXPECT_THAT(parse_error(huge.build()), HasSubstr("beyond end of file"));
  GgufWriter bytes_overflow;  // 2^62 F32 elements = 2^64 bytes
  bytes_overflow.tensor({"t", {uint64_t{1} << 31, uint64_t{1} << 31}, 0, {}, std::nullopt});
  EXPECT_THAT(parse_error(bytes_overflow.build()), HasSubstr("overflows"));
}

TEST(Gguf, TensorDataBeyondEndOfFile) {
  GgufWriter writer;
  writer.tensor({"blk.3.attn_q.weight", {8}, 0, gw::f32_bytes(iota_floats(4)), std::nullopt});
  EXPECT_THAT(parse_error(writer.build()),
              HasSubstr("tensor 'blk.3.attn_q.weight': offset 0 + 32 bytes (data section at 96) beyond end of file (size 112)"));
  GgufWriter far;
  far.tensor({"t", {1}, 0, gw::f32_bytes({1}), uint64_t{1} << 63});
  EXPECT_THAT(parse_error(far.build()), HasSubstr("tensor 't': offset 9223372036854775808 + 4 bytes"));
  GgufWriter wrap;  // offset + size would wrap around 2^64
  wrap.tensor({"t", {1}, 0, gw::f32_bytes({1}), ~uint64_t{31}});
  EXPECT_THAT(parse_error(wrap.build()), HasSubstr("beyond end of file"));
}

TEST(Gguf, OverlappingAndUnalignedTensors) {
  GgufWriter overlap;
  overlap.tensor({"a", {8}, 0, gw::f32_bytes(iota_floats(8)), std::nullopt});
  overlap.tensor({"b", {8}, 0, gw::f32_bytes(iota_floats(8)), uint64_t{0}});
  EXPECT_THAT(parse_error(overlap.build()), HasSubstr("overlaps tensor"));
  GgufWriter unaligned;
  unaligned.tensor({"a", {1}, 0, gw::f32_bytes({1, 2}), uint64_t{4}});
  EXPECT_THAT(parse_error(unaligned.build()), HasSubstr("tensor 'a': offset 4 is not a multiple of the alignment 32"));
}

TEST(Gguf, UnknownTensorTypeNamesTensorAndNumber) {
  GgufWriter writer;
  writer.tensor({"blk.0.ffn_up.weight", {4}, 99, gw::f32_bytes({1, 2, 3, 4}), std::nullopt});
  EXPECT_THAT(parse_error(writer.build()), HasSubstr("tensor 'blk.0.ffn_up.weight': unknown tensor type 99"));
  GgufWriter removed;  // 4 was Q4_2, removed from ggml
  removed.tensor({"t", {32}, 4, std::vector<std::byte>(20), std::nullopt});
  EXPECT_THAT(parse_error(removed.build()), HasSubstr("unknown tensor type 4"));
}

TEST(Gguf, PartialBlocksAreRefused) {
  GgufWriter writer;
  writer.tensor({"t", {33}, 8, std::vector<std::byte>(68), std::nullopt});
  EXPECT_THAT(parse_error(writer.build()), HasSubstr("tensor 't': 33 elements of Q8_0 (block size 32)"));
}

TEST(Gguf, DirectoryAndMissingPaths) {
  auto dir = std::filesystem::temp_directory_path();
  auto as_dir = GgufFile::open(dir);
  ASSERT_FALSE(as_dir.ok());
  EXPECT_THAT(as_dir.error().message, HasSubstr("is a directory"));
  auto missing = GgufFile::open(dir / "specula_no_such_file.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.error().message, HasSubstr("specula_no_such_file.gguf: cannot open: No such file"));
}

TEST(Gguf, FifoIsRefusedWithoutBlocking) {
  auto path = std::filesystem::temp_directory_path() / "specula_gguf_test_fifo";
  std::filesystem::remove(path);
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  auto file = GgufFile::open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.error().message, HasSubstr("not a regular file"));
  std::filesystem::remove(path);
}

TEST(Gguf, TypedLookupsNameTheKey) {
  auto file = parse(rich_writer(3).build());
  ASSERT_TRUE(file.ok());
  auto missing = file->get_int("llama.block_count");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.error().message, HasSubstr("mem.gguf: metadata key 'llama.block_count' missing"));
  auto wrong = file->get_int("general.architecture");
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(wrong.error().message, HasSubstr("'general.architecture' has type STRING, expected an integer"));
  EXPECT_FALSE(file->get_string("u32").ok());
  EXPECT_FALSE(file->get_float("tokens").ok());
  EXPECT_FALSE(file->get_string_array("nested").has_value());
  EXPECT_FALSE(file->find("u64")->as_bool().has_value());
}

// The committed fuzz seeds (tools/reference/make_fuzz_seeds.py) named valid_* must parse, and
// every other seed must fail with a message.
TEST(Gguf, FuzzSeedsBehaveAsNamed) {
  auto dir = std::filesystem::path(SPECULA_TEST_DATA_DIR) / "../fuzz/corpus/gguf_fuzz";
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> bytes(chars.size());
    std::memcpy(bytes.data(), chars.data(), chars.size());
    auto file = GgufFile::parse(bytes, entry.path().filename().string());
    bool should_parse = entry.path().filename().string().rfind("valid_", 0) == 0;
    EXPECT_EQ(file.ok(), should_parse)
        << entry.path() << ": " << (file.ok() ? "parsed" : file.error().message);
    ++seen;
  }
  EXPECT_GE(seen, 5);
}

}  // namespace
}  // namespace specula
