#pragma once
// generate on a TransformerBackend chosen with --backend (and --synthetic shapes on the GPU).
#include "app/cli/commands.h"

namespace specula::cli {

// Returned by run_generate_on_backend when the run belongs to the CPU path of run_generate
// (--backend cpu, or auto without a GPU, or auto with options only the CPU path has).
inline constexpr int kUseCpuGenerate = -1;

// Plain decoding on the CUDA backend; an exit code, or kUseCpuGenerate.
int run_generate_on_backend(const GenerateArgs& args);

}  // namespace specula::cli
