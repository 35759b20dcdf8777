#pragma once
// Internals shared by the Tokenizer loaders (tokenizer_hf.cpp, tokenizer_gguf.cpp) and the
// encoder (tokenizer.cpp). Not part of the engine's public surface.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/expected.h"
#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"

namespace specula {

enum class TokenKind : uint8_t {
  Normal,       // byte-level BPE piece
  Special,      // control token (HF added token with special=true, GGUF CONTROL)
  UserDefined,  // added token that is not special (GGUF USER_DEFINED): always matched
  Unused,       // id hole or GGUF UNUSED/UNKNOWN: never produced by encode
};

// What a loader reads from its source; TokenizerSpec -> Impl is shared.
struct TokenizerSpec {
  std::string origin;                 // file name, for error messages
  std::vector<std::string> tokens;    // id -> text as stored (byte-level for Normal)
  std::vector<TokenKind> kinds;       // id -> kind, same size as tokens
  std::vector<std::pair<std::string, std::string>> merges;  // rank order
  bool ignore_merges = false;
  PreTokenizerKind pre_tokenizer = PreTokenizerKind::Gpt2;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  bool add_bos = false;
  std::string chat_template;          // Jinja source; only its family is recognised
};

struct AddedToken {
  std::string text;
  int32_t id;
  bool special;
};

struct Tokenizer::Impl {
  std::string origin;
  std::vector<std::string> token_text;
  std::vector<std::string> token_bytes;  // raw bytes (text itself for added tokens)
  std::vector<TokenKind> kinds;
  BpeModel bpe;
  PreTokenizerKind pre_tokenizer = PreTokenizerKind::Gpt2;
  // Added tokens bucketed by first byte, longest first, for leftmost-longest matching.
  std::vector<std::vector<AddedToken>> added_by_first_byte;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  bool add_bos = false;
  std::vector<int32_t> end_of_generation;  // sorted ids
  ChatTemplateKind chat_kind = ChatTemplateKind::None;
  std::string default_system;  // ChatML templates that add a system turn when none is given
  std::string chat_template;

  static Expected<Tokenizer> build(TokenizerSpec spec);
  int32_t find_token(std::string_view text) const;  // -1 when absent
};

// Recognises the template family and, for ChatML, the default system message it injects.
ChatTemplateKind detect_chat_template(std::string_view source, std::string* default_system);

}  // namespace specula
