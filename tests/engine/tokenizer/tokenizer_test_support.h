#pragma once
// Shared by the tokenizer tests: the goldens in tests/data/tokenizer (written by
// tools/reference/make_tokenizer_goldens.py) and a loader for the tokenizer.json variants.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/tokenizer.h"

namespace specula::testing {

inline std::filesystem::path tokenizer_data_dir() {
  return std::filesystem::path(SPECULA_TEST_DATA_DIR) / "tokenizer";
}

inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  return nlohmann::json::parse(in);
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

inline const std::vector<std::string>& test_strings() {
  static const std::vector<std::string> strings =
      read_json(tokenizer_data_dir() / "strings.json").get<std::vector<std::string>>();
  return strings;
}

struct Goldens {
  std::vector<std::vector<int32_t>> ids;   // parallel to test_strings()
  std::map<size_t, std::string> decoded;   // HF's decode where it is lossy
};

inline Goldens load_goldens(const std::string& variant) {
  const auto doc = read_json(tokenizer_data_dir() / variant / "goldens.json");
  Goldens g;
  g.ids = doc.at("ids").get<std::vector<std::vector<int32_t>>>();
  for (const auto& [index, text] : doc.at("decoded").items()) {
    g.decoded[std::stoul(index)] = text.get<std::string>();
  }
  return g;
}

// A fresh temporary directory, removed when the guard goes out of scope.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("specula_tok_" + tag + "_" + std::to_string(::getpid()) + "_" +
             std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline const nlohmann::json& base_tokenizer_json() {
  static const nlohmann::json doc = read_json(tokenizer_data_dir() / "tokenizer.json");
  return doc;
}

// tokenizer.json with the variant's merge patch applied (+ its tokenizer_config.json),
// loaded through Tokenizer::from_hf_dir; cached per variant.
inline const Tokenizer& variant_tokenizer(const std::string& variant) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[variant];
  if (!slot) {
    const auto dir = tokenizer_data_dir() / variant;
    nlohmann::json doc = base_tokenizer_json();
    doc.merge_patch(read_json(dir / "override.json"));
    TempDir tmp(variant);
    write_text(tmp.path() / "tokenizer.json", doc.dump());
    if (std::filesystem::exists(dir / "tokenizer_config.json")) {
      std::filesystem::copy_file(dir / "tokenizer_config.json",
                                 tmp.path() / "tokenizer_config.json");
    }
    auto tok = Tokenizer::from_hf_dir(tmp.path());
    EXPECT_TRUE(tok.ok()) << (tok.ok() ? "" : tok.error().message);
    slot = std::make_unique<Tokenizer>(tok.ok() ? std::move(tok.value()) : Tokenizer());
  }
  return *slot;
}

// Printable form of a test string for failure messages.
inline std::string escaped(const std::string& s) {
  std::ostringstream out;
  for (unsigned char c : s) {
    if (c == '\n') {
      out << "\\n";
    } else if (c == '\t') {
      out << "\\t";
    } else if (c == '\r') {
      out << "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      out << "\\x" << "0123456789abcdef"[c >> 4] << "0123456789abcdef"[c & 15];
    } else {
      out << c;
    }
  }
  return out.str();
}

inline std::string ids_text(const std::vector<int32_t>& ids) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < ids.size(); ++i) out << (i ? ", " : "") << ids[i];
  out << "]";
  return out.str();
}

// Compares encode() with the goldens; returns a report of the first mismatches.
inline size_t count_golden_mismatches(const Tokenizer& tok, const Goldens& goldens,
                                      std::string* report) {
  const auto& strings = test_strings();
  size_t mismatches = 0;
  for (size_t i = 0; i < strings.size(); ++i) {
    const std::vector<int32_t> got = tok.encode(strings[i]);
    if (got == goldens.ids[i]) continue;
    if (++mismatches <= 15) {
      *report += "  #" + std::to_string(i) + " \"" + escaped(strings[i]) + "\"\n    expected " +
                 ids_text(goldens.ids[i]) + "\n    got      " + ids_text(got) + "\n";
    }
  }
  return mismatches;
}

}  // namespace specula::testing
