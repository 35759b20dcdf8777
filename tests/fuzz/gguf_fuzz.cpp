// libFuzzer target: GgufFile::parse must turn any byte string into a GgufFile or an Error,
// never crash, hang or allocate more than the input can justify.
#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/formats/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto file = specula::GgufFile::parse(bytes, "fuzz.gguf");
  if (file.ok()) {
    // Touch what a loader would read: every tensor's bytes are inside the input.
    size_t checksum = 0;
    for (const auto& tensor : file->tensors()) {
      if (!tensor.data.empty()) checksum += static_cast<size_t>(tensor.data.back());
      (void)file->find_tensor(tensor.name);
    }
    (void)file->get_string_array("tokenizer.ggml.tokens");
    (void)file->get_int("general.alignment");
    (void)checksum;
  } else if (file.error().message.empty()) {
    __builtin_trap();  // every error must say what went wrong
  }
  return 0;
}
