#pragma once
// Pre-tokenizers: split text into the words BPE merges within. Each is the hand-written
// equivalent of one regex that Hugging Face tokenizers runs through Oniguruma (std::regex has
// no \p{L}/\p{N}, see unicode_tables.h), including the backtracking of `\s+(?!\S)`.
#include <optional>
#include <string_view>
#include <vector>

namespace specula {

enum class PreTokenizerKind {
  Gpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  SmolLm,  // every \p{N} isolated first (HF Digits(individual_digits)), then Gpt2 per piece
  Llama3,  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
           //  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  Qwen2,   // Llama3 with \p{N} (one digit per word)
};

// Accepts GGUF tokenizer.ggml.pre names: gpt2, smollm, llama3 / llama-bpe, qwen2.
std::optional<PreTokenizerKind> pre_tokenizer_from_name(std::string_view name);
std::string_view pre_tokenizer_name(PreTokenizerKind kind);

// The Split regex strings HF tokenizer.json files carry for Llama-3 and Qwen2.
extern const std::string_view kLlama3SplitRegex;
extern const std::string_view kQwen2SplitRegex;

// Appends the words of `text` (views into it, in order, covering it exactly) to `words`.
// Invalid UTF-8 bytes are kept, each as a one-byte word character of class "other".
void pre_tokenize(PreTokenizerKind kind, std::string_view text,
                  std::vector<std::string_view>& words);

}  // namespace specula
