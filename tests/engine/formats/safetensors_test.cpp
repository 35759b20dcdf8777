#include "engine/formats/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace specula {
namespace {

using ::testing::HasSubstr;

// 8-byte little-endian header length, the JSON header, then `data_bytes` bytes 0, 1, 2, ...
std::vector<std::byte> make_file(const std::string& header, size_t data_bytes) {
  std::vector<std::byte> bytes(8 + header.size() + data_bytes);
  uint64_t length = header.size();
  std::memcpy(bytes.data(), &length, 8);
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  for (size_t i = 0; i < data_bytes; ++i) bytes[8 + header.size() + i] = std::byte(i & 0xFF);
  return bytes;
}

std::string parse_error(const std::vector<std::byte>& bytes) {
  auto file = SafetensorsFile::parse(bytes, "model.safetensors");
  EXPECT_FALSE(file.ok()) << "expected a parse error";
  return file.ok() ? std::string() : file.error().message;
}

const std::string kValidHeader =
    R"({"__metadata__": {"format": "pt"},)"
    R"( "b": {"dtype": "F16", "shape": [2, 3], "data_offsets": [24, 36]},)"
    R"( "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},)"
    R"( "c": {"dtype": "BF16", "shape": [4], "data_offsets": [36, 44]}})";

TEST(Safetensors, ParsesTensorsInDataOrder) {
  auto bytes = make_file(kValidHeader, 44);
  auto file = SafetensorsFile::parse(bytes, "model.safetensors");
  ASSERT_TRUE(file.ok()) << file.error().message;
  ASSERT_EQ(file->tensors().size(), 3u);
  EXPECT_EQ(file->tensors()[0].name, "a");
  EXPECT_EQ(file->tensors()[2].name, "c");
  const auto* b = file->find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->type, TensorType::F16);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(b->n_elements, 6u);
  ASSERT_EQ(b->data.size(), 12u);
  EXPECT_EQ(b->data[0], std::byte{24});
  EXPECT_EQ(b->data.data(), bytes.data() + 8 + kValidHeader.size() + 24);
  EXPECT_EQ(file->find("c")->type, TensorType::BF16);
  EXPECT_EQ(file->find("__metadata__"), nullptr);
}

TEST(Safetensors, OpensFromDisk) {
  auto path = std::filesystem::temp_directory_path() / "specula_safetensors_test.safetensors";
  auto bytes = make_file(kValidHeader, 44);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.error().message;
  EXPECT_EQ(file->tensors().size(), 3u);
  EXPECT_NE(file->mapping(), nullptr);
  std::filesystem::remove(path);
}

TEST(Safetensors, TruncatedAndEmptyFiles) {
  EXPECT_THAT(parse_error({}), HasSubstr("model.safetensors: empty file"));
  EXPECT_THAT(parse_error(std::vector<std::byte>(5)), HasSubstr("truncated: 5 bytes, need 8"));
  auto bytes = make_file(kValidHeader, 44);
  for (size_t size = 8; size < bytes.size(); ++size) {
    std::vector<std::byte> prefix(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(size));
    EXPECT_FALSE(SafetensorsFile::parse(prefix, "x").ok()) << "prefix of " << size << " bytes";
  }
}

TEST(Safetensors, HeaderLengthBeyondFile) {
  auto bytes = make_file("{}", 0);
  uint64_t huge = ~uint64_t{0};
  std::memcpy(bytes.data(), &huge, 8);
  EXPECT_THAT(parse_error(bytes), HasSubstr("header length 18446744073709551615 beyond end of file (size 10)"));
}

TEST(Safetensors, MalformedJson) {
  EXPECT_THAT(parse_error(make_file("{\"a\": ", 0)), HasSubstr("header is not valid JSON"));
  EXPECT_THAT(parse_error(make_file("[1, 2]", 0)), HasSubstr("header is not a JSON object"));
  EXPECT_THAT(parse_error(make_file(R"({"a": 5})", 0)), HasSubstr("tensor 'a': header entry is not a JSON object"));
  EXPECT_THAT(parse_error(make_file(R"({"a": {"shape": [1], "data_offsets": [0, 4]}})", 4)),
              HasSubstr("tensor 'a': missing string field 'dtype'"));
  EXPECT_THAT(parse_error(make_file(R"({"a": {"dtype": "F32", "data_offsets": [0, 4]}})", 4)),
              HasSubstr("missing array field 'shape'"));
  EXPECT_THAT(parse_error(make_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 4]}})", 4)),
              HasSubstr("'data_offsets' must be two non-negative integers"));
  EXPECT_THAT(parse_error(make_file(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4)),
              HasSubstr("non-integer or negative dimension"));
}

TEST(Safetensors, UnsupportedDtypeNamesTensorAndDtype) {
  auto bytes = make_file(R"({"model.embed_tokens.weight": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", 8);
  EXPECT_THAT(
      parse_error(bytes),
      HasSubstr("tensor 'model.embed_tokens.weight': unsupported dtype 'I64' (supported: F32, F16, BF16, I32)"));
}

TEST(Safetensors, I32IndexTensorsAreCheckedLikeTheOthers) {
  auto bytes = make_file(R"({"vocab_ids": {"dtype": "I32", "shape": [3], "data_offsets": [0, 12]}})", 12);
  auto file = SafetensorsFile::parse(bytes, "head.safetensors");
  ASSERT_TRUE(file.ok()) << file.error().message;
  const auto* ids = file->find("vocab_ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(ids->type, TensorType::I32);
  EXPECT_EQ(ids->n_elements, 3u);
  EXPECT_EQ(ids->data.size(), 12u);
  // 4 bytes an element: 3 elements in 8 bytes, or beyond the data, are refused as for F32.
  EXPECT_THAT(parse_error(make_file(R"({"ids": {"dtype": "I32", "shape": [3], "data_offsets": [0, 8]}})", 8)),
              HasSubstr("tensor 'ids': shape [3] of I32 needs 12 bytes but data_offsets [0, 8) span 8"));
  EXPECT_THAT(parse_error(make_file(R"({"ids": {"dtype": "I32", "shape": [3], "data_offsets": [0, 12]}})", 8)),
              HasSubstr("tensor 'ids': data_offsets [0, 12) beyond end of data section (size 8)"));
}

TEST(Safetensors, MetadataIsAStringMap) {
  auto file = SafetensorsFile::parse(make_file(kValidHeader, 44), "model.safetensors");
  ASSERT_TRUE(file.ok()) << file.error().message;
  EXPECT_EQ(file->metadata().size(), 1u);
  EXPECT_EQ(file->metadata().at("format"), "pt");
  auto numbers = SafetensorsFile::parse(make_file(R"({"__metadata__": {"version": 1}})", 0), "x");
  ASSERT_TRUE(numbers.ok()) << numbers.error().message;
  EXPECT_EQ(numbers->metadata().at("version"), "1");  // not a string: kept as its JSON text
  EXPECT_THAT(parse_error(make_file(R"({"__metadata__": [1]})", 0)), HasSubstr("'__metadata__' is not a JSON object"));
}

TEST(Safetensors, OffsetsValidatedAgainstFileShapeAndEachOther) {
  EXPECT_THAT(parse_error(make_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4)),
              HasSubstr("tensor 'a': data_offsets [0, 8) beyond end of data section (size 4)"));
  EXPECT_THAT(parse_error(make_file(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8)),
              HasSubstr("shape [3] of F32 needs 12 bytes but data_offsets [0, 8) span 8"));
  EXPECT_THAT(parse_error(make_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 8)),
              HasSubstr("end before they begin"));
  EXPECT_THAT(parse_error(make_file(
                  R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12)),
              HasSubstr("tensor 'b' data [4, 12) overlaps tensor 'a' [0, 8)"));
  EXPECT_THAT(parse_error(make_file(
                  R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 4294967296], "data_offsets": [0, 8]}})", 8)),
              HasSubstr("overflows the element count"));
  EXPECT_THAT(parse_error(make_file(
                  R"({"a": {"dtype": "F32", "shape": [4294967296, 1073741824], "data_offsets": [0, 8]}})", 8)),
              HasSubstr("needs more bytes"));
}

TEST(Safetensors, DirectoryPath) {
  auto file = SafetensorsFile::open(std::filesystem::temp_directory_path());
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.error().message, HasSubstr("is a directory"));
}

// Committed fuzz seeds: valid.safetensors, empty_header and the real shard parse; the rest fail.
TEST(Safetensors, FuzzSeedsBehaveAsNamed) {
  auto dir = std::filesystem::path(SPECULA_TEST_DATA_DIR) / "../fuzz/corpus/safetensors_fuzz";
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> bytes(chars.size());
    std::memcpy(bytes.data(), chars.data(), chars.size());
    auto file = SafetensorsFile::parse(bytes, entry.path().filename().string());
    std::string name = entry.path().filename().string();
    bool should_parse = name == "valid.safetensors" || name == "empty_header.safetensors" ||
                        name == "tiny_llama_layers.safetensors";
    EXPECT_EQ(file.ok(), should_parse) << name << ": " << (file.ok() ? "parsed" : file.error().message);
    if (name == "tiny_llama_layers.safetensors" && file.ok()) {
      EXPECT_EQ(file->tensors().size(), 19u);
    }
    ++seen;
  }
  EXPECT_GE(seen, 5);
}

}  // namespace
}  // namespace specula
