// Task loaders on the shared development data, passkey and LCC construction, and scoring.
#include "engine/eval/tasks.h"

#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace specula::eval {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kData = fs::path(SPECULA_SHARED_DIR) / "data";

// A stand-in tokenizer: one token per 4 bytes, rounded up. Construction only needs a
// monotone count; the CLI passes the model's tokenizer.
int64_t quarter_bytes(std::string_view s) { return static_cast<int64_t>((s.size() + 3) / 4); }

fs::path write_temp(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("specula_eval_tasks_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

size_t count_of(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

TEST(EvalTasks, ParseTask) {
  EXPECT_EQ(*parse_task("gsm8k"), TaskKind::kGsm8k);
  EXPECT_EQ(*parse_task("passkey"), TaskKind::kPasskey);
  auto bad = parse_task("mmlu");
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, HasSubstr("unknown task \"mmlu\""));
  EXPECT_EQ(task_metric(TaskKind::kLcc), "edit_similarity");
  EXPECT_EQ(task_metric(TaskKind::kSpecbench), "");
}

TEST(EvalTasks, LoadsGsm8kDevSet) {
  const auto path = (kData / "gsm8k-dev.jsonl").string();
  if (!fs::exists(path)) GTEST_SKIP() << "skipped: " << path << " not present";
  auto items = load_gsm8k(path, 3);
  ASSERT_TRUE(items) << items.error().message;
  ASSERT_EQ(items->size(), 3u);
  EXPECT_EQ((*items)[0].reference, "18");  // "... #### 18"
  EXPECT_THAT((*items)[0].prompt, HasSubstr("Janet"));
  EXPECT_TRUE((*items)[0].chat);
  EXPECT_EQ((*items)[1].reference, "3");   // the robe: 2 + 1 bolts
  auto all = load_gsm8k(path, 0);
  ASSERT_TRUE(all) << all.error().message;
  EXPECT_EQ(all->size(), 400u);
}

TEST(EvalTasks, LoadsSpecbenchDevSet) {
  const auto path = (kData / "specbench-dev.jsonl").string();
  if (!fs::exists(path)) GTEST_SKIP() << "skipped: " << path << " not present";
  auto items = load_specbench(path, 15);
  ASSERT_TRUE(items) << items.error().message;
  ASSERT_EQ(items->size(), 15u);
  EXPECT_EQ((*items)[0].id, "specbench:writing:81");
  EXPECT_THAT((*items)[0].prompt, HasSubstr("Hawaii"));
  EXPECT_TRUE((*items)[0].reference.empty());
  // Round-robin: the first item of each of the 13 categories, then the second ones.
  EXPECT_EQ((*items)[1].id, "specbench:roleplay:91");
  EXPECT_EQ((*items)[12].id, "specbench:rag:481");
  EXPECT_EQ((*items)[13].id, "specbench:writing:82");
  EXPECT_EQ((*items)[14].id, "specbench:roleplay:92");
  auto all = load_specbench(path, 0);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), 240u);
}

TEST(EvalTasks, LoaderErrorsSayWhere) {
  auto missing = load_gsm8k("/nonexistent/gsm8k.jsonl", 0);
  ASSERT_FALSE(missing);
  EXPECT_THAT(missing.error().message, HasSubstr("/nonexistent/gsm8k.jsonl: cannot open"));
  const auto bad = write_temp("bad.jsonl", "{\"question\": \"q\", \"answer\": \"#### 1\"}\n{\"question\": 3}\n");
  auto r = load_gsm8k(bad.string(), 0);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr(bad.string() + ":2:"));
  const auto no_mark = write_temp("nomark.jsonl", "{\"question\": \"q\", \"answer\": \"42\"}\n");
  r = load_gsm8k(no_mark.string(), 0);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("####"));
  const auto junk = write_temp("junk.jsonl", "not json\n");
  auto s = load_specbench(junk.string(), 0);
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr(":1: not a JSON object"));
  const auto empty = write_temp("empty.jsonl", "\n\n");
  s = load_specbench(empty.string(), 0);
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("no Spec-Bench items"));
}

TEST(EvalTasks, PasskeyIsDeterministicBySeed) {
  const PasskeyOptions options{4, 600, 7};
  const auto a = make_passkey_items(options, quarter_bytes);
  const auto b = make_passkey_items(options, quarter_bytes);
  ASSERT_EQ(a.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    EXPECT_EQ(a[i].reference, b[i].reference);
  }
  const auto c = make_passkey_items(PasskeyOptions{4, 600, 8}, quarter_bytes);
  int differing = 0;
  for (size_t i = 0; i < a.size(); ++i) differing += a[i].reference != c[i].reference ? 1 : 0;
  EXPECT_GE(differing, 3);
  for (int i = 0; i < 100; ++i) {
    const int key = passkey_value(7, i);
    EXPECT_GE(key, 1);
    EXPECT_LE(key, 50000);
    const double depth = passkey_depth(7, i);
    EXPECT_GE(depth, 0.0);
    EXPECT_LT(depth, 1.0);
  }
}

TEST(EvalTasks, PasskeyConstruction) {
  const int64_t context = 2000;
  const auto items = make_passkey_items(PasskeyOptions{3, context, 1}, quarter_bytes);
  const std::string filler = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& item = items[i];
    const std::string& key = item.reference;
    EXPECT_EQ(key, std::to_string(passkey_value(1, static_cast<int>(i))));
    const std::string needle = "The pass key is " + key + ". Remember it. " + key + " is the pass key.";
    EXPECT_EQ(count_of(item.prompt, needle), 1u);
    EXPECT_FALSE(item.chat);
    EXPECT_TRUE(item.prompt.starts_with("There is an important info hidden inside a lot of irrelevant text."));
    EXPECT_TRUE(item.prompt.ends_with("\nWhat is the pass key? The pass key is"));
    // Within one filler sentence of the requested size, never above it.
    const int64_t tokens = quarter_bytes(item.prompt);
    EXPECT_LE(tokens, context + 2);
    EXPECT_GT(tokens, context - quarter_bytes(filler) - 2);
    // The key sits at the seeded depth, to within one filler repetition.
    const size_t repeats = count_of(item.prompt, filler);
    const size_t before = count_of(item.prompt.substr(0, item.prompt.find(needle)), filler);
    EXPECT_NEAR(static_cast<double>(before), passkey_depth(1, static_cast<int>(i)) * static_cast<double>(repeats), 1.0);
  }
}

TEST(EvalTasks, LongBenchLccTemplate) {
  const auto path = (kData / "longbench-dataset2prompt.json").string();
  if (!fs::exists(path)) GTEST_SKIP() << "skipped: " << path << " not present";
  auto t = load_longbench_template(path, "lcc");
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(*t, "Please complete the code given below. \n{context}Next line of code:\n");
  auto missing = load_longbench_template(path, "no-such-task");
  ASSERT_FALSE(missing);
  EXPECT_THAT(missing.error().message, HasSubstr("no template for \"no-such-task\""));
}

TEST(EvalTasks, LccItemCutsAtALineAndTakesTheNextNonEmptyLine) {
  // 10 lines of 8 bytes ("line N;\n") = 2 quarter-byte tokens each.
  std::string file;
  for (int i = 0; i < 10; ++i) file += "line " + std::to_string(i) + ";\n";
  file.insert(file.find("line 5;"), "\n   \n");  // blank lines before line 5
  const std::string tmpl = "Complete:\n{context}Next:\n";
  auto item = make_lcc_item("f.c", file, tmpl, LccOptions{9, 0, 32}, quarter_bytes);
  ASSERT_TRUE(item) << item.error().message;
  // 5 lines reach 10 >= 9 tokens: lines 0..4; the blank lines are skipped for the reference.
  EXPECT_EQ(item->prompt, "Complete:\nline 0;\nline 1;\nline 2;\nline 3;\nline 4;\nNext:\n");
  EXPECT_EQ(item->reference, "line 5;");
  EXPECT_EQ(item->id, "lcc:f.c");
  EXPECT_EQ(item->max_tokens, 32);
  EXPECT_FALSE(item->chat);
  auto too_short = make_lcc_item("f.c", file, tmpl, LccOptions{1000, 0, 32}, quarter_bytes);
  ASSERT_FALSE(too_short);
  EXPECT_THAT(too_short.error().message, HasSubstr("f.c: only"));
  auto no_next = make_lcc_item("g.c", "a;\n\n  \n", tmpl, LccOptions{1, 0, 32}, quarter_bytes);
  ASSERT_FALSE(no_next);
  EXPECT_THAT(no_next.error().message, HasSubstr("no non-empty line"));
}

TEST(EvalTasks, LccItemsFromInstalledSources) {
  std::vector<std::string> paths;
  for (const char* p : lcc_source_files()) paths.emplace_back(p);
  paths.emplace_back("/nonexistent/file.h");
  const std::string tmpl = "Please complete the code given below. \n{context}Next line of code:\n";
  const auto built = make_lcc_items(paths, tmpl, LccOptions{2048, 0, 64}, quarter_bytes);
  ASSERT_FALSE(built.items.empty()) << "none of the listed sources is installed";
  EXPECT_EQ(built.items.size() + built.skipped.size(), paths.size());
  EXPECT_THAT(built.skipped.back(), HasSubstr("/nonexistent/file.h: cannot open"));
  for (const auto& item : built.items) {
    const std::string path = item.id.substr(4);
    std::ifstream in(path, std::ios::binary);
    const std::string text(std::istreambuf_iterator<char>(in), {});
    const std::string prefix = item.prompt.substr(39, item.prompt.size() - 39 - 19);
    ASSERT_TRUE(text.starts_with(prefix)) << path;
    EXPECT_TRUE(prefix.ends_with("\n"));
    // The cut is the first line boundary where the per-line counts reach 2048.
    int64_t sum = 0, before_last = 0;
    for (size_t from = 0; from < prefix.size();) {
      const size_t nl = prefix.find('\n', from);
      before_last = sum;
      sum += quarter_bytes(std::string_view(prefix).substr(from, nl + 1 - from));
      from = nl + 1;
    }
    EXPECT_GE(sum, 2048) << path;
    EXPECT_LT(before_last, 2048) << path;
    // The reference is the first non-blank line after the prefix, trimmed.
    size_t at = prefix.size();
    std::string line;
    while (line.find_first_not_of(" \t\r") == std::string::npos) {
      const size_t nl = text.find('\n', at);
      line = text.substr(at, nl - at);
      at = nl + 1;
    }
    EXPECT_NE(line.find(item.reference), std::string::npos) << path;
  }
  // --limit: the first N available files, in the listed order.
  const auto two = make_lcc_items(paths, tmpl, LccOptions{2048, 2, 64}, quarter_bytes);
  ASSERT_EQ(two.items.size(), std::min<size_t>(2, built.items.size()));
  EXPECT_EQ(two.items[0].id, built.items[0].id);
  EXPECT_EQ(two.items[0].prompt, built.items[0].prompt);
}

TEST(EvalTasks, Scores) {
  EvalItem gsm{"gsm8k:0", "", true, "18", 16, ""};
  EXPECT_EQ(score_output(TaskKind::kGsm8k, gsm, "9 * 2 = 18 dollars."), 1.0);
  EXPECT_EQ(score_output(TaskKind::kGsm8k, gsm, "18 eggs, so 9 * 2 = 20"), 0.0);  // the last number counts
  EXPECT_EQ(score_output(TaskKind::kGsm8k, gsm, "no idea"), 0.0);
  EvalItem key{"passkey:0", "", false, "4242", 8, ""};
  EXPECT_EQ(score_output(TaskKind::kPasskey, key, " 4242. Remember it."), 1.0);
  EXPECT_EQ(score_output(TaskKind::kPasskey, key, " 424"), 0.0);
  EvalItem line{"lcc:x", "", false, "sitting", 64, ""};
  EXPECT_DOUBLE_EQ(*score_output(TaskKind::kLcc, line, "kitten\nmore"), 0.62);
  EXPECT_FALSE(score_output(TaskKind::kSpecbench, EvalItem{}, "text").has_value());
}

TEST(EvalTasks, Gsm8kFewShotFillsTheContextWithOtherSolvedItems) {
  const std::string rows =
      "{\"question\": \"Q0 apples?\", \"answer\": \"2 + 2 = <<2+2=4>>4\\n#### 4\"}\n"
      "{\"question\": \"Q1 pears?\", \"answer\": \"3 * 3 = <<3*3=9>>9\\n#### 9\"}\n"
      "{\"question\": \"Q2 plums?\", \"answer\": \"10 - 5 = <<10-5=5>>5\\n#### 5\"}\n"
      "{\"question\": \"Q3 figs?\", \"answer\": \"1 + 6 = <<1+6=7>>7\\n#### 7\"}\n";
  const auto path = write_temp("fewshot.jsonl", rows);
  auto items = load_gsm8k(path.string(), 1);
  ASSERT_TRUE(items.ok()) << items.error().message;
  ASSERT_TRUE(pad_gsm8k_few_shot(*items, path.string(), 80, quarter_bytes).ok());
  const EvalItem& item = (*items)[0];
  // Examples from the end backwards (Q3 first, then Q2), never Q0 itself, until 80 "tokens".
  EXPECT_EQ(item.prompt.find("Question: Q3 figs?\nAnswer: 1 + 6 = 7\nThe final answer is 7.\n\n"), 0u);
  EXPECT_NE(item.prompt.find("Question: Q2 plums?"), std::string::npos);
  EXPECT_EQ(item.prompt.find("<<"), std::string::npos) << "calculator notes are dropped";
  EXPECT_EQ(count_of(item.prompt, "Q0 apples?"), 1u) << "the item's own question appears once, last";
  EXPECT_LT(item.prompt.find("Q2 plums?"), item.prompt.find("Question: Q0 apples?"));
  EXPECT_LE(quarter_bytes(item.prompt), 80 + 2);
  EXPECT_TRUE(item.chat);
  EXPECT_EQ(item.stop, "\nQuestion:");
  // Scoring reads up to the next question the model may invent.
  EXPECT_EQ(score_output(TaskKind::kGsm8k, item, "2 + 2 = 4. The final answer is 4.\nQuestion: 5 + 5 = 10"), 1.0);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace specula::eval
