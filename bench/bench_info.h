#pragma once
// What every bench/results/*.json names: the machine, the commit and the command.
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "kernels/cpu/cpu_info.h"

namespace specula::bench {

// The NVIDIA kernel driver's version line ("NVRM version: ... 580.159.04 ..."), empty without one.
inline std::string nvidia_driver() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (std::getline(in, line) && !line.empty()) return line;
  // Sandboxed drivers may hide /proc/driver; ask nvidia-smi instead.
  if (FILE* pipe = popen("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null", "r")) {
    char buf[128] = {};
    if (fgets(buf, sizeof buf, pipe)) line = buf;
    pclose(pipe);
  }
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

inline std::string command_line(int argc, char** argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) {  // appends in place: `" " + std::string(...)` trips GCC 12's -Wrestrict when inlined
    if (i) out += ' ';
    out += argv[i];
  }
  return out;
}

inline std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

inline nlohmann::json host_info() {
  utsname u{};
  uname(&u);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return {{"cpu", specula::cpu_model_name()},
          {"hardware_threads", std::thread::hardware_concurrency()},
          {"kernel", std::string(u.sysname) + " " + u.release},
          {"hostname", host}};
}

}  // namespace specula::bench
