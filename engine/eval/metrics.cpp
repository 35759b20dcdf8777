#include "engine/eval/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

namespace specula::eval {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alnum(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Every number in text, in order: an optional '-' (not after a letter or digit), digits with
// thousands commas, an optional fraction. Hand-written: std::regex is slow and this is one rule.
std::vector<std::string> numbers(std::string_view text) {
  std::vector<std::string> found;
  size_t i = 0;
  while (i < text.size()) {
    if (!is_digit(text[i])) {
      ++i;
      continue;
    }
    std::string n;
    if (i > 0 && text[i - 1] == '-' && (i < 2 || !is_alnum(text[i - 2]))) n.push_back('-');
    while (i < text.size() && (is_digit(text[i]) || (text[i] == ',' && i + 1 < text.size() && is_digit(text[i + 1])))) {
      if (text[i] != ',') n.push_back(text[i]);
      ++i;
    }
    if (i + 1 < text.size() && text[i] == '.' && is_digit(text[i + 1])) {
      n.push_back('.');
      ++i;
      while (i < text.size() && is_digit(text[i])) n.push_back(text[i++]);
    }
    found.push_back(std::move(n));
  }
  return found;
}

// UTF-8 to code points; a byte that starts no valid sequence stands for itself (as U+DC80..
// U+DCFF, Python's surrogateescape), so any byte string compares.
std::vector<int32_t> code_points(std::string_view s) {
  std::vector<int32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    int len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    int32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    bool valid = len > 0 && i + static_cast<size_t>(len) <= s.size();
    for (int k = 1; valid && k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      valid = (c >> 6) == 0x2;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (!valid) {
      out.push_back(0xDC00 + b);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += static_cast<size_t>(len);
  }
  return out;
}

RougeScore rouge_from_lcs(int64_t lcs, size_t candidate, size_t reference) {
  if (candidate == 0 || reference == 0) return {};
  RougeScore s;
  s.precision = static_cast<double>(lcs) / static_cast<double>(candidate);
  s.recall = static_cast<double>(lcs) / static_cast<double>(reference);
  s.f1 = s.precision + s.recall > 0 ? 2 * s.precision * s.recall / (s.precision + s.recall) : 0;
  return s;
}

}  // namespace

std::optional<std::string> last_number(std::string_view text) {
  auto all = numbers(text);
  if (all.empty()) return std::nullopt;
  return all.back();
}

std::optional<std::string> first_number(std::string_view text) {
  auto all = numbers(text);
  if (all.empty()) return std::nullopt;
  return all.front();
}

std::optional<std::string> gsm8k_reference(std::string_view answer) {
  const size_t mark = answer.rfind("####");
  if (mark == std::string_view::npos) return std::nullopt;
  return first_number(answer.substr(mark + 4));
}

bool same_number(std::string_view a, std::string_view b) {
  const std::string sa(a), sb(b);
  char* end_a = nullptr;
  char* end_b = nullptr;
  const double x = std::strtod(sa.c_str(), &end_a);
  const double y = std::strtod(sb.c_str(), &end_b);
  if (sa.empty() || sb.empty() || *end_a != '\0' || *end_b != '\0') return false;
  return std::fabs(x - y) <= 1e-9 * std::max(1.0, std::fabs(y));
}

int64_t lcs_length(std::span<const int32_t> a, std::span<const int32_t> b) {
  // Two rows of the classic O(|a| |b|) table.
  std::vector<int64_t> prev(b.size() + 1, 0), cur(b.size() + 1, 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = a[i - 1] == b[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

RougeScore rouge_l(std::span<const int32_t> candidate, std::span<const int32_t> reference) {
  return rouge_from_lcs(lcs_length(candidate, reference), candidate.size(), reference.size());
}

std::vector<std::string> rouge_words(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  for (char c : text) {
    const char lower = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    if (is_digit(lower) || (lower >= 'a' && lower <= 'z')) {
      word.push_back(lower);
    } else if (!word.empty()) {
      words.push_back(std::move(word));
      word.clear();
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

RougeScore rouge_l(std::string_view candidate, std::string_view reference) {
  // Words become ids so the LCS runs on integers.
  std::map<std::string, int32_t> ids;
  auto to_ids = [&ids](const std::vector<std::string>& words) {
    std::vector<int32_t> out;
    out.reserve(words.size());
    for (const auto& w : words) out.push_back(ids.emplace(w, static_cast<int32_t>(ids.size())).first->second);
    return out;
  };
  const auto c = to_ids(rouge_words(candidate));
  const auto r = to_ids(rouge_words(reference));
  return rouge_l(std::span<const int32_t>(c), std::span<const int32_t>(r));
}

double edit_similarity(std::string_view a, std::string_view b) {
  const auto ca = code_points(a);
  const auto cb = code_points(b);
  const size_t total = ca.size() + cb.size();
  if (total == 0) return 1.0;
  return 2.0 * static_cast<double>(lcs_length(ca, cb)) / static_cast<double>(total);
}

int fuzz_ratio(std::string_view a, std::string_view b) {
  return static_cast<int>(std::nearbyint(100.0 * edit_similarity(a, b)));  // default mode: half to even
}

std::string longbench_code_line(std::string_view prediction) {
  const size_t start = prediction.find_first_not_of('\n');
  if (start == std::string_view::npos) return "";
  std::string_view rest = prediction.substr(start);
  while (true) {
    const size_t end = rest.find('\n');
    const std::string_view line = rest.substr(0, end);
    if (line.find('`') == std::string_view::npos && line.find('#') == std::string_view::npos &&
        line.find("//") == std::string_view::npos) {
      return std::string(line);
    }
    if (end == std::string_view::npos) return "";
    rest = rest.substr(end + 1);
  }
}

double code_sim_score(std::string_view prediction, std::string_view reference) {
  return fuzz_ratio(longbench_code_line(prediction), reference) / 100.0;
}

TokenAgreement token_agreement(std::span<const int32_t> strict, std::span<const int32_t> other) {
  TokenAgreement a;
  a.compared = static_cast<int64_t>(std::max(strict.size(), other.size()));
  const size_t n = std::min(strict.size(), other.size());
  bool prefix = true;
  for (size_t i = 0; i < n; ++i) {
    const bool same = strict[i] == other[i];
    a.matched += same ? 1 : 0;
    prefix = prefix && same;
    a.common_prefix += prefix ? 1 : 0;
  }
  return a;
}

}  // namespace specula::eval
