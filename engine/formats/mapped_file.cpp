#include "engine/formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace specula {

Expected<std::shared_ptr<MappedFile>> MappedFile::open(const std::filesystem::path& path) {
  const std::string name = path.string();
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below anyway.
  int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return make_error(name + ": cannot open: " + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    int err = errno;
    ::close(fd);
    return make_error(name + ": cannot stat: " + std::strerror(err));
  }
  if (S_ISDIR(info.st_mode)) {
    ::close(fd);
    return make_error(name + ": is a directory, expected a file");
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return make_error(name + ": not a regular file");
  }

  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(info.st_size);
  if (file->size_ > 0) {  // mmap of length 0 fails; an empty file maps to an empty span
    void* address = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (address == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return make_error(name + ": cannot mmap " + std::to_string(file->size_) +
                        " bytes: " + std::strerror(err));
    }
    file->data_ = static_cast<const std::byte*>(address);
  }
  ::close(fd);  // the mapping stays valid after close
  return file;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
}

}  // namespace specula
