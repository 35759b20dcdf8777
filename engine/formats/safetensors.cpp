#include "engine/formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

namespace specula {
namespace {

constexpr size_t kMaxDims = 8;
// The reference implementation (safetensors crate) refuses headers above 100 MB; so do we,
// since the parsed JSON costs several times its text.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

std::string in_quotes(const std::string& name) { return "'" + name + "'"; }

// dtype string -> element type and size; nullopt for dtypes Specula does not load.
std::optional<std::pair<TensorType, uint64_t>> parse_dtype(const std::string& dtype) {
  if (dtype == "F32") return std::pair{TensorType::F32, uint64_t{4}};
  if (dtype == "F16") return std::pair{TensorType::F16, uint64_t{2}};
  if (dtype == "BF16") return std::pair{TensorType::BF16, uint64_t{2}};
  if (dtype == "I32") return std::pair{TensorType::I32, uint64_t{4}};  // index tensors (draft heads' vocab_ids)
  return std::nullopt;
}

struct RawTensor {
  SafetensorsTensor tensor;
  uint64_t begin = 0, end = 0;  // [begin, end) relative to the data section
};

Expected<RawTensor> parse_entry(const std::string& origin, const std::string& name,
                                const nlohmann::json& entry, uint64_t data_size) {
  std::string where = origin + ": tensor " + in_quotes(name) + ": ";
  if (!entry.is_object()) return make_error(where + "header entry is not a JSON object");
  auto dtype_it = entry.find("dtype");
  auto shape_it = entry.find("shape");
  auto offsets_it = entry.find("data_offsets");
  if (dtype_it == entry.end() || !dtype_it->is_string()) {
    return make_error(where + "missing string field 'dtype'");
  }
  if (shape_it == entry.end() || !shape_it->is_array()) {
    return make_error(where + "missing array field 'shape'");
  }
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
    return make_error(where + "'data_offsets' must be two non-negative integers [begin, end]");
  }

  RawTensor raw;
  raw.tensor.name = name;
  const std::string dtype = dtype_it->get<std::string>();
  auto type = parse_dtype(dtype);
  if (!type) {
    return make_error(where + "unsupported dtype " + in_quotes(dtype) + " (supported: F32, F16, BF16, I32)");
  }
  raw.tensor.type = type->first;

  if (shape_it->size() > kMaxDims) {
    return make_error(where + std::to_string(shape_it->size()) + " dimensions (at most " +
                      std::to_string(kMaxDims) + ")");
  }
  uint64_t n_elements = 1;
  for (const auto& dim_json : *shape_it) {
    if (!dim_json.is_number_unsigned()) {
      return make_error(where + "shape " + shape_it->dump() + " has a non-integer or negative dimension");
    }
    uint64_t dim = dim_json.get<uint64_t>();
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (dim != 0 && n_elements > std::numeric_limits<uint64_t>::max() / dim)) {
      return make_error(where + "shape " + shape_it->dump() + " overflows the element count");
    }
    n_elements *= dim;
    raw.tensor.shape.push_back(static_cast<int64_t>(dim));
  }
  raw.tensor.n_elements = n_elements;

  raw.begin = (*offsets_it)[0].get<uint64_t>();
  raw.end = (*offsets_it)[1].get<uint64_t>();
  if (raw.begin > raw.end) {
    return make_error(where + "data_offsets [" + std::to_string(raw.begin) + ", " +
                      std::to_string(raw.end) + ") end before they begin");
  }
  if (raw.end > data_size) {
    return make_error(where + "data_offsets [" + std::to_string(raw.begin) + ", " +
                      std::to_string(raw.end) + ") beyond end of data section (size " +
                      std::to_string(data_size) + ")");
  }
  uint64_t expected_bytes = n_elements * type->second;  // n_elements <= data_size / 1 below
  if (n_elements > data_size || expected_bytes != raw.end - raw.begin) {
    return make_error(where + "shape " + shape_it->dump() + " of " + dtype + " needs " +
                      (n_elements > data_size ? std::string("more") : std::to_string(expected_bytes)) +
                      " bytes but data_offsets [" + std::to_string(raw.begin) + ", " +
                      std::to_string(raw.end) + ") span " + std::to_string(raw.end - raw.begin));
  }
  return raw;
}

}  // namespace

Expected<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  auto mapping = MappedFile::open(path);
  if (!mapping) return mapping.error();
  auto file = parse((*mapping)->bytes(), path.string());
  if (!file) return file.error();
  file->mapping_ = std::move(*mapping);
  file->path_ = path;
  return file;
}

Expected<SafetensorsFile> SafetensorsFile::parse(std::span<const std::byte> bytes,
                                                 std::string origin) {
  if (bytes.empty()) return make_error(origin + ": empty file (0 bytes), expected safetensors");
  if (bytes.size() < 8) {
    return make_error(origin + ": truncated: " + std::to_string(bytes.size()) +
                      " bytes, need 8 for the header length");
  }
  uint64_t header_size;
  std::memcpy(&header_size, bytes.data(), 8);  // little-endian on every supported host
  if (header_size > bytes.size() - 8) {
    return make_error(origin + ": header length " + std::to_string(header_size) +
                      " beyond end of file (size " + std::to_string(bytes.size()) + ")");
  }
  if (header_size > kMaxHeaderBytes) {
    return make_error(origin + ": header length " + std::to_string(header_size) +
                      " exceeds the " + std::to_string(kMaxHeaderBytes) + "-byte limit");
  }
  const char* header_begin = reinterpret_cast<const char*>(bytes.data() + 8);
  auto header = nlohmann::json::parse(header_begin, header_begin + header_size,
                                      /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return make_error(origin + ": header is not valid JSON");
  if (!header.is_object()) return make_error(origin + ": header is not a JSON object");

  SafetensorsFile file;
  file.path_ = origin;
  const uint64_t data_offset = 8 + header_size;
  const uint64_t data_size = bytes.size() - data_offset;
  std::vector<RawTensor> raws;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return make_error(origin + ": '__metadata__' is not a JSON object");
      for (const auto& [key, value] : entry.items()) {
        file.metadata_[key] = value.is_string() ? value.get<std::string>() : value.dump();
      }
      continue;
    }
    auto raw = parse_entry(origin, name, entry, data_size);
    if (!raw) return raw.error();
    raws.push_back(std::move(*raw));
  }
  std::sort(raws.begin(), raws.end(), [](const RawTensor& a, const RawTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < raws.size(); ++i) {
    if (raws[i].begin < raws[i - 1].end) {
      return make_error(origin + ": tensor " + in_quotes(raws[i].tensor.name) + " data [" +
                        std::to_string(raws[i].begin) + ", " + std::to_string(raws[i].end) +
                        ") overlaps tensor " + in_quotes(raws[i - 1].tensor.name) + " [" +
                        std::to_string(raws[i - 1].begin) + ", " +
                        std::to_string(raws[i - 1].end) + ")");
    }
  }
  for (auto& raw : raws) {
    raw.tensor.data = bytes.subspan(data_offset + raw.begin, raw.end - raw.begin);
    file.index_.emplace(raw.tensor.name, file.tensors_.size());
    file.tensors_.push_back(std::move(raw.tensor));
  }
  return file;
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace specula
