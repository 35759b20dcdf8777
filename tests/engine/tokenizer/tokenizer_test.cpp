#include "engine/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "engine/tokenizer/bpe.h"
#include "tests/engine/tokenizer/tokenizer_test_support.h"

namespace specula {
namespace {

using namespace specula::testing;

class TokenizerVariant : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerVariant, EncodeEqualsHuggingFaceGoldens) {
  const Tokenizer& tok = variant_tokenizer(GetParam());
  const Goldens goldens = load_goldens(GetParam());
  ASSERT_EQ(goldens.ids.size(), test_strings().size());
  ASSERT_GE(test_strings().size(), 300u);
  std::string report;
  const size_t mismatches = count_golden_mismatches(tok, goldens, &report);
  EXPECT_EQ(mismatches, 0u) << GetParam() << ": " << mismatches << " of "
                            << test_strings().size() << " strings differ:\n"
                            << report;
}

TEST_P(TokenizerVariant, DecodeOfEncodeGivesTheTextBack) {
  const Tokenizer& tok = variant_tokenizer(GetParam());
  const Goldens goldens = load_goldens(GetParam());
  const auto& strings = test_strings();
  for (size_t i = 0; i < strings.size(); ++i) {
    // Where the vocabulary lacks a byte, HF drops it and so do we.
    const auto lossy = goldens.decoded.find(i);
    const std::string& expected = lossy == goldens.decoded.end() ? strings[i] : lossy->second;
    const std::vector<int32_t> ids = tok.encode(strings[i]);
    EXPECT_EQ(tok.decode(ids), expected) << "#" << i << " \"" << escaped(strings[i]) << "\"";
    std::string pieces;
    for (int32_t id : ids) pieces += tok.token_bytes(id);
    EXPECT_EQ(pieces, expected);
  }
}

INSTANTIATE_TEST_SUITE_P(HfGoldens, TokenizerVariant,
                         ::testing::Values("smollm", "gpt2", "llama3", "qwen2"),
                         [](const auto& info) { return info.param; });

TEST(Tokenizer, SmolLmDirReportsItsMetadata) {
  const Tokenizer& tok = variant_tokenizer("smollm");
  EXPECT_EQ(tok.vocab_size(), 49152);
  EXPECT_EQ(tok.pre_tokenizer_name(), "smollm");
  EXPECT_EQ(tok.bos_id(), 1);  // <|im_start|>
  EXPECT_EQ(tok.eos_id(), 2);  // <|im_end|>
  EXPECT_FALSE(tok.add_bos());
  EXPECT_EQ(tok.chat_template(), ChatTemplateKind::ChatML);
  EXPECT_TRUE(tok.is_end_of_generation(2));
  EXPECT_TRUE(tok.is_end_of_generation(0));  // <|endoftext|>
  EXPECT_FALSE(tok.is_end_of_generation(1));
  EXPECT_FALSE(tok.is_end_of_generation(198));
  EXPECT_EQ(tok.token_bytes(1), "<|im_start|>");
  EXPECT_EQ(tok.token_bytes(198), "\n");  // "Ċ"
  EXPECT_EQ(tok.token_bytes(-1), "");
  EXPECT_EQ(tok.token_bytes(49152), "");
  EXPECT_NE(tok.summary().find("49152 tokens"), std::string::npos) << tok.summary();
  EXPECT_NE(tok.summary().find("smollm"), std::string::npos) << tok.summary();
}

TEST(Tokenizer, Llama3DirReportsItsMetadata) {
  const Tokenizer& tok = variant_tokenizer("llama3");
  EXPECT_EQ(tok.pre_tokenizer_name(), "llama3");
  EXPECT_EQ(tok.chat_template(), ChatTemplateKind::Llama3);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_EQ(tok.bos_id(), -1);  // <|begin_of_text|> is not in SmolLM2's vocabulary
  EXPECT_EQ(variant_tokenizer("gpt2").chat_template(), ChatTemplateKind::None);
  EXPECT_EQ(variant_tokenizer("qwen2").pre_tokenizer_name(), "qwen2");
}

TEST(Tokenizer, SpecialTokensAreTextWhenNotParsed) {
  const Tokenizer& tok = variant_tokenizer("smollm");
  const std::string text = "<|im_start|>user\nhi<|im_end|>";
  const std::vector<int32_t> parsed = tok.encode(text, /*parse_special=*/true);
  ASSERT_FALSE(parsed.empty());
  EXPECT_EQ(parsed.front(), 1);
  EXPECT_EQ(parsed.back(), 2);
  const std::vector<int32_t> plain = tok.encode(text, /*parse_special=*/false);
  for (int32_t id : plain) EXPECT_NE(id, 1) << ids_text(plain);
  for (int32_t id : plain) EXPECT_NE(id, 2) << ids_text(plain);
  EXPECT_GT(plain.size(), parsed.size());
  EXPECT_EQ(tok.decode(plain), text);
}

TEST(Tokenizer, ChatTemplatesEqualTransformersRenders) {
  const Tokenizer& chatml = variant_tokenizer("smollm");
  const Tokenizer& llama3 = variant_tokenizer("llama3");
  const auto cases = read_json(tokenizer_data_dir() / "chat_goldens.json");
  ASSERT_GE(cases.size(), 8u);
  for (const auto& c : cases) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c.at("messages")) {
      messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    }
    const bool gen = c.at("add_generation_prompt").get<bool>();
    const std::string rendered = chatml.apply_chat_template(messages, gen);
    EXPECT_EQ(rendered, c.at("chatml").get<std::string>()) << c.dump();
    EXPECT_EQ(chatml.encode(rendered), c.at("chatml_ids").get<std::vector<int32_t>>()) << c.dump();
    EXPECT_EQ(llama3.apply_chat_template(messages, gen), c.at("llama3").get<std::string>())
        << c.dump();
  }
}

// Long inputs encode completely and round-trip. Encode speed is a benchmark
// (bench/tokenizer_encode.cpp), not a timed test.
TEST(Tokenizer, EncodesAFourThousandTokenPromptAndALongWord) {
  const Tokenizer& tok = variant_tokenizer("smollm");
  std::string text;
  for (size_t i = 0; tok.encode(text).size() < 4096; ++i) {
    const std::string& s = test_strings()[i % test_strings().size()];
    if (tok.decode(tok.encode(s)) != s) continue;  // skip the one string with bytes the vocab lacks
    text += s;
    text += i % 7 == 0 ? "\n\n" : " ";
  }
  const auto ids = tok.encode(text);
  EXPECT_GE(ids.size(), 4096u);
  EXPECT_EQ(tok.decode(ids), text);

  // One 20 KB "word" (a minified blob): the heap keeps BPE at O(n log n) per word.
  std::string blob;
  while (blob.size() < 20000) blob += "qwertyuiopasdfghjklzxcvbnm";
  const auto blob_ids = tok.encode(blob);
  EXPECT_GT(blob_ids.size(), 1000u);
  EXPECT_LT(blob_ids.size(), blob.size());
  EXPECT_EQ(tok.decode(blob_ids), blob);
}

// A tiny byte-level vocabulary written by hand: every byte plus the merges given.
std::filesystem::path write_tiny_tokenizer(const TempDir& dir, const std::string& model_type,
                                           const nlohmann::json& pre_tokenizer,
                                           const std::vector<std::string>& merges) {
  nlohmann::json vocab = nlohmann::json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) vocab[byte_level_encode(std::string(1, static_cast<char>(b)))] = id++;
  for (const std::string& m : merges) {
    const size_t space = m.find(' ');
    vocab[m.substr(0, space) + m.substr(space + 1)] = id++;
  }
  nlohmann::json doc = {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", id}, {"content", "<|end|>"}, {"special", true}},
        {{"id", id + 1}, {"content", "<tool>"}, {"special", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre_tokenizer},
      {"model", {{"type", model_type}, {"vocab", vocab}, {"merges", merges}}},
  };
  write_text(dir.path() / "tokenizer.json", doc.dump());
  return dir.path();
}

const nlohmann::json kByteLevelPre = {
    {"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};

TEST(Tokenizer, MergesFollowRankOrderNotTextOrder) {
  TempDir dir("tiny");
  // Ids: byte b is token b, then the merges' results from 256. "b c" outranks "a b", so
  // "abc" -> a + bc, never ab + c; "bc d" then applies.
  auto tok = Tokenizer::from_hf_dir(
      write_tiny_tokenizer(dir, "BPE", kByteLevelPre, {"b c", "a b", "bc d", "Ġ a"}));
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  EXPECT_EQ(tok->encode("abc"), (std::vector<int32_t>{'a', 256}));
  EXPECT_EQ(tok->encode("abcd"), (std::vector<int32_t>{'a', 258}));
  EXPECT_EQ(tok->encode("ab"), (std::vector<int32_t>{257}));
  EXPECT_EQ(tok->encode(" a"), (std::vector<int32_t>{259}));
  EXPECT_EQ(tok->decode(tok->encode("abcd abc")), "abcd abc");
  EXPECT_EQ(tok->vocab_size(), 262);
  // Added tokens: special ones only when parsing specials, user-defined ones always.
  EXPECT_EQ(tok->encode("x<|end|>"), (std::vector<int32_t>{'x', 260}));
  EXPECT_EQ(tok->encode("<tool>", false), (std::vector<int32_t>{261}));
  EXPECT_EQ(tok->encode("<|end|>", false).size(), 7u);
}

void expect_error(const Expected<Tokenizer>& result, const std::string& fragment) {
  ASSERT_FALSE(result.ok()) << "expected an error containing '" << fragment << "'";
  EXPECT_NE(result.error().message.find(fragment), std::string::npos) << result.error().message;
}

TEST(TokenizerErrors, MissingTokenizerJson) {
  TempDir dir("missing");
  const auto result = Tokenizer::from_hf_dir(dir.path());
  expect_error(result, "tokenizer.json: cannot open");
}

TEST(TokenizerErrors, CorruptJson) {
  TempDir dir("corrupt");
  write_text(dir.path() / "tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
  expect_error(Tokenizer::from_hf_dir(dir.path()), "tokenizer.json: not valid JSON");
  write_text(dir.path() / "tokenizer.json", "[1, 2]");
  expect_error(Tokenizer::from_hf_dir(dir.path()), "not a JSON object");
}

TEST(TokenizerErrors, UnsupportedModelType) {
  TempDir dir("unigram");
  expect_error(Tokenizer::from_hf_dir(write_tiny_tokenizer(dir, "Unigram", kByteLevelPre, {})),
               "unsupported tokenizer model type 'Unigram'");
}

TEST(TokenizerErrors, UnsupportedPreTokenizer) {
  TempDir dir("pre");
  expect_error(Tokenizer::from_hf_dir(write_tiny_tokenizer(
                   dir, "BPE", {{"type", "Whitespace"}}, {})),
               "unsupported pre-tokenizer {\"type\":\"Whitespace\"}");
  // A Split regex that is neither Llama-3's nor Qwen2's.
  const nlohmann::json other_split = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  expect_error(Tokenizer::from_hf_dir(write_tiny_tokenizer(dir, "BPE", other_split, {})),
               "unsupported pre-tokenizer");
}

TEST(TokenizerErrors, MergeOfUnknownTokensOrBadShape) {
  TempDir dir("badmerge");
  write_tiny_tokenizer(dir, "BPE", kByteLevelPre, {"a b"});
  auto doc = read_json(dir.path() / "tokenizer.json");
  doc["model"]["merges"].push_back("ab zzz");
  write_text(dir.path() / "tokenizer.json", doc.dump());
  expect_error(Tokenizer::from_hf_dir(dir.path()),
               "merge 1 'ab zzz' uses a token missing from the vocabulary");
  doc["model"]["merges"] = {"a b c"};
  write_text(dir.path() / "tokenizer.json", doc.dump());
  expect_error(Tokenizer::from_hf_dir(dir.path()), "merge 0 'a b c' is not two tokens");
  doc["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"a", "b"}), 5});
  write_text(dir.path() / "tokenizer.json", doc.dump());
  expect_error(Tokenizer::from_hf_dir(dir.path()), "merge 1 is neither");
  doc["model"].erase("vocab");
  write_text(dir.path() / "tokenizer.json", doc.dump());
  expect_error(Tokenizer::from_hf_dir(dir.path()), "model.vocab is missing");
}

TEST(TokenizerErrors, UnsupportedNormalizerAndByteFallback) {
  TempDir dir("norm");
  write_tiny_tokenizer(dir, "BPE", kByteLevelPre, {});
  auto doc = read_json(dir.path() / "tokenizer.json");
  doc["normalizer"] = {{"type", "NFC"}};
  write_text(dir.path() / "tokenizer.json", doc.dump());
  expect_error(Tokenizer::from_hf_dir(dir.path()), "unsupported normalizer 'NFC'");
  doc["normalizer"] = nullptr;
  doc["model"]["byte_fallback"] = true;
  write_text(dir.path() / "tokenizer.json", doc.dump());
  expect_error(Tokenizer::from_hf_dir(dir.path()), "byte_fallback");
}

}  // namespace
}  // namespace specula
