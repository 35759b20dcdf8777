#pragma once
// Byte-level BPE tokenizer (GPT-2 family) read from GGUF metadata or tokenizer.json, with
// the pre-tokenizer chosen by name (gpt2, smollm, llama3, qwen2) and special tokens matched
// before pre-tokenization. Encodings must equal Hugging Face tokenizers' (tests/data goldens).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/expected.h"

namespace specula {

class GgufFile;

struct ChatMessage {
  std::string role;     // "system" | "user" | "assistant"
  std::string content;
};

enum class ChatTemplateKind { ChatML, Llama3, None };

class Tokenizer {
 public:
  static Expected<Tokenizer> from_gguf(const GgufFile& gguf);
  // `dir` holds tokenizer.json and optionally tokenizer_config.json (chat template, bos/eos).
  static Expected<Tokenizer> from_hf_dir(const std::filesystem::path& dir);

  Tokenizer();
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // parse_special: text like "<|im_start|>" becomes its special token id.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  std::string decode(std::span<const int32_t> ids) const;
  // Raw bytes of one token (byte-level BPE pieces decoded); may be a partial UTF-8 sequence.
  std::string token_bytes(int32_t id) const;

  int32_t vocab_size() const;
  int32_t bos_id() const;          // -1 when none
  int32_t eos_id() const;
  bool add_bos() const;            // prepend BOS when encoding a prompt
  bool is_end_of_generation(int32_t id) const;  // eos, <|im_end|>, <|eot_id|>, ...
  std::string_view pre_tokenizer_name() const;
  ChatTemplateKind chat_template() const;
  // Renders messages with the model's template (ChatML for SmolLM2, Llama-3 headers).
  std::string apply_chat_template(std::span<const ChatMessage> messages,
                                  bool add_generation_prompt) const;
  std::string summary() const;     // one paragraph for `specula-cli inspect`
  // The ids of a user prompt as a run feeds them: BOS when the model wants it, then `text`, in
  // the chat template as one user turn when `chat` (the templated text is parsed for special
  // tokens, the template's markers and any in `text`; without `chat`, `text` is plain text).
  std::vector<int32_t> encode_prompt(const std::string& text, bool chat) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace specula
