// The committed fixture sessions (tests/data/sessions/fixture-gpu.sqlite) hold exactly
// what ui_session_fixture.h generates, so the screenshot tests draw known contents.
// SPECULA_REGENERATE_FIXTURES=1 rewrites them from the generator first.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "../ui_session_fixture.h"
#include "ui/models/session_data.h"

namespace specula::ui {
namespace {

namespace fs = std::filesystem;

void expect_same(const SessionData& a, const SessionData& b) {
  EXPECT_EQ(a.info.model_name, b.info.model_name);
  EXPECT_EQ(a.info.config_json, b.info.config_json);
  ASSERT_EQ(a.rounds.size(), b.rounds.size());
  for (size_t i = 0; i < a.rounds.size(); ++i) {
    EXPECT_EQ(a.rounds[i].tokens, b.rounds[i].tokens) << i;
    EXPECT_EQ(a.rounds[i].accepted_length, b.rounds[i].accepted_length) << i;
    EXPECT_EQ(a.rounds[i].start_ns, b.rounds[i].start_ns) << i;
  }
  ASSERT_EQ(a.selections.size(), b.selections.size());
  for (const auto& [round, rows] : a.selections) {
    const auto& other = b.selections.at(round);
    ASSERT_EQ(rows.size(), other.size()) << round;
    for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i].selection.block_bits, other[i].selection.block_bits);
  }
  for (const auto& [round, nodes] : a.draft_nodes) {
    const auto& other = b.draft_nodes.at(round);
    ASSERT_EQ(nodes.size(), other.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      EXPECT_EQ(nodes[i].accepted, other[i].accepted);
      EXPECT_EQ(nodes[i].visited, other[i].visited);
      EXPECT_EQ(nodes[i].target_prob, other[i].target_prob);
    }
  }
  EXPECT_EQ(a.ffn.size(), b.ffn.size());
  EXPECT_EQ(a.moe.size(), b.moe.size());
  EXPECT_EQ(a.nvtx.size(), b.nvtx.size());
  ASSERT_EQ(a.kernels.size(), b.kernels.size());
  for (size_t i = 0; i < a.kernels.size(); ++i) {
    EXPECT_EQ(a.kernels[i].demangled_name, b.kernels[i].demangled_name);
    EXPECT_EQ(a.kernels[i].start, b.kernels[i].start);
  }
}

void check_fixture(const std::string& name, bool with_kernels) {
  const fs::path committed = fs::path(SPECULA_TEST_DATA_DIR) / "sessions" / name;
  if (std::getenv("SPECULA_REGENERATE_FIXTURES") != nullptr) {
    fs::create_directories(committed.parent_path());
    ASSERT_EQ(testing::write_fixture_session(committed.string(), with_kernels), "");
  }
  const fs::path fresh = fs::temp_directory_path() / ("specula_fresh_" + name);
  ASSERT_EQ(testing::write_fixture_session(fresh.string(), with_kernels), "");
  auto a = load_session_data(committed.string());
  ASSERT_TRUE(a) << a.error().message << " (regenerate with SPECULA_REGENERATE_FIXTURES=1)";
  auto b = load_session_data(fresh.string());
  ASSERT_TRUE(b) << b.error().message;
  expect_same(*a, *b);
  fs::remove(fresh);
}

TEST(FixtureSessions, GpuFixtureMatchesTheGenerator) { check_fixture("fixture-gpu.sqlite", true); }

}  // namespace
}  // namespace specula::ui
