#pragma once
// Byte-level BPE (GPT-2 family): every byte of a word starts as its own token, then the
// adjacent pair with the lowest merge rank is merged until no ranked pair remains.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/core/expected.h"

namespace specula {

// GPT-2's reversible byte <-> printable-character mapping: vocab strings spell raw bytes with
// these characters (a space is "Ġ", U+0120).
std::string byte_level_encode(std::string_view bytes);
// Raw bytes of a byte-level string; nullopt when it holds a character outside the mapping.
std::optional<std::string> byte_level_decode(std::string_view text);

class BpeModel {
 public:
  // `vocab` maps byte-level token text to id; `merges` are (left, right) token texts in rank
  // order. An Error names the first merge whose parts or result are not in the vocabulary,
  // or a byte with no single-byte token.
  static Expected<BpeModel> build(const std::unordered_map<std::string, int32_t>& vocab,
                                  const std::vector<std::pair<std::string, std::string>>& merges,
                                  bool ignore_merges);

  // Appends the token ids of one pre-tokenized word (raw bytes).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  size_t merge_count() const { return merges_.size(); }
  bool ignore_merges() const { return ignore_merges_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  std::array<int32_t, 256> byte_token_{};
  std::unordered_map<uint64_t, Merge> merges_;
  // Only filled when ignore_merges: a word that is itself a token is emitted whole (Llama-3).
  std::unordered_map<std::string, int32_t> whole_words_;
  bool ignore_merges_ = false;
};

}  // namespace specula
