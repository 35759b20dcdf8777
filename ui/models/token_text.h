#pragma once
// Token ids -> readable text for the views, from the tokenizer of the model the session names
// (config "model": a GGUF file, a Hugging Face folder, or "default"), when that model is on this
// machine. Without it the views show ids. No Qt.
#include <cstdint>
#include <memory>
#include <string>

#include "ui/models/session_data.h"

namespace specula {
class Tokenizer;
}

namespace specula::ui {

class TokenText {
 public:
  // Empty (ids only) when the model is not found or its tokenizer does not load.
  static std::shared_ptr<const TokenText> for_session(const SessionData& data);
  ~TokenText();

  // The token's text with spaces and newlines made visible ("␣Monday", "↵"); invalid UTF-8
  // pieces as hex bytes.
  std::string display(int32_t id) const;
  std::string source() const { return source_; }

 private:
  TokenText() = default;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string source_;
};

// The visible form used by TokenText::display, exposed for tests.
std::string visible_token(const std::string& bytes);

}  // namespace specula::ui
