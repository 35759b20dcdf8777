#pragma once
// The prompts of the greedy fidelity tests (speculative output == plain greedy output): up to two
// short Spec-Bench dev items per category through the chat template (summarization and RAG
// articles are too long for a test on two cores), then 8 plain-text prompts. The Spec-Bench file
// is $SPECULA_SHARED_DIR/data/specbench-dev.jsonl when that variable is set (the GPU machine gets
// the file carried beside the binaries), else the checkout's ../shared.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/model/loader.h"

namespace specula::testing {

inline std::vector<std::vector<int32_t>> fidelity_prompts(const Model& m) {
  const char* shared = std::getenv("SPECULA_SHARED_DIR");
  const std::filesystem::path data = std::filesystem::path(shared ? shared : SPECULA_SHARED_DIR) / "data/specbench-dev.jsonl";
  std::ifstream in(data);
  EXPECT_TRUE(in) << data << ": cannot open the Spec-Bench dev items";
  std::vector<std::string> texts;
  std::map<std::string, int> taken;
  for (std::string line; std::getline(in, line);) {
    const auto item = nlohmann::json::parse(line);
    const auto turn = item["turns"][0].get<std::string>();
    if (turn.size() > 600 || taken[item["category"].get<std::string>()] >= 2) continue;
    ++taken[item["category"].get<std::string>()];
    const ChatMessage user{"user", turn};
    texts.push_back(m.tokenizer.apply_chat_template(std::span(&user, 1), true));
  }
  EXPECT_GE(texts.size(), 12u);
  for (const char* t : {"The capital of France is", "def fibonacci(n):\n    ", "Once upon a time, there was a",
                        "1, 2, 3, 4, 5, 6,", "The quick brown fox jumps over the lazy dog. The quick brown",
                        "Water boils at", "In 1492, Columbus", "import numpy as np\nimport"}) {
    texts.emplace_back(t);
  }
  std::vector<std::vector<int32_t>> out;
  for (const auto& t : texts) {
    std::vector<int32_t> ids;
    if (m.tokenizer.add_bos() && m.tokenizer.bos_id() >= 0) ids.push_back(m.tokenizer.bos_id());
    const auto enc = m.tokenizer.encode(t, true);
    ids.insert(ids.end(), enc.begin(), enc.end());
    out.push_back(ids);
  }
  return out;
}

}  // namespace specula::testing
