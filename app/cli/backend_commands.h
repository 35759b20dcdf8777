#pragma once
// generate on a TransformerBackend chosen with --backend (and --synthetic shapes on the GPU).
#include "app/cli/commands.h"

namespace specula::cli {

// Returned by run_generate_on_backend when the run belongs to run_generate's own paths: plain
// decoding on the CPU (--backend cpu, auto without a GPU, int8), or the speculative engine
// (a drafter, --shadow, --record, sparse verification), which picks its backend itself.
inline constexpr int kUseCpuGenerate = -1;

// Plain decoding on the CUDA backend; an exit code, or kUseCpuGenerate.
int run_generate_on_backend(const GenerateArgs& args);

}  // namespace specula::cli
