// The two commands' set-up is idempotent and quiet when nothing is missing: scripts/test has
// just run scripts/setup before ctest, so a second run must print nothing and change nothing.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "engine/model/loader.h"

namespace {

struct Output {
  int status = -1;
  std::string text;
};

Output run(const std::string& cmd) {
  Output out;
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe) return out;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.text.append(buf.data(), n);
  const int status = pclose(pipe);
  out.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

TEST(Scripts, FetchModelIsQuietAndKeepsTheFileWhenItIsAlreadyThere) {
  const auto model = specula::resolve_model_path("default");
  if (!std::filesystem::exists(model)) {
    GTEST_SKIP() << "skipped: default model not downloaded";
  }
  const auto before = std::filesystem::last_write_time(model);
  const auto r = run(std::string(SPECULA_SOURCE_DIR) + "/scripts/fetch-model");
  EXPECT_EQ(r.status, 0) << r.text;
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(std::filesystem::last_write_time(model), before);
}

TEST(Scripts, SetupIsQuietWhenNothingIsMissing) {
  const auto model = specula::resolve_model_path("default");
  if (!std::filesystem::exists(model)) {
    GTEST_SKIP() << "skipped: default model not downloaded";
  }
  const auto r = run(std::string(SPECULA_SOURCE_DIR) + "/scripts/setup");
  EXPECT_EQ(r.status, 0) << r.text;
  EXPECT_EQ(r.text, "") << "scripts/setup should print nothing once everything is installed";
}

}  // namespace
