#pragma once
// Scores for the evaluation harness (engine/eval/runner.h): task metrics and agreement with
// strict verification.
//
//  last_number / first_number  the last (first) number in a text, commas dropped: "$1,234.50."
//                              -> "1234.50"; GSM8K reads the model's last number
//  gsm8k_reference             the number after the last "####" of a GSM8K answer
//  rouge_l                     ROUGE-L F-measure (beta 1) from the longest common subsequence,
//                              as Google's rouge_score computes it: P = LCS/|candidate|,
//                              R = LCS/|reference|, F = 2PR/(P+R), 0 when either side is empty
//  rouge_words                 rouge_score's default tokenizer: lower-case ASCII, every run of
//                              characters outside [a-z0-9] separates words
//  edit_similarity             normalized indel similarity over Unicode code points,
//                              (|a| + |b| - indel distance) / (|a| + |b|) = 2 LCS / (|a| + |b|),
//                              the Levenshtein.ratio behind fuzzywuzzy's fuzz.ratio; 1 for two
//                              empty strings
//  fuzz_ratio                  round(100 * edit_similarity), half to even like Python's round
//  code_sim_score              LongBench's LCC metric: the first line of the prediction (after
//                              leading newlines) that has no '`', '#' or "//", "" when none has;
//                              fuzz_ratio against the reference / 100
//  token_agreement             position-wise: tokens equal at the same index over the longer
//                              of the two outputs (a divergence costs every later token)
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace specula::eval {

std::optional<std::string> last_number(std::string_view text);
std::optional<std::string> first_number(std::string_view text);
std::optional<std::string> gsm8k_reference(std::string_view answer);
// Numeric equality of two number strings as the functions above return them ("18" == "18.00").
bool same_number(std::string_view a, std::string_view b);

struct RougeScore {
  double precision = 0;
  double recall = 0;
  double f1 = 0;
};
int64_t lcs_length(std::span<const int32_t> a, std::span<const int32_t> b);
RougeScore rouge_l(std::span<const int32_t> candidate, std::span<const int32_t> reference);
std::vector<std::string> rouge_words(std::string_view text);
RougeScore rouge_l(std::string_view candidate, std::string_view reference);

double edit_similarity(std::string_view a, std::string_view b);
int fuzz_ratio(std::string_view a, std::string_view b);
std::string longbench_code_line(std::string_view prediction);
double code_sim_score(std::string_view prediction, std::string_view reference);

struct TokenAgreement {
  int64_t matched = 0;        // indices where both outputs hold the same token
  int64_t compared = 0;       // the longer output's length
  int64_t common_prefix = 0;  // tokens before the first difference
  double rate() const { return compared > 0 ? static_cast<double>(matched) / compared : 1.0; }
};
TokenAgreement token_agreement(std::span<const int32_t> strict, std::span<const int32_t> other);

}  // namespace specula::eval
