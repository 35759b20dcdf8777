#include "engine/tokenizer/bpe.h"

#include <queue>

namespace specula {
namespace {

struct ByteLevelTables {
  std::array<char32_t, 256> byte_to_char{};
  std::unordered_map<char32_t, uint8_t> char_to_byte;

  ByteLevelTables() {
    // Printable Latin-1 bytes stand for themselves; the other 68 bytes (controls, space,
    // DEL, NBSP, soft hyphen) take U+0100.. in byte order.
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      byte_to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      char_to_byte[byte_to_char[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables t;
  return t;
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {  // the mapping only uses U+0021..U+0143
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  const auto& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(t.byte_to_char[static_cast<unsigned char>(c)], out);
  return out;
}

std::optional<std::string> byte_level_decode(std::string_view text) {
  const auto& t = tables();
  std::string out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    if (s[i] < 0x80) {
      cp = s[i];
      i += 1;
    } else if ((s[i] & 0xE0) == 0xC0 && i + 1 < text.size()) {
      cp = (static_cast<char32_t>(s[i] & 0x1F) << 6) | (s[i + 1] & 0x3F);
      i += 2;
    } else {
      return std::nullopt;  // 3- and 4-byte characters are never in the mapping
    }
    auto it = t.char_to_byte.find(cp);
    if (it == t.char_to_byte.end()) return std::nullopt;
    out.push_back(static_cast<char>(it->second));
  }
  return out;
}

Expected<BpeModel> BpeModel::build(const std::unordered_map<std::string, int32_t>& vocab,
                                   const std::vector<std::pair<std::string, std::string>>& merges,
                                   bool ignore_merges) {
  BpeModel model;
  model.ignore_merges_ = ignore_merges;
  // Real vocabularies lack a few bytes that never occur in UTF-8 text (SmolLM2 has no token
  // for 0xC0, 0xF5..0xFF and some controls); like HF tokenizers without an unk token, such
  // bytes are dropped when encoding. Printable ASCII must all be present.
  for (int b = 0; b < 256; ++b) {
    const std::string text = byte_level_encode(std::string(1, static_cast<char>(b)));
    auto it = vocab.find(text);
    model.byte_token_[b] = it == vocab.end() ? -1 : it->second;
    if (it == vocab.end() && b >= 0x21 && b <= 0x7E) {
      return make_error("no token for the character '" + text +
                        "': not a byte-level BPE vocabulary");
    }
  }
  model.merges_.reserve(merges.size() * 2);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto l = vocab.find(left);
    auto r = vocab.find(right);
    auto m = vocab.find(left + right);
    if (l == vocab.end() || r == vocab.end() || m == vocab.end()) {
      return make_error("merge " + std::to_string(rank) + " '" + left + " " + right +
                        "' uses a token missing from the vocabulary");
    }
    // The first (lowest-rank) occurrence of a pair wins, as in HF tokenizers.
    model.merges_.emplace(pair_key(l->second, r->second),
                          Merge{static_cast<int32_t>(rank), m->second});
  }
  if (ignore_merges) model.whole_words_ = vocab;
  return model;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    auto it = whole_words_.find(byte_level_encode(word));
    if (it != whole_words_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id;    // -1 once merged into its left neighbour
    int32_t prev;
    int32_t next;  // -1 at the ends
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t left_id;
    int32_t right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  // Symbols form a linked list over the word's bytes (bytes without a token left out, so
  // their neighbours become adjacent, as in HF); a min-heap holds candidate merges ordered by
  // (rank, position), so ties go to the leftmost pair like HF tokenizers.
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (char c : word) {
    const int32_t id = byte_token_[static_cast<unsigned char>(c)];
    if (id < 0) continue;
    const auto index = static_cast<int32_t>(symbols.size());
    if (index > 0) symbols.back().next = index;
    symbols.push_back({id, index - 1, -1});
  }
  const auto n = static_cast<int32_t>(symbols.size());
  if (n <= 1) {
    if (n == 1) out.push_back(symbols[0].id);
    return;
  }
  std::vector<Candidate> storage;
  storage.reserve(static_cast<size_t>(n));
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap(std::greater<>{},
                                                                             std::move(storage));
  auto push_pair = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) {
      heap.push({it->second.rank, left, symbols[left].id, symbols[right].id});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = symbols[c.pos];
    // Stale when either side has merged since the candidate was pushed (a merged-away
    // symbol has id -1 and is unlinked).
    if (left.id != c.left_id || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.id != c.right_id) continue;
    left.id = merges_.find(pair_key(c.left_id, c.right_id))->second.result;
    right.id = -1;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.pos;
    push_pair(left.prev);
    push_pair(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    out.push_back(symbols[static_cast<size_t>(i)].id);
  }
}

}  // namespace specula
