#include "engine/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <cstdint>

#include "engine/tokenizer/unicode_tables.h"

namespace specula {

namespace unicode {

CharClass classify(char32_t cp) {
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CharClass::Letter;
    if (cp >= '0' && cp <= '9') return CharClass::Number;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return CharClass::Space;
    return CharClass::Other;
  }
  const CodePointRange* begin = kCodePointRanges;
  const CodePointRange* end = kCodePointRanges + kCodePointRangeCount;
  const CodePointRange* it = std::upper_bound(
      begin, end, cp, [](char32_t c, const CodePointRange& r) { return c < r.first; });
  if (it == begin) return CharClass::Other;
  --it;
  return cp <= it->last ? it->cls : CharClass::Other;
}

}  // namespace unicode

const std::string_view kLlama3SplitRegex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const std::string_view kQwen2SplitRegex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::optional<PreTokenizerKind> pre_tokenizer_from_name(std::string_view name) {
  if (name == "gpt2") return PreTokenizerKind::Gpt2;
  if (name == "smollm") return PreTokenizerKind::SmolLm;
  if (name == "llama3" || name == "llama-bpe") return PreTokenizerKind::Llama3;
  if (name == "qwen2") return PreTokenizerKind::Qwen2;
  return std::nullopt;
}

std::string_view pre_tokenizer_name(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::Gpt2: return "gpt2";
    case PreTokenizerKind::SmolLm: return "smollm";
    case PreTokenizerKind::Llama3: return "llama3";
    case PreTokenizerKind::Qwen2: return "qwen2";
  }
  return "?";
}

namespace {

using unicode::CharClass;

struct Char {
  char32_t cp;
  uint32_t offset;  // byte offset in the text
  CharClass cls;
};

// Decodes UTF-8; a byte that does not start a well-formed sequence becomes one Other char
// (cp above U+10FFFF so it can never equal a real character).
void decode_utf8(std::string_view text, std::vector<Char>& chars) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char b = s[i];
    char32_t cp = 0;
    size_t len = 0;
    if (b < 0x80) {
      cp = b;
      len = 1;
    } else if (b >= 0xC2 && b <= 0xDF) {
      cp = b & 0x1F;
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      cp = b & 0x0F;
      len = 3;
    } else if (b >= 0xF0 && b <= 0xF4) {
      cp = b & 0x07;
      len = 4;
    }
    bool valid = len > 0 && i + len <= n;
    for (size_t k = 1; valid && k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) valid = false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    // Reject overlong 3/4-byte forms, surrogates and code points past U+10FFFF.
    if (valid && len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) valid = false;
    if (valid && len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) valid = false;
    if (!valid) {
      chars.push_back({0x110000u + b, static_cast<uint32_t>(i), CharClass::Other});
      ++i;
      continue;
    }
    chars.push_back({cp, static_cast<uint32_t>(i), unicode::classify(cp)});
    i += len;
  }
}

char32_t ascii_lower(char32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// Matches the regexes of one family over chars[begin, end): `end` is also where lookahead
// stops, so a piece boundary acts like end of text (as when HF runs a regex per piece).
class WordMatcher {
 public:
  WordMatcher(const std::vector<Char>& chars, size_t end) : c_(chars), end_(end) {}

  size_t match_gpt2(size_t i) const {
    if (size_t n = contraction(i, false)) return n;
    for (CharClass cls : {CharClass::Letter, CharClass::Number, CharClass::Other}) {
      size_t k = i;
      if (cp(k) == U' ' && is(k + 1, cls)) ++k;
      if (is(k, cls)) return run_end(k, cls) - i;
    }
    return whitespace(i);
  }

  size_t match_llama3(size_t i, size_t max_digits) const {
    if (size_t n = contraction(i, true)) return n;
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (is(i, CharClass::Letter)) return run_end(i, CharClass::Letter) - i;
    if (!is_newline(i) && !is(i, CharClass::Number) && is(i + 1, CharClass::Letter)) {
      return run_end(i + 1, CharClass::Letter) - i;
    }
    // \p{N}{1,max}
    if (is(i, CharClass::Number)) {
      size_t k = i;
      while (k - i < max_digits && is(k, CharClass::Number)) ++k;
      return k - i;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    size_t k = i;
    if (cp(k) == U' ' && is(k + 1, CharClass::Other)) ++k;
    if (is(k, CharClass::Other)) {
      k = run_end(k, CharClass::Other);
      while (is_newline(k)) ++k;
      return k - i;
    }
    // \s*[\r\n]+ : \s* backs off to the last \r or \n of the run, which [\r\n]+ then takes.
    const size_t ws_end = run_end(i, CharClass::Space);
    for (size_t r = ws_end; r > i; --r) {
      if (is_newline(r - 1)) return r - i;
    }
    return whitespace(i);
  }

 private:
  char32_t cp(size_t k) const { return k < end_ ? c_[k].cp : 0; }
  bool is(size_t k, CharClass cls) const { return k < end_ && c_[k].cls == cls; }
  bool is_newline(size_t k) const { return k < end_ && (c_[k].cp == U'\r' || c_[k].cp == U'\n'); }
  size_t run_end(size_t k, CharClass cls) const {
    while (is(k, cls)) ++k;
    return k;
  }

  // 's 't 're 've 'm 'll 'd; case-insensitive per Unicode simple case folding, under which
  // U+017F (long s) also folds to s.
  size_t contraction(size_t i, bool ignore_case) const {
    if (cp(i) != U'\'') return 0;
    auto fold = [&](size_t k) {
      char32_t c = cp(k);
      if (!ignore_case) return c;
      return c == 0x17F ? U's' : ascii_lower(c);
    };
    const char32_t a = fold(i + 1);
    if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
    const char32_t b = fold(i + 2);
    if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) {
      return 3;
    }
    return 0;
  }

  // \s+(?!\S)|\s+ at a whitespace char: the whole run at end of text or before more
  // whitespace; otherwise the run minus its last char (left to prefix the next word).
  size_t whitespace(size_t i) const {
    const size_t j = run_end(i, CharClass::Space);
    if (j == i) return 1;  // unreachable for a well-formed class table; never stall
    if (j == end_ || j - i == 1) return j - i;
    return j - i - 1;
  }

  const std::vector<Char>& c_;
  size_t end_;
};

void split_range(PreTokenizerKind kind, std::string_view text, const std::vector<Char>& chars,
                 size_t begin, size_t end, std::vector<std::string_view>& words) {
  const WordMatcher matcher(chars, end);
  auto offset = [&](size_t k) { return k < chars.size() ? chars[k].offset : text.size(); };
  size_t i = begin;
  while (i < end) {
    size_t n = 0;
    switch (kind) {
      case PreTokenizerKind::Gpt2:
      case PreTokenizerKind::SmolLm: n = matcher.match_gpt2(i); break;
      case PreTokenizerKind::Llama3: n = matcher.match_llama3(i, 3); break;
      case PreTokenizerKind::Qwen2: n = matcher.match_llama3(i, 1); break;
    }
    words.push_back(text.substr(offset(i), offset(i + n) - offset(i)));
    i += n;
  }
}

}  // namespace

void pre_tokenize(PreTokenizerKind kind, std::string_view text,
                  std::vector<std::string_view>& words) {
  std::vector<Char> chars;
  chars.reserve(text.size());
  decode_utf8(text, chars);
  if (kind != PreTokenizerKind::SmolLm) {
    split_range(kind, text, chars, 0, chars.size(), words);
    return;
  }
  // Digits(individual_digits=true): each number char is its own piece; the ByteLevel regex
  // then runs on every piece separately.
  size_t piece = 0;
  for (size_t k = 0; k < chars.size(); ++k) {
    if (chars[k].cls != CharClass::Number) continue;
    split_range(kind, text, chars, piece, k, words);
    split_range(kind, text, chars, k, k + 1, words);
    piece = k + 1;
  }
  split_range(kind, text, chars, piece, chars.size(), words);
}

}  // namespace specula
