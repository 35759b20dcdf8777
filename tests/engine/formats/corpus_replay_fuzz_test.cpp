// Replays the committed fuzz seed corpora through the readers in the normal (gcc) build, so a
// regression in a parser shows up under plain ctest too (label `fuzz`); scripts/fuzz does the
// actual coverage-guided fuzzing with clang. Each seed parses to a value or to an Error whose
// message names the input; the seeds named valid* must parse.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/formats/gguf.h"
#include "engine/formats/safetensors.h"

namespace specula {
namespace {

namespace fs = std::filesystem;

std::vector<std::byte> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::byte> bytes(chars.size());
  for (size_t i = 0; i < chars.size(); ++i) bytes[i] = static_cast<std::byte>(chars[i]);
  return bytes;
}

template <class Parse>
void replay(const std::string& corpus, Parse parse) {
  const fs::path dir = fs::path(SPECULA_SOURCE_DIR) / "tests/fuzz/corpus" / corpus;
  int seeds = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const auto bytes = read_all(entry.path());
    const auto [ok, message] = parse(std::span<const std::byte>(bytes), name);
    if (name.rfind("valid", 0) == 0) {
      EXPECT_TRUE(ok) << name << ": " << message;
    } else if (!ok) {
      EXPECT_NE(message.find(name), std::string::npos) << "error does not name the input: " << message;
    }
    ++seeds;
  }
  EXPECT_GE(seeds, 5) << "seed corpus " << dir << " is missing";
}

TEST(FuzzCorpusReplay, Gguf) {
  replay("gguf_fuzz", [](std::span<const std::byte> bytes, const std::string& name) {
    auto f = GgufFile::parse(bytes, name);
    return std::pair<bool, std::string>(f.ok(), f.ok() ? "" : f.error().message);
  });
}

TEST(FuzzCorpusReplay, Safetensors) {
  replay("safetensors_fuzz", [](std::span<const std::byte> bytes, const std::string& name) {
    auto f = SafetensorsFile::parse(bytes, name);
    return std::pair<bool, std::string>(f.ok(), f.ok() ? "" : f.error().message);
  });
}

}  // namespace
}  // namespace specula
