#include "engine/model/model_identity.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <memory>
#include <vector>

#include "engine/formats/mapped_file.h"

namespace specula {
namespace {

// OpenSSL's EVP interface (hardware SHA extensions where the CPU has them) rather than a
// hand-written SHA-256.
struct DigestContext {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx{EVP_MD_CTX_new(), &EVP_MD_CTX_free};
};

std::string to_hex(std::span<const unsigned char> digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(digest.size() * 2);
  for (unsigned char b : digest) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

}  // namespace

std::string sha256_hex(std::span<const std::byte> bytes) {
  DigestContext d;
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  if (!d.ctx || EVP_DigestInit_ex(d.ctx.get(), EVP_sha256(), nullptr) != 1 ||
      EVP_DigestUpdate(d.ctx.get(), bytes.data(), bytes.size()) != 1 ||
      EVP_DigestFinal_ex(d.ctx.get(), digest.data(), &length) != 1) {
    return {};
  }
  return to_hex(std::span(digest.data(), length));
}

Expected<std::string> file_sha256(const std::filesystem::path& path) {
  auto file = MappedFile::open(path);
  if (!file) return file.error();
  std::string hex = sha256_hex((*file)->bytes());
  if (hex.empty()) return make_error(path.string() + ": SHA-256 failed (OpenSSL)");
  return hex;
}

Expected<std::string> model_sha256(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) return file_sha256(path);
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "config.json" || name == "tokenizer.json" || entry.path().extension() == ".safetensors") {
      names.push_back(name);
    }
  }
  if (ec) return make_error(path.string() + ": cannot list the directory: " + ec.message());
  if (names.empty()) return make_error(path.string() + ": no config.json, tokenizer.json or *.safetensors to hash");
  std::sort(names.begin(), names.end());
  std::string manifest;
  for (const std::string& name : names) {
    auto hex = file_sha256(path / name);
    if (!hex) return hex.error();
    manifest += name + "  " + *hex + "\n";
  }
  return sha256_hex(std::as_bytes(std::span(manifest)));
}

}  // namespace specula
