#pragma once
// Runs the real specula-cli binary as a user would, for the app tests: captures stdout, stderr
// and the exit code, with `timeout` turning a hang into a failure instead of a stuck suite.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "engine/model/loader.h"

namespace specula::cli_test {

namespace fs = std::filesystem;

struct CliRun {
  int exit_code = -1;
  bool crashed = false;  // a signal, or timeout's 124 and the shell's 128+N
  std::string out, err;
};

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A file in this test process's own scratch folder (ctest runs tests in parallel processes).
inline fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("specula_cli_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

inline std::string quote(const fs::path& p) {
  std::string quoted = "'";
  quoted.append(p.string());
  quoted.push_back('\'');
  return quoted;
}

inline CliRun run_cli(const std::string& args, int timeout_s = 600) {
  const std::string cmd = "timeout " + std::to_string(timeout_s) + " " + std::string(SPECULA_CLI) + " " + args +
                          " >" + scratch("run.out").string() + " 2>" + scratch("run.err").string() + " </dev/null";
  const int status = std::system(cmd.c_str());
  CliRun r;
  r.out = slurp(scratch("run.out"));
  r.err = slurp(scratch("run.err"));
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.crashed = !WIFEXITED(status) || r.exit_code >= 124;
  return r;
}

inline int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// One clear line on stderr, a non-zero exit, no crash, and the message contains `needle`.
inline void expect_clean_failure(const CliRun& r, const std::string& needle) {
  EXPECT_FALSE(r.crashed) << r.err;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, ::testing::HasSubstr(needle));
}

inline bool have_default_model() { return fs::exists(resolve_model_path("default")); }

}  // namespace specula::cli_test
