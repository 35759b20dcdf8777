// libFuzzer target: SafetensorsFile::parse must turn any byte string into a file or an Error,
// never crash or read outside the input.
#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto file = specula::SafetensorsFile::parse(bytes, "fuzz.safetensors");
  if (file.ok()) {
    size_t checksum = 0;
    for (const auto& tensor : file->tensors()) {
      if (!tensor.data.empty()) checksum += static_cast<size_t>(tensor.data.front());
      if (file->find(tensor.name) == nullptr) __builtin_trap();
    }
    (void)checksum;
  } else if (file.error().message.empty()) {
    __builtin_trap();
  }
  return 0;
}
