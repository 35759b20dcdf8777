#include "engine/formats/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>

namespace specula {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF is read as little-endian");

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxArrayDepth = 16;       // real files nest at most 2; deeper is an attack
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
// Each array element becomes a ~48-byte GgufValue however small its encoding, so the total is
// capped: 4M elements (~200 MB) is 5x the largest real tokenizer (tokens + types + merges).
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 22;

std::string_view value_type_name(uint32_t type) {
  static constexpr std::string_view names[] = {"UINT8", "INT8",   "UINT16", "INT16", "UINT32",
                                               "INT32", "FLOAT32", "BOOL",  "STRING", "ARRAY",
                                               "UINT64", "INT64", "FLOAT64"};
  return type < std::size(names) ? names[type] : std::string_view("unknown");
}

// Smallest encoding of one value of `type`, used to refuse counts the remaining bytes cannot
// hold before allocating anything for them. 0 for unknown types.
uint64_t min_encoded_size(uint32_t type) {
  switch (static_cast<GgufValueType>(type)) {
    case GgufValueType::UINT8: case GgufValueType::INT8: case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16: case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32: case GgufValueType::INT32: case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64: case GgufValueType::INT64: case GgufValueType::FLOAT64: return 8;
    case GgufValueType::STRING: return 8;   // u64 length
    case GgufValueType::ARRAY: return 12;   // u32 element type + u64 count
  }
  return 0;
}

// Sequential little-endian reader with a sticky error: after the first failure every read
// returns zero/empty and the caller checks failed() once per logical step.
class Cursor {
 public:
  Cursor(std::span<const std::byte> bytes, const std::string& origin)
      : bytes_(bytes), origin_(origin) {}

  bool failed() const { return error_.has_value(); }
  const std::string& error() const { return *error_; }
  uint64_t pos() const { return pos_; }
  uint64_t size() const { return bytes_.size(); }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  // Counts array elements against kMaxArrayElements; false (and failed) once over.
  bool charge_array_elements(uint64_t count, const std::string& what) {
    array_elements_ += count;
    if (array_elements_ <= kMaxArrayElements) return true;
    fail(what + ": metadata arrays hold more than " + std::to_string(kMaxArrayElements) +
         " elements in total");
    return false;
  }

  void fail(const std::string& what) {
    if (!error_) error_ = origin_ + ": " + what;
  }

  template <class T>
  T read(const std::string& what) {
    T value{};
    if (failed()) return value;
    if (remaining() < sizeof(T)) {
      fail("truncated: need " + std::to_string(sizeof(T)) + " bytes for " + what +
           " at offset " + std::to_string(pos_) + ", file size " + std::to_string(size()));
      return value;
    }
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  std::string read_string(const std::string& what) {
    uint64_t length = read<uint64_t>("length of " + what);
    if (failed()) return {};
    if (length > remaining()) {
      fail(what + ": string length " + std::to_string(length) + " at offset " +
           std::to_string(pos_ - 8) + " exceeds the " + std::to_string(remaining()) +
           " bytes left in the file");
      return {};
    }
    std::string text(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
    pos_ += length;
    return text;
  }

 private:
  std::span<const std::byte> bytes_;
  const std::string& origin_;
  uint64_t pos_ = 0;
  uint64_t array_elements_ = 0;
  std::optional<std::string> error_;
};

GgufValue read_value(Cursor& in, uint32_t type, int depth, const std::string& what);

GgufValue read_array(Cursor& in, int depth, const std::string& what) {
  GgufValue result{GgufValueType::ARRAY, std::make_shared<GgufArray>()};
  auto& array = *std::get<std::shared_ptr<GgufArray>>(result.value);
  uint32_t element_type = in.read<uint32_t>("element type of " + what);
  uint64_t count = in.read<uint64_t>("element count of " + what);
  if (in.failed()) return result;
  uint64_t min_size = min_encoded_size(element_type);
  if (min_size == 0) {
    in.fail(what + ": unknown array element type " + std::to_string(element_type));
    return result;
  }
  if (depth >= kMaxArrayDepth) {
    in.fail(what + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth));
    return result;
  }
  if (count > in.remaining() / min_size) {
    in.fail(what + ": array of " + std::to_string(count) + " " +
            std::string(value_type_name(element_type)) + " elements cannot fit in the " +
            std::to_string(in.remaining()) + " bytes left in the file");
    return result;
  }
  if (!in.charge_array_elements(count, what)) return result;
  array.element_type = static_cast<GgufValueType>(element_type);
  array.items.reserve(count);
  for (uint64_t i = 0; i < count && !in.failed(); ++i) {
    array.items.push_back(
        read_value(in, element_type, depth + 1, what + "[" + std::to_string(i) + "]"));
  }
  return result;
}

GgufValue read_value(Cursor& in, uint32_t type, int depth, const std::string& what) {
  auto value_type = static_cast<GgufValueType>(type);
  switch (value_type) {
    case GgufValueType::UINT8: return {value_type, uint64_t{in.read<uint8_t>(what)}};
    case GgufValueType::UINT16: return {value_type, uint64_t{in.read<uint16_t>(what)}};
    case GgufValueType::UINT32: return {value_type, uint64_t{in.read<uint32_t>(what)}};
    case GgufValueType::UINT64: return {value_type, uint64_t{in.read<uint64_t>(what)}};
    case GgufValueType::INT8: return {value_type, int64_t{in.read<int8_t>(what)}};
    case GgufValueType::INT16: return {value_type, int64_t{in.read<int16_t>(what)}};
    case GgufValueType::INT32: return {value_type, int64_t{in.read<int32_t>(what)}};
    case GgufValueType::INT64: return {value_type, int64_t{in.read<int64_t>(what)}};
    case GgufValueType::FLOAT32: return {value_type, double{in.read<float>(what)}};
    case GgufValueType::FLOAT64: return {value_type, double{in.read<double>(what)}};
    case GgufValueType::BOOL: {
      uint8_t byte = in.read<uint8_t>(what);
      if (byte > 1) in.fail(what + ": bool value " + std::to_string(byte) + " is not 0 or 1");
      return {value_type, byte == 1};
    }
    case GgufValueType::STRING: return {value_type, in.read_string(what)};
    case GgufValueType::ARRAY: return read_array(in, depth, what);
  }
  in.fail(what + ": unknown value type " + std::to_string(type));
  return {GgufValueType::UINT8, uint64_t{0}};
}

std::string in_quotes(const std::string& name) { return "'" + name + "'"; }

}  // namespace

std::optional<int64_t> GgufValue::as_int() const {
  if (auto* u = std::get_if<uint64_t>(&value)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  if (auto* i = std::get_if<int64_t>(&value)) return *i;
  return std::nullopt;
}

std::optional<double> GgufValue::as_float() const {
  if (auto* d = std::get_if<double>(&value)) return *d;
  if (auto* u = std::get_if<uint64_t>(&value)) return static_cast<double>(*u);
  if (auto* i = std::get_if<int64_t>(&value)) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const {
  if (auto* b = std::get_if<bool>(&value)) return *b;
  return std::nullopt;
}

const std::string* GgufValue::as_string() const { return std::get_if<std::string>(&value); }

const GgufArray* GgufValue::as_array() const {
  auto* array = std::get_if<std::shared_ptr<GgufArray>>(&value);
  return array ? array->get() : nullptr;
}

Expected<GgufFile> GgufFile::open(const std::filesystem::path& path) {
  auto mapping = MappedFile::open(path);
  if (!mapping) return mapping.error();
  auto file = parse((*mapping)->bytes(), path.string());
  if (!file) return file.error();
  file->mapping_ = std::move(*mapping);
  file->path_ = path;
  return file;
}

Expected<GgufFile> GgufFile::parse(std::span<const std::byte> bytes, std::string origin) {
  GgufFile file;
  file.path_ = origin;
  if (bytes.empty()) return make_error(origin + ": empty file (0 bytes), expected GGUF");
  Cursor in(bytes, origin);

  uint32_t magic = in.read<uint32_t>("magic");
  if (in.failed()) return make_error(in.error());
  if (magic != kMagic) return make_error(origin + ": not a GGUF file (bad magic)");
  file.version_ = in.read<uint32_t>("version");
  if (in.failed()) return make_error(in.error());
  if (file.version_ != 2 && file.version_ != 3) {
    return make_error(origin + ": unsupported GGUF version " + std::to_string(file.version_) +
                      " (supported: 2, 3)");
  }
  uint64_t tensor_count = in.read<uint64_t>("tensor count");
  uint64_t kv_count = in.read<uint64_t>("metadata count");
  if (in.failed()) return make_error(in.error());
  // Lower bounds per entry: key length + type + 1 value byte; name length + n_dims + one
  // dim + type + offset.
  if (kv_count > in.remaining() / 13) {
    return make_error(origin + ": metadata count " + std::to_string(kv_count) +
                      " cannot fit in the " + std::to_string(in.remaining()) +
                      " bytes left in the file");
  }
  if (tensor_count > in.remaining() / 32) {
    return make_error(origin + ": tensor count " + std::to_string(tensor_count) +
                      " cannot fit in the " + std::to_string(in.remaining()) +
                      " bytes left in the file");
  }

  for (uint64_t i = 0; i < kv_count && !in.failed(); ++i) {
    std::string key = in.read_string("metadata key #" + std::to_string(i));
    uint32_t type = in.read<uint32_t>("type of metadata key " + in_quotes(key));
    if (in.failed()) break;
    GgufValue value = read_value(in, type, 0, "metadata key " + in_quotes(key));
    if (in.failed()) break;
    if (!file.metadata_.emplace(key, std::move(value)).second) {
      return make_error(origin + ": duplicate metadata key " + in_quotes(key));
    }
  }
  if (in.failed()) return make_error(in.error());

  if (const GgufValue* alignment = file.find("general.alignment")) {
    auto value = alignment->as_int();
    if (!value || *value <= 0 || !std::has_single_bit(static_cast<uint64_t>(*value))) {
      return make_error(origin + ": general.alignment must be a nonzero power of 2, got " +
                        (value ? std::to_string(*value) : "a non-integer value"));
    }
    file.alignment_ = static_cast<uint64_t>(*value);
  }

  file.tensors_.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count && !in.failed(); ++i) {
    GgufTensorInfo info;
    info.name = in.read_string("tensor #" + std::to_string(i) + " name");
    std::string what = "tensor " + in_quotes(info.name);
    uint32_t n_dims = in.read<uint32_t>("dimension count of " + what);
    if (in.failed()) break;
    if (n_dims == 0 || n_dims > kMaxDims) {
      return make_error(origin + ": " + what + ": " + std::to_string(n_dims) +
                        " dimensions (supported: 1 to " + std::to_string(kMaxDims) + ")");
    }
    info.n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = in.read<uint64_t>("dimension " + std::to_string(d) + " of " + what);
      if (in.failed()) break;
      if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          info.n_elements > std::numeric_limits<uint64_t>::max() / dim) {
        return make_error(origin + ": " + what + ": dimension " + std::to_string(d) + " is " +
                          std::to_string(dim) +
                          (dim == 0 ? " (must be > 0)" : " (element count overflows)"));
      }
      info.n_elements *= dim;
      info.shape.push_back(static_cast<int64_t>(dim));
    }
    uint32_t raw_type = in.read<uint32_t>("type of " + what);
    info.offset = in.read<uint64_t>("data offset of " + what);
    if (in.failed()) break;
    auto traits = tensor_type_traits(raw_type);
    if (!traits) {
      return make_error(origin + ": " + what + ": unknown tensor type " +
                        std::to_string(raw_type));
    }
    info.type = static_cast<TensorType>(raw_type);
    auto n_bytes = tensor_data_bytes(info.type, info.n_elements);
    if (!n_bytes) {
      return make_error(origin + ": " + what + ": " + std::to_string(info.n_elements) +
                        " elements of " + std::string(traits->name) + " (block size " +
                        std::to_string(traits->block_elems) +
                        ") is not a whole number of blocks or overflows");
    }
    info.n_bytes = *n_bytes;
    if (info.offset % file.alignment_ != 0) {
      return make_error(origin + ": " + what + ": offset " + std::to_string(info.offset) +
                        " is not a multiple of the alignment " +
                        std::to_string(file.alignment_));
    }
    if (!file.tensor_index_.emplace(info.name, file.tensors_.size()).second) {
      return make_error(origin + ": duplicate tensor name " + in_quotes(info.name));
    }
    file.tensors_.push_back(std::move(info));
  }
  if (in.failed()) return make_error(in.error());

  // The data section starts at the next multiple of the alignment after the tensor table.
  uint64_t data_start = in.pos() + (file.alignment_ - in.pos() % file.alignment_) % file.alignment_;
  uint64_t file_size = bytes.size();
  for (auto& info : file.tensors_) {
    uint64_t begin = data_start + info.offset;  // only used once the checks below pass
    if (info.offset > file_size || data_start > file_size - info.offset ||
        info.n_bytes > file_size - begin) {
      return make_error(origin + ": tensor " + in_quotes(info.name) + ": offset " +
                        std::to_string(info.offset) + " + " + std::to_string(info.n_bytes) +
                        " bytes (data section at " + std::to_string(data_start) +
                        ") beyond end of file (size " + std::to_string(file_size) + ")");
    }
    info.data = bytes.subspan(begin, info.n_bytes);
  }

  std::vector<const GgufTensorInfo*> by_offset;
  for (auto& info : file.tensors_) by_offset.push_back(&info);
  std::sort(by_offset.begin(), by_offset.end(),
            [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto* prev = by_offset[i - 1];
    if (prev->offset + prev->n_bytes > by_offset[i]->offset) {
      return make_error(origin + ": tensor " + in_quotes(by_offset[i]->name) + " at offset " +
                        std::to_string(by_offset[i]->offset) + " overlaps tensor " +
                        in_quotes(prev->name) + " (offset " + std::to_string(prev->offset) +
                        ", " + std::to_string(prev->n_bytes) + " bytes)");
    }
  }
  return file;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
Error key_error(const std::filesystem::path& path, const std::string& key, const GgufValue* value,
                const char* expected) {
  if (!value) return make_error(path.string() + ": metadata key " + in_quotes(key) + " missing");
  return make_error(path.string() + ": metadata key " + in_quotes(key) + " has type " +
                    std::string(value_type_name(static_cast<uint32_t>(value->type))) +
                    ", expected " + expected);
}
}  // namespace

Expected<int64_t> GgufFile::get_int(const std::string& key) const {
  const GgufValue* value = find(key);
  if (value) {
    if (auto result = value->as_int()) return *result;
  }
  return key_error(path_, key, value, "an integer");
}

Expected<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* value = find(key);
  if (value) {
    if (auto result = value->as_float()) return *result;
  }
  return key_error(path_, key, value, "a number");
}

Expected<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* value = find(key);
  if (value) {
    if (auto* text = value->as_string()) return *text;
  }
  return key_error(path_, key, value, "a string");
}

std::optional<std::vector<std::string>> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* value = find(key);
  const GgufArray* array = value ? value->as_array() : nullptr;
  if (!array || array->element_type != GgufValueType::STRING) return std::nullopt;
  std::vector<std::string> strings;
  strings.reserve(array->items.size());
  for (const auto& item : array->items) strings.push_back(*item.as_string());
  return strings;
}

}  // namespace specula
