#include "engine/eval/tasks.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "engine/eval/metrics.h"

namespace specula::eval {
namespace {

constexpr const char* kGsm8kInstruction = "\nSolve the problem step by step, then give the final answer as a number.";

// Passkey text of Landmark Attention (Mohtashami & Jaggi, 2023), as LongLoRA uses it.
constexpr const char* kPasskeyTask =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. I will quiz you "
    "about the important information there.";
constexpr const char* kPasskeyFiller =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
constexpr const char* kPasskeyQuestion = "What is the pass key? The pass key is";

constexpr const char* kLccFiles[] = {
    "/usr/include/c++/12/bits/stl_tree.h",
    "/usr/include/c++/12/bits/stl_algo.h",
    "/usr/include/c++/12/bits/basic_string.h",
    "/usr/include/c++/12/bits/hashtable.h",
    "/usr/include/c++/12/bits/shared_ptr_base.h",
    "/usr/include/c++/12/bits/stl_deque.h",
    "/usr/include/nlohmann/json.hpp",
    "/usr/include/CLI/App.hpp",
    "/usr/include/gtest/gtest.h",
    "/usr/include/sqlite3.h",
    "/usr/lib/python3.11/argparse.py",
    "/usr/lib/python3.11/difflib.py",
    "/usr/lib/python3.11/tarfile.py",
    "/usr/lib/python3.11/subprocess.py",
    "/usr/lib/python3.11/typing.py",
    "/usr/lib/python3.11/inspect.py",
};

// splitmix64: a fixed, portable mix (std distributions differ between standard libraries).
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t item_random(uint64_t seed, int index, uint64_t stream) {
  return mix(mix(mix(seed) ^ static_cast<uint64_t>(index)) ^ stream);
}

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\f\v");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r\f\v");
  return s.substr(b, e - b + 1);
}

Expected<std::vector<nlohmann::json>> read_jsonl(const std::string& path, int limit, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(path + ": cannot open " + what + " data");
  std::vector<nlohmann::json> rows;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (trim(line).empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return make_error(path + ":" + std::to_string(line_no) + ": not a JSON object");
    }
    j["__line"] = line_no;
    rows.push_back(std::move(j));
    if (limit > 0 && static_cast<int>(rows.size()) >= limit) break;
  }
  if (rows.empty()) return make_error(path + ": no " + std::string(what) + " items");
  return rows;
}

std::string where(const std::string& path, const nlohmann::json& row) {
  return path + ":" + std::to_string(row["__line"].get<int>());
}

}  // namespace

Expected<TaskKind> parse_task(std::string_view name) {
  if (name == "gsm8k") return TaskKind::kGsm8k;
  if (name == "specbench") return TaskKind::kSpecbench;
  if (name == "lcc") return TaskKind::kLcc;
  if (name == "passkey") return TaskKind::kPasskey;
  return make_error("unknown task \"" + std::string(name) + "\"; expected gsm8k, specbench, lcc or passkey");
}

std::string_view task_name(TaskKind task) {
  switch (task) {
    case TaskKind::kGsm8k: return "gsm8k";
    case TaskKind::kSpecbench: return "specbench";
    case TaskKind::kLcc: return "lcc";
    case TaskKind::kPasskey: return "passkey";
  }
  return "";
}

std::string_view task_metric(TaskKind task) {
  switch (task) {
    case TaskKind::kGsm8k:
    case TaskKind::kPasskey: return "accuracy";
    case TaskKind::kLcc: return "edit_similarity";
    case TaskKind::kSpecbench: return "";
  }
  return "";
}

Expected<std::vector<EvalItem>> load_gsm8k(const std::string& path, int limit, int max_tokens) {
  auto rows = read_jsonl(path, limit, "GSM8K");
  if (!rows) return rows.error();
  std::vector<EvalItem> items;
  for (const auto& row : *rows) {
    if (!row.contains("question") || !row["question"].is_string() || !row.contains("answer") ||
        !row["answer"].is_string()) {
      return make_error(where(path, row) + ": expected {\"question\": \"...\", \"answer\": \"... #### N\"}");
    }
    auto reference = gsm8k_reference(row["answer"].get<std::string>());
    if (!reference) return make_error(where(path, row) + ": the answer has no number after \"####\"");
    EvalItem item;
    item.id = "gsm8k:" + std::to_string(items.size());
    item.prompt = row["question"].get<std::string>() + kGsm8kInstruction;
    item.chat = true;
    item.reference = *reference;
    item.max_tokens = max_tokens;
    items.push_back(std::move(item));
  }
  return items;
}

Status pad_gsm8k_few_shot(std::vector<EvalItem>& items, const std::string& path, int64_t context_tokens,
                          const TokenCounter& count_tokens) {
  auto rows = read_jsonl(path, 0, "GSM8K");
  if (!rows) return rows.error();
  // The solved examples, from the set's end backwards: "Question: ...\nAnswer: ...\n\n".
  std::vector<std::pair<std::string, std::string>> shots;  // (question, example text)
  for (auto it = rows->rbegin(); it != rows->rend(); ++it) {
    const std::string question = (*it)["question"].get<std::string>();
    std::string answer = (*it)["answer"].get<std::string>();
    auto reference = gsm8k_reference(answer);
    if (!reference) continue;
    std::string clean;  // without the <<a*b=c>> calculator notes
    for (size_t p = 0; p < answer.size();) {
      const size_t open = answer.find("<<", p);
      if (open == std::string::npos) {
        clean += answer.substr(p);
        break;
      }
      const size_t close = answer.find(">>", open);
      clean += answer.substr(p, open - p);
      p = close == std::string::npos ? answer.size() : close + 2;
    }
    clean = clean.substr(0, clean.find("####"));
    while (!clean.empty() && (clean.back() == '\n' || clean.back() == ' ')) clean.pop_back();
    shots.emplace_back(question, "Question: " + question + "\nAnswer: " + clean + "\nThe final answer is " +
                                     *reference + ".\n\n");
  }
  for (auto& item : items) {
    const std::string question = item.prompt.substr(0, item.prompt.size() - std::string_view(kGsm8kInstruction).size());
    const std::string tail = "Question: " + item.prompt;
    int64_t used = count_tokens(tail);
    std::string prefix;
    for (const auto& [q, text] : shots) {
      if (q == question) continue;  // never the item itself
      const int64_t n = count_tokens(text);
      if (used + n > context_tokens) break;
      prefix += text;
      used += n;
    }
    item.prompt = prefix + tail;
    item.stop = "\nQuestion:";
  }
  return {};
}

Expected<std::vector<EvalItem>> load_specbench(const std::string& path, int limit, int max_tokens) {
  auto rows = read_jsonl(path, 0, "Spec-Bench");
  if (!rows) return rows.error();
  // Categories in order of first appearance, each with its items in file order.
  std::vector<std::vector<EvalItem>> by_category;
  std::vector<std::string> names;
  for (const auto& row : *rows) {
    if (!row.contains("category") || !row["category"].is_string() || !row.contains("turns") ||
        !row["turns"].is_array() || row["turns"].empty() || !row["turns"][0].is_string()) {
      return make_error(where(path, row) + ": expected {\"category\": \"...\", \"turns\": [\"...\"]}");
    }
    const std::string category = row["category"].get<std::string>();
    const auto index = static_cast<size_t>(std::find(names.begin(), names.end(), category) - names.begin());
    if (index == names.size()) {
      names.push_back(category);
      by_category.emplace_back();
    }
    auto& bucket = by_category[index];
    EvalItem item;
    const std::string qid = row.contains("question_id") ? row["question_id"].dump() : std::to_string(row["__line"].get<int>());
    item.id = "specbench:" + category + ":" + qid;
    item.prompt = row["turns"][0].get<std::string>();
    item.chat = true;
    item.max_tokens = max_tokens;
    bucket.push_back(std::move(item));
  }
  // Round-robin over the categories, so a --limit sample covers them all rather than the
  // first category of the file.
  std::vector<EvalItem> items;
  const size_t want = limit > 0 ? static_cast<size_t>(limit) : rows->size();
  for (size_t round = 0; items.size() < want; ++round) {
    bool any = false;
    for (auto& bucket : by_category) {
      if (round < bucket.size() && items.size() < want) {
        items.push_back(std::move(bucket[round]));
        any = true;
      }
    }
    if (!any) break;
  }
  return items;
}

double passkey_depth(uint64_t seed, int index) {
  return static_cast<double>(item_random(seed, index, 1) >> 11) * 0x1.0p-53;
}

int passkey_value(uint64_t seed, int index) { return 1 + static_cast<int>(item_random(seed, index, 2) % 50000); }

std::vector<EvalItem> make_passkey_items(const PasskeyOptions& options, const TokenCounter& count_tokens) {
  auto build = [](int64_t before, int64_t after, int key) {
    std::string filler_before, filler_after;
    for (int64_t i = 0; i < before; ++i) filler_before += kPasskeyFiller;
    for (int64_t i = 0; i < after; ++i) filler_after += kPasskeyFiller;
    const std::string k = std::to_string(key);
    return std::string(kPasskeyTask) + "\n" + filler_before + "\nThe pass key is " + k + ". Remember it. " + k +
           " is the pass key.\n" + filler_after + "\n" + kPasskeyQuestion;
  };
  const int64_t fixed = count_tokens(build(0, 0, 12345));
  // Tokens per filler repetition, averaged over several: BPE may merge across the boundary.
  constexpr int kProbe = 16;
  std::string probe;
  for (int i = 0; i < kProbe; ++i) probe += kPasskeyFiller;
  const double unit = std::max(1.0, static_cast<double>(count_tokens(probe)) / kProbe);
  const auto repeats = std::max<int64_t>(0, static_cast<int64_t>(static_cast<double>(options.context_tokens - fixed) / unit));
  std::vector<EvalItem> items;
  for (int i = 0; i < options.items; ++i) {
    const int key = passkey_value(options.seed, i);
    const auto before = static_cast<int64_t>(std::llround(passkey_depth(options.seed, i) * static_cast<double>(repeats)));
    EvalItem item;
    item.id = "passkey:" + std::to_string(i);
    item.prompt = build(before, repeats - before, key);
    item.reference = std::to_string(key);
    item.max_tokens = 8;
    items.push_back(std::move(item));
  }
  return items;
}

std::span<const char* const> lcc_source_files() { return kLccFiles; }

Expected<std::string> load_longbench_template(const std::string& dataset2prompt_json, const std::string& dataset) {
  std::ifstream in(dataset2prompt_json, std::ios::binary);
  if (!in) return make_error(dataset2prompt_json + ": cannot open the LongBench prompt templates");
  const auto j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return make_error(dataset2prompt_json + ": not a JSON object");
  if (!j.contains(dataset) || !j[dataset].is_string()) {
    return make_error(dataset2prompt_json + ": no template for \"" + dataset + "\"");
  }
  std::string t = j[dataset].get<std::string>();
  if (t.find("{context}") == std::string::npos) {
    return make_error(dataset2prompt_json + ": the \"" + dataset + "\" template has no {context}");
  }
  return t;
}

Expected<EvalItem> make_lcc_item(const std::string& path, std::string_view file_text, std::string_view prompt_template,
                                 const LccOptions& options, const TokenCounter& count_tokens) {
  const size_t slot = prompt_template.find("{context}");
  if (slot == std::string_view::npos) return make_error("lcc: the prompt template has no {context}");
  int64_t tokens = 0;
  size_t cut = 0;  // the prefix is file_text[0, cut), ending after a newline
  while (tokens < options.context_tokens) {
    const size_t nl = file_text.find('\n', cut);
    if (nl == std::string_view::npos) {
      return make_error(path + ": only " + std::to_string(tokens) + " tokens, the lcc prefix needs " +
                        std::to_string(options.context_tokens) + " and a next line");
    }
    tokens += count_tokens(file_text.substr(cut, nl + 1 - cut));
    cut = nl + 1;
  }
  std::string_view reference;
  for (size_t at = cut; at < file_text.size() && reference.empty();) {
    const size_t nl = std::min(file_text.find('\n', at), file_text.size());
    reference = trim(file_text.substr(at, nl - at));
    at = nl + 1;
  }
  if (reference.empty()) return make_error(path + ": no non-empty line after the " + std::to_string(tokens) + "-token prefix");
  EvalItem item;
  item.id = "lcc:" + path;
  item.prompt = std::string(prompt_template.substr(0, slot)) + std::string(file_text.substr(0, cut)) +
                std::string(prompt_template.substr(slot + std::string_view("{context}").size()));
  item.reference = std::string(reference);
  item.max_tokens = options.max_tokens;
  return item;
}

LccItems make_lcc_items(std::span<const std::string> paths, std::string_view prompt_template,
                        const LccOptions& options, const TokenCounter& count_tokens) {
  LccItems out;
  for (const auto& path : paths) {
    if (options.items > 0 && static_cast<int>(out.items.size()) >= options.items) break;
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      out.skipped.push_back(path + ": cannot open");
      continue;
    }
    const std::string text(std::istreambuf_iterator<char>(in), {});
    auto item = make_lcc_item(path, text, prompt_template, options, count_tokens);
    if (!item) {
      out.skipped.push_back(item.error().message);
      continue;
    }
    out.items.push_back(std::move(*item));
  }
  return out;
}

std::optional<double> score_output(TaskKind task, const EvalItem& item, std::string_view output) {
  switch (task) {
    case TaskKind::kGsm8k: {
      const auto n = last_number(item.stop.empty() ? output : output.substr(0, output.find(item.stop)));
      return n && same_number(*n, item.reference) ? 1.0 : 0.0;
    }
    case TaskKind::kPasskey: {
      const auto n = first_number(output);
      return n && same_number(*n, item.reference) ? 1.0 : 0.0;
    }
    case TaskKind::kLcc: return code_sim_score(output, item.reference);
    case TaskKind::kSpecbench: return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace specula::eval
