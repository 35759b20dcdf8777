#include "engine/tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include "engine/tokenizer/unicode_tables.h"
#include "tests/engine/tokenizer/tokenizer_test_support.h"

namespace specula {
namespace {

using namespace specula::testing;
using Words = std::vector<std::string>;

Words split(PreTokenizerKind kind, std::string_view text) {
  std::vector<std::string_view> views;
  pre_tokenize(kind, text, views);
  return Words(views.begin(), views.end());
}

// HF's pre_tokenize_str on every test string, as byte lengths of the pieces.
class PreTokenizerVariant : public ::testing::TestWithParam<std::string> {};

TEST_P(PreTokenizerVariant, PiecesEqualHuggingFace) {
  const auto kind = pre_tokenizer_from_name(GetParam());
  ASSERT_TRUE(kind.has_value());
  const auto doc = read_json(tokenizer_data_dir() / GetParam() / "goldens.json");
  const auto expected = doc.at("piece_bytes").get<std::vector<std::vector<size_t>>>();
  const auto& strings = test_strings();
  ASSERT_EQ(expected.size(), strings.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < strings.size(); ++i) {
    std::vector<std::string_view> words;
    pre_tokenize(*kind, strings[i], words);
    std::vector<size_t> lengths;
    for (std::string_view w : words) lengths.push_back(w.size());
    if (lengths == expected[i]) continue;
    ++mismatches;
    std::string got;
    for (std::string_view w : words) {  // appended piecewise: g++ 12 -Wrestrict misfires
      got += '[';
      got += escaped(std::string(w));
      got += ']';
    }
    ADD_FAILURE() << GetParam() << " #" << i << " \"" << escaped(strings[i]) << "\" split as "
                  << got;
    if (mismatches > 15) break;
  }
}

INSTANTIATE_TEST_SUITE_P(HfGoldens, PreTokenizerVariant,
                         ::testing::Values("smollm", "gpt2", "llama3", "qwen2"),
                         [](const auto& info) { return info.param; });

TEST(PreTokenizer, Gpt2KeepsOneSpaceForTheNextWord) {
  const auto k = PreTokenizerKind::Gpt2;
  EXPECT_EQ(split(k, "Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(split(k, "a   b"), (Words{"a", "  ", " b"}));
  EXPECT_EQ(split(k, "x   "), (Words{"x", "   "}));
  // \s+(?!\S) backs off one newline, which \s+ then takes alone (unlike Llama-3).
  EXPECT_EQ(split(k, "a\n\nb"), (Words{"a", "\n", "\n", "b"}));
  EXPECT_EQ(split(k, "it's IT'S"), (Words{"it", "'s", " IT", "'", "S"}));
  EXPECT_EQ(split(k, "12345 67"), (Words{"12345", " 67"}));
  EXPECT_EQ(split(k, "a?!  ..."), (Words{"a", "?!", " ", " ..."}));
  EXPECT_EQ(split(k, ""), Words{});
}

TEST(PreTokenizer, SmolLmIsolatesDigitsBeforeTheRegex) {
  const auto k = PreTokenizerKind::SmolLm;
  EXPECT_EQ(split(k, "123"), (Words{"1", "2", "3"}));
  // The digit ends the piece, so the space before it is not held back for it.
  EXPECT_EQ(split(k, "a 12"), (Words{"a", " ", "1", "2"}));
  EXPECT_EQ(split(k, "x٣y"), (Words{"x", "٣", "y"}));
}

TEST(PreTokenizer, Llama3GroupsDigitsByThreeAndFoldsContractions) {
  const auto k = PreTokenizerKind::Llama3;
  EXPECT_EQ(split(k, "1234567"), (Words{"123", "456", "7"}));
  EXPECT_EQ(split(k, "\thello"), (Words{"\thello"}));
  EXPECT_EQ(split(k, "IT'S"), (Words{"IT", "'S"}));
  EXPECT_EQ(split(k, "it'\xC5\xBFx"), (Words{"it", "'\xC5\xBF", "x"}));  // long s folds to s
  EXPECT_EQ(split(k, "a\n\n b"), (Words{"a", "\n\n", " b"}));
  EXPECT_EQ(split(k, "x \n\t y"), (Words{"x", " \n", "\t", " y"}));
  EXPECT_EQ(split(k, "foo()\n\nbar"), (Words{"foo", "()\n\n", "bar"}));
  EXPECT_EQ(split(PreTokenizerKind::Qwen2, "1234"), (Words{"1", "2", "3", "4"}));
}

TEST(PreTokenizer, InvalidUtf8IsKeptByteForByte) {
  const std::string text = "a\xFF\xFE b\xC3";
  std::string joined;
  for (const auto& w : split(PreTokenizerKind::Llama3, text)) joined += w;
  EXPECT_EQ(joined, text);
  EXPECT_EQ(split(PreTokenizerKind::Gpt2, "\xFF\xFEx"), (Words{"\xFF\xFE", "x"}));
}

TEST(PreTokenizer, NamesRoundTrip) {
  for (const char* name : {"gpt2", "smollm", "llama3", "qwen2"}) {
    const auto kind = pre_tokenizer_from_name(name);
    ASSERT_TRUE(kind.has_value()) << name;
    EXPECT_EQ(pre_tokenizer_name(*kind), name);
  }
  EXPECT_EQ(pre_tokenizer_from_name("llama-bpe"), PreTokenizerKind::Llama3);
  EXPECT_FALSE(pre_tokenizer_from_name("default").has_value());
}

TEST(UnicodeTables, ClassifiesAcrossAllPlanes) {
  using unicode::CharClass;
  using unicode::classify;
  EXPECT_EQ(classify(U'a'), CharClass::Letter);
  EXPECT_EQ(classify(U'_'), CharClass::Other);
  EXPECT_EQ(classify(U'\u00E9'), CharClass::Letter);   // é
  EXPECT_EQ(classify(U'\u4E2D'), CharClass::Letter);   // 中
  EXPECT_EQ(classify(U'\u0663'), CharClass::Number);   // Arabic-Indic three
  EXPECT_EQ(classify(U'\u00BD'), CharClass::Number);   // ½ (No)
  EXPECT_EQ(classify(U'\u216B'), CharClass::Number);   // Ⅻ (Nl)
  EXPECT_EQ(classify(U'\u0301'), CharClass::Other);    // combining acute (Mn)
  EXPECT_EQ(classify(U'\u3000'), CharClass::Space);
  EXPECT_EQ(classify(U'\u0085'), CharClass::Space);
  EXPECT_EQ(classify(U'\u001C'), CharClass::Other);    // not White_Space, unlike isspace()
  EXPECT_EQ(classify(U'\u200B'), CharClass::Other);    // zero width space is Cf
  EXPECT_EQ(classify(U'\U0001F600'), CharClass::Other);  // 😀
  EXPECT_EQ(classify(U'\U0001D518'), CharClass::Letter); // 𝔘
  EXPECT_EQ(classify(U'\U0001D7D9'), CharClass::Number); // 𝟙
  EXPECT_EQ(classify(U'\U00020000'), CharClass::Letter); // CJK extension B
  EXPECT_EQ(classify(U'\U0010FFFF'), CharClass::Other);
  EXPECT_GT(unicode::kCodePointRangeCount, 500u);
}

}  // namespace
}  // namespace specula
