#pragma once
// GGUF v2/v3 reader over an mmap'ed file. Every count, length and offset is bounds- and
// overflow-checked before use; a malformed file yields an Error naming the file and the field.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "engine/core/expected.h"
#include "engine/formats/mapped_file.h"
#include "engine/formats/tensor_type.h"

namespace specula {

enum class GgufValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

struct GgufValue;
struct GgufArray {
  GgufValueType element_type;
  std::vector<GgufValue> items;  // nested arrays are arrays of GgufValue holding GgufArray
};

struct GgufValue {
  GgufValueType type;
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<GgufArray>> value;

  // Convenience accessors; nullopt when the stored type does not fit.
  std::optional<int64_t> as_int() const;
  std::optional<double> as_float() const;
  std::optional<bool> as_bool() const;
  const std::string* as_string() const;
  const GgufArray* as_array() const;
};

struct GgufTensorInfo {
  std::string name;
  TensorType type;
  std::vector<int64_t> shape;          // ggml order, shape[0] contiguous
  uint64_t offset;                     // relative to the data section
  uint64_t n_elements;
  uint64_t n_bytes;
  std::span<const std::byte> data;     // points into the mapping, already bounds-checked
};

class GgufFile {
 public:
  static Expected<GgufFile> open(const std::filesystem::path& path);
  // Parse from memory (used by the fuzzer); `origin` names the buffer in errors.
  static Expected<GgufFile> parse(std::span<const std::byte> bytes, std::string origin);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  const GgufValue* find(const std::string& key) const;
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  // Typed metadata lookups: an Error names the key when missing or of the wrong type.
  Expected<int64_t> get_int(const std::string& key) const;
  Expected<double> get_float(const std::string& key) const;
  Expected<std::string> get_string(const std::string& key) const;
  std::optional<std::vector<std::string>> get_string_array(const std::string& key) const;

 private:
  std::shared_ptr<MappedFile> mapping_;  // null when parsed from caller-owned memory
  std::filesystem::path path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace specula
