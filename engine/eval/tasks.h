#pragma once
// The evaluation tasks: loaders for the jsonl sets and builders for the long-context ones.
//
//  gsm8k      GSM8K jsonl {question, answer}; chat prompt; score: the model's last number equals
//             the number after "####" in the answer (accuracy)
//  specbench  Spec-Bench jsonl {question_id, category, turns}; chat prompt with the first turn;
//             no reference, so no task score (agreement with strict is the measure)
//  lcc        LongBench-LCC-style next-line completion: LongBench's "lcc" template over a prefix
//             of a real source file that Debian installs (kLccSourceFiles), cut at a line boundary
//             once the prefix holds about `context_tokens` tokens; the reference is the next
//             non-empty line with its surrounding whitespace trimmed; score: code_sim_score
//  passkey    the passkey-retrieval construction of Landmark Attention / LongLoRA: a task line,
//             the filler sentences repeated, "The pass key is N. Remember it. N is the pass key."
//             at a seeded depth, and "What is the pass key? The pass key is"; score: the first
//             number of the output equals N (accuracy)
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/expected.h"

namespace specula::eval {

enum class TaskKind { kGsm8k, kSpecbench, kLcc, kPasskey };

Expected<TaskKind> parse_task(std::string_view name);
std::string_view task_name(TaskKind task);
// The metric a task scores with ("accuracy", "edit_similarity"), or "" when it has none.
std::string_view task_metric(TaskKind task);

struct EvalItem {
  std::string id;          // "gsm8k:3", "passkey:0", "lcc:/usr/include/sqlite3.h"
  std::string prompt;      // the text to tokenize
  bool chat = false;       // wrap `prompt` in the model's chat template as a user turn
  std::string reference;   // the expected answer; "" when the task has none
  int max_tokens = 64;     // what the task needs to answer
  std::string stop;        // scoring reads the output up to this text ("" = all of it)
};

// Token count of a text under the model's tokenizer (no BOS); builders size contexts with it.
using TokenCounter = std::function<int64_t(std::string_view)>;

// limit: items to keep (0 = all): GSM8K's first ones; Spec-Bench's round-robin over its
// categories (the first of each category in file order, then the second, ...).
Expected<std::vector<EvalItem>> load_gsm8k(const std::string& path, int limit, int max_tokens = 256);
// Few-shot GSM8K at a long context: prepends solved examples ("Question: ...\nAnswer: ...", the
// reference solution without its <<calculator>> notes, ending "The final answer is N.") to each
// item's question until its prompt holds about context_tokens tokens. The examples are the
// set's rows taken from its end backwards, never the item itself; scoring stops at the next
// "\nQuestion:" the model may go on to write.
Status pad_gsm8k_few_shot(std::vector<EvalItem>& items, const std::string& path, int64_t context_tokens,
                          const TokenCounter& count_tokens);
Expected<std::vector<EvalItem>> load_specbench(const std::string& path, int limit, int max_tokens = 128);

struct PasskeyOptions {
  int items = 20;
  int64_t context_tokens = 4096;  // about this many prompt tokens (at least the fixed lines)
  uint64_t seed = 0;              // picks each item's pass key (1..50000) and depth
};
std::vector<EvalItem> make_passkey_items(const PasskeyOptions& options, const TokenCounter& count_tokens);
// The depth (0..1) and key a seed gives item `index`; make_passkey_items uses these.
double passkey_depth(uint64_t seed, int index);
int passkey_value(uint64_t seed, int index);

// Source files LCC items are cut from, in this order: headers and modules of packages that
// scripts/setup installs on Debian 12 (libstdc++-12-dev, nlohmann-json3-dev, libcli11-dev,
// libgtest-dev, libsqlite3-dev, libpython3.11-minimal/stdlib). Missing files are skipped
// and reported.
std::span<const char* const> lcc_source_files();

// The LongBench "lcc" template ("... {context}Next line of code:\n") from
// longbench-dataset2prompt.json.
Expected<std::string> load_longbench_template(const std::string& dataset2prompt_json, const std::string& dataset);

struct LccOptions {
  int64_t context_tokens = 4096;  // prefix size to reach (the template adds a few tokens)
  int items = 0;                  // 0 = one per available file
  int max_tokens = 64;            // LongBench's lcc output length
};
// One item from one file: the prefix up to the first line boundary where the prefix holds
// at least context_tokens tokens, and the next non-empty line. Error when the file is shorter.
Expected<EvalItem> make_lcc_item(const std::string& path, std::string_view file_text, std::string_view prompt_template,
                                 const LccOptions& options, const TokenCounter& count_tokens);
struct LccItems {
  std::vector<EvalItem> items;
  std::vector<std::string> skipped;  // "path: why"
};
LccItems make_lcc_items(std::span<const std::string> paths, std::string_view prompt_template,
                        const LccOptions& options, const TokenCounter& count_tokens);

// The item's score in [0, 1] for the task's metric; nullopt for specbench.
std::optional<double> score_output(TaskKind task, const EvalItem& item, std::string_view output);

}  // namespace specula::eval
