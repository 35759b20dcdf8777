#include "ui/models/token_text.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/formats/gguf.h"
#include "engine/model/loader.h"
#include "engine/tokenizer/tokenizer.h"

namespace specula::ui {
namespace {

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    }
    i += n;
  }
  return true;
}

}  // namespace

std::string visible_token(const std::string& bytes) {
  if (!valid_utf8(bytes)) {
    static const char* hex = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : bytes) {
      out += "<0x";
      out += hex[c >> 4];
      out += hex[c & 15];
      out += ">";
    }
    return out;
  }
  std::string out;
  for (char c : bytes) {
    if (c == ' ') out += "\u2423";       // ␣
    else if (c == '\n') out += "\u21B5"; // ↵
    else if (c == '\t') out += "\u21E5"; // ⇥
    else out += c;
  }
  return out;
}

TokenText::~TokenText() = default;

std::shared_ptr<const TokenText> TokenText::for_session(const SessionData& data) {
  std::shared_ptr<TokenText> text(new TokenText());
  const auto config = nlohmann::json::parse(data.info.config_json, nullptr, false);
  if (!config.is_object() || !config.contains("model") || !config["model"].is_string()) return text;
  std::error_code ec;
  const std::filesystem::path path = resolve_model_path(config["model"].get<std::string>());
  if (!std::filesystem::exists(path, ec)) return text;
  Expected<Tokenizer> tokenizer = make_error("unsupported model path");
  if (std::filesystem::is_directory(path, ec)) {
    tokenizer = Tokenizer::from_hf_dir(path);
  } else {
    auto gguf = GgufFile::open(path);
    if (!gguf) return text;
    tokenizer = Tokenizer::from_gguf(*gguf);
  }
  if (!tokenizer) return text;
  text->tokenizer_ = std::make_unique<Tokenizer>(std::move(*tokenizer));
  text->source_ = path.string();
  return text;
}

std::string TokenText::display(int32_t id) const {
  if (!tokenizer_ || id < 0 || id >= tokenizer_->vocab_size()) {
    std::string out = std::to_string(id);  // not "#" + to_string: gcc 12 -Wrestrict false positive
    out.insert(out.begin(), '#');
    return out;
  }
  return visible_token(tokenizer_->token_bytes(id));
}

}  // namespace specula::ui
