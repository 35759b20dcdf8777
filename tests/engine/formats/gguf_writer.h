#pragma once
// Minimal GGUF writer for tests: builds valid files field by field, and lets a test override
// any count or offset to build the malformed ones. Writes little-endian, as GGUF requires.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace specula::testing {

// Raw little-endian byte builder.
struct GgufBytes {
  std::vector<std::byte> bytes;

  template <class T>
  GgufBytes& put(T value) {
    const auto* raw = reinterpret_cast<const std::byte*>(&value);
    bytes.insert(bytes.end(), raw, raw + sizeof(T));
    return *this;
  }
  GgufBytes& str(std::string_view text) {
    put<uint64_t>(text.size());
    const auto* raw = reinterpret_cast<const std::byte*>(text.data());
    bytes.insert(bytes.end(), raw, raw + text.size());
    return *this;
  }
  GgufBytes& append(const GgufBytes& other) {
    bytes.insert(bytes.end(), other.bytes.begin(), other.bytes.end());
    return *this;
  }
};

// GGUF value type numbers (gguf.h GgufValueType).
enum : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8,
  kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

struct GgufTensorSpec {
  std::string name;
  std::vector<uint64_t> dims;       // ggml order
  uint32_t type = 0;                // ggml_type, 0 = F32
  std::vector<std::byte> data;      // raw bytes, placed aligned in the data section
  std::optional<uint64_t> offset;   // override the computed offset
};

class GgufWriter {
 public:
  uint32_t version = 3;
  uint32_t magic = 0x46554747;
  uint64_t alignment = 32;          // used for layout; add general.alignment to change it
  std::optional<uint64_t> tensor_count_override, kv_count_override;

  // Appends a key with an already-encoded value (type number + payload).
  GgufWriter& kv(std::string_view key, uint32_t type, const GgufBytes& payload) {
    kvs_.str(key).put<uint32_t>(type).append(payload);
    ++kv_count_;
    return *this;
  }
  GgufWriter& kv_u32(std::string_view key, uint32_t value) {
    return kv(key, kU32, GgufBytes().put<uint32_t>(value));
  }
  GgufWriter& kv_f32(std::string_view key, float value) {
    return kv(key, kF32, GgufBytes().put<float>(value));
  }
  GgufWriter& kv_str(std::string_view key, std::string_view value) {
    return kv(key, kString, GgufBytes().str(value));
  }
  GgufWriter& kv_bool(std::string_view key, bool value) {
    return kv(key, kBool, GgufBytes().put<uint8_t>(value ? 1 : 0));
  }
  GgufWriter& kv_strings(std::string_view key, const std::vector<std::string>& values) {
    GgufBytes payload;
    payload.put<uint32_t>(kString).put<uint64_t>(values.size());
    for (const auto& value : values) payload.str(value);
    return kv(key, kArray, payload);
  }
  GgufWriter& tensor(GgufTensorSpec spec) {
    tensors_.push_back(std::move(spec));
    return *this;
  }

  std::vector<std::byte> build() const {
    GgufBytes out;
    out.put<uint32_t>(magic).put<uint32_t>(version);
    out.put<uint64_t>(tensor_count_override.value_or(tensors_.size()));
    out.put<uint64_t>(kv_count_override.value_or(kv_count_));
    out.append(kvs_);
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const auto& spec : tensors_) {
      offsets.push_back(spec.offset.value_or(next));
      next = align(next + spec.data.size());
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& spec = tensors_[i];
      out.str(spec.name).put<uint32_t>(static_cast<uint32_t>(spec.dims.size()));
      for (uint64_t dim : spec.dims) out.put<uint64_t>(dim);
      out.put<uint32_t>(spec.type).put<uint64_t>(offsets[i]);
    }
    out.bytes.resize(align(out.bytes.size()));
    size_t data_start = out.bytes.size();
    uint64_t cursor = 0;
    for (const auto& spec : tensors_) {  // data laid out sequentially regardless of overrides
      out.bytes.resize(data_start + cursor);
      out.bytes.insert(out.bytes.end(), spec.data.begin(), spec.data.end());
      cursor = align(cursor + spec.data.size());
    }
    return out.bytes;
  }

  void write(const std::filesystem::path& path) const {
    auto bytes = build();
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }

 private:
  uint64_t align(uint64_t value) const { return (value + alignment - 1) / alignment * alignment; }

  GgufBytes kvs_;
  uint64_t kv_count_ = 0;
  std::vector<GgufTensorSpec> tensors_;
};

inline std::vector<std::byte> f32_bytes(const std::vector<float>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

}  // namespace specula::testing
