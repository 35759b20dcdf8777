#pragma once
// safetensors reader over an mmap'ed file: an 8-byte little-endian header length, a JSON
// header {"name": {"dtype", "shape", "data_offsets": [begin, end)}, "__metadata__": {...}},
// then the data section the offsets are relative to. Only F32, F16, BF16 and I32 (index
// tensors) are accepted; every offset is checked against the file size, the shape and the
// other tensors.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/core/expected.h"
#include "engine/formats/mapped_file.h"
#include "engine/formats/tensor_type.h"

namespace specula {

struct SafetensorsTensor {
  std::string name;
  TensorType type = TensorType::F32;
  std::vector<int64_t> shape;       // as stored: row-major, outermost first ([out, in])
  uint64_t n_elements = 0;
  std::span<const std::byte> data;  // points into the mapping, already bounds-checked
};

class SafetensorsFile {
 public:
  static Expected<SafetensorsFile> open(const std::filesystem::path& path);
  // Parse from memory (used by the fuzzer); `origin` names the buffer in errors.
  static Expected<SafetensorsFile> parse(std::span<const std::byte> bytes, std::string origin);

  const std::filesystem::path& path() const { return path_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // by data offset
  const SafetensorsTensor* find(const std::string& name) const;
  // "__metadata__": the format's string map (a non-string value is kept as its JSON text).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The mapping behind the tensor views (null when parsed from caller memory).
  std::shared_ptr<const MappedFile> mapping() const { return mapping_; }

 private:
  std::shared_ptr<MappedFile> mapping_;
  std::filesystem::path path_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace specula
