#pragma once
// Read-only mmap of a whole file (RAII). Refuses directories and unreadable paths with an
// Error that names the path.
#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>

#include "engine/core/expected.h"

namespace specula {

class MappedFile {
 public:
  static Expected<std::shared_ptr<MappedFile>> open(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::filesystem::path& path() const { return path_; }

 private:
  MappedFile() = default;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  std::filesystem::path path_;
};

}  // namespace specula
