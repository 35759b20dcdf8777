// Evaluation metrics on hand-checked cases. Reference outputs of third-party scorers, where
// used, are the examples their own documentation prints (cited beside each).
#include "engine/eval/metrics.h"

#include <gtest/gtest.h>

#include <vector>

namespace specula::eval {
namespace {

TEST(EvalMetrics, NumbersFromText) {
  EXPECT_EQ(last_number("She makes 9 * 2 = $18 every day."), "18");
  EXPECT_EQ(last_number("The total is 1,234.50."), "1234.50");
  EXPECT_EQ(first_number("It was -5 degrees, then 7."), "-5");
  EXPECT_EQ(last_number("5-3"), "3");  // a minus after a digit is subtraction, not a sign
  EXPECT_EQ(last_number("x-2 and y"), "2");
  EXPECT_EQ(last_number("1, 2, 3"), "3");  // ", " separates numbers; only ",ddd" groups
  EXPECT_FALSE(last_number("no digits here").has_value());
  EXPECT_FALSE(first_number("").has_value());
}

TEST(EvalMetrics, Gsm8kReference) {
  EXPECT_EQ(gsm8k_reference("Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs.\n#### 18"), "18");
  EXPECT_EQ(gsm8k_reference("a #### 5 then\n#### 1,000"), "1000");  // the last marker
  EXPECT_FALSE(gsm8k_reference("no marker 12").has_value());
  EXPECT_TRUE(same_number("18", "18.00"));
  EXPECT_TRUE(same_number("-3", "-3.0"));
  EXPECT_FALSE(same_number("18", "180"));
  EXPECT_FALSE(same_number("", "0"));
}

TEST(EvalMetrics, RougeWordsFollowRougeScoreTokenizer) {
  EXPECT_EQ(rouge_words("Hello, World! It's 3.14"),
            (std::vector<std::string>{"hello", "world", "it", "s", "3", "14"}));
  EXPECT_TRUE(rouge_words(" ,;! ").empty());
}

TEST(EvalMetrics, RougeLHandChecked) {
  // LCS "the cat on the mat" = 5 of 6 words on both sides.
  auto s = rouge_l("the cat sat on the mat", "the cat is on the mat");
  EXPECT_DOUBLE_EQ(s.precision, 5.0 / 6);
  EXPECT_DOUBLE_EQ(s.recall, 5.0 / 6);
  EXPECT_DOUBLE_EQ(s.f1, 5.0 / 6);
  // Asymmetric lengths: LCS "a c" = 2; P = 2/5, R = 2/4, F = 2PR/(P+R) = 0.4/0.9.
  s = rouge_l("a b c d e", "a x c y");
  EXPECT_DOUBLE_EQ(s.precision, 0.4);
  EXPECT_DOUBLE_EQ(s.recall, 0.5);
  EXPECT_NEAR(s.f1, 0.4 / 0.9, 1e-12);
  // rouge_score's README: score(target='The quick brown fox jumps over the lazy dog',
  // prediction='The quick brown dog jumps on the log.') gives rougeL precision 0.625,
  // recall 0.5555555555555556, fmeasure 0.5882352941176471.
  s = rouge_l("The quick brown dog jumps on the log.", "The quick brown fox jumps over the lazy dog");
  EXPECT_DOUBLE_EQ(s.precision, 0.625);
  EXPECT_NEAR(s.recall, 0.5555555555555556, 1e-15);
  EXPECT_NEAR(s.f1, 0.5882352941176471, 1e-15);
  // Either side empty: 0, as rouge_score.
  EXPECT_DOUBLE_EQ(rouge_l("", "abc").f1, 0);
  EXPECT_DOUBLE_EQ(rouge_l("abc", "...").f1, 0);
}

TEST(EvalMetrics, RougeLOnTokenIds) {
  const std::vector<int32_t> a = {1, 2, 3, 4, 5}, b = {1, 3, 5, 7};
  EXPECT_EQ(lcs_length(a, b), 3);
  const auto s = rouge_l(std::span<const int32_t>(a), std::span<const int32_t>(b));
  EXPECT_DOUBLE_EQ(s.precision, 3.0 / 5);
  EXPECT_DOUBLE_EQ(s.recall, 3.0 / 4);
  EXPECT_EQ(lcs_length({}, b), 0);
}

TEST(EvalMetrics, EditSimilarityIsIndelRatio) {
  // LCS("kitten", "sitting") = "ittn": 2*4 / 13.
  EXPECT_DOUBLE_EQ(edit_similarity("kitten", "sitting"), 8.0 / 13);
  EXPECT_EQ(fuzz_ratio("kitten", "sitting"), 62);
  // fuzzywuzzy's README: fuzz.ratio("this is a test", "this is a test!") == 97, and
  // fuzz.ratio("fuzzy wuzzy was a bear", "wuzzy fuzzy was a bear") == 91.
  EXPECT_EQ(fuzz_ratio("this is a test", "this is a test!"), 97);
  EXPECT_EQ(fuzz_ratio("fuzzy wuzzy was a bear", "wuzzy fuzzy was a bear"), 91);
  EXPECT_DOUBLE_EQ(edit_similarity("", ""), 1.0);
  EXPECT_DOUBLE_EQ(edit_similarity("", "abc"), 0.0);
  EXPECT_DOUBLE_EQ(edit_similarity("abc", "abc"), 1.0);
  // Code points, not bytes: "é" is one character (bytes would give 8/11).
  EXPECT_DOUBLE_EQ(edit_similarity("h\xC3\xA9llo", "hello"), 0.8);
  // Invalid UTF-8 still compares (each bad byte is one symbol).
  EXPECT_DOUBLE_EQ(edit_similarity("a\xFF", "a\xFF"), 1.0);
}

TEST(EvalMetrics, FuzzRatioRoundsHalfToEvenLikePython) {
  // 2*1/16 = 0.125 -> 12.5 -> 12; 2*3/16 = 0.375 -> 37.5 -> 38.
  EXPECT_EQ(fuzz_ratio("a", "a--------------"), 12);
  EXPECT_EQ(fuzz_ratio("abc", "abc----------"), 38);
}

TEST(EvalMetrics, LongBenchCodeLine) {
  EXPECT_EQ(longbench_code_line("\n\n# a comment\n  x = foo(1)\ny = 2"), "  x = foo(1)");
  EXPECT_EQ(longbench_code_line("// c++ comment\nreturn 0;"), "return 0;");
  EXPECT_EQ(longbench_code_line("```python\n```"), "");
  EXPECT_EQ(longbench_code_line(""), "");
  EXPECT_EQ(longbench_code_line("int a;\nint b;"), "int a;");
  EXPECT_DOUBLE_EQ(code_sim_score("```\nreturn x;\n", "return x;"), 1.0);
  EXPECT_DOUBLE_EQ(code_sim_score("# only comments", "return x;"), 0.0);
  EXPECT_DOUBLE_EQ(code_sim_score("\nkitten", "sitting"), 0.62);
}

TEST(EvalMetrics, TokenAgreement) {
  const std::vector<int32_t> strict = {1, 2, 3, 4}, other = {1, 2, 5, 4, 6};
  const auto a = token_agreement(strict, other);
  EXPECT_EQ(a.matched, 3);
  EXPECT_EQ(a.compared, 5);
  EXPECT_EQ(a.common_prefix, 2);
  EXPECT_DOUBLE_EQ(a.rate(), 0.6);
  EXPECT_DOUBLE_EQ(token_agreement({}, {}).rate(), 1.0);
  EXPECT_DOUBLE_EQ(token_agreement(strict, strict).rate(), 1.0);
  EXPECT_DOUBLE_EQ(token_agreement(strict, {}).rate(), 0.0);
}

}  // namespace
}  // namespace specula::eval
