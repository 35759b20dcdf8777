#pragma once
// `generate --record SESSION.sqlite`: the recorder the run's observer events go to, and the
// SessionStart fields only the CLI knows (configuration, model sha256, device, version).
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "engine/core/expected.h"
#include "engine/model/loader.h"
#include "engine/spec/speculative.h"
#include "profiler/cupti_capture.h"
#include "profiler/recorder.h"

namespace specula::cli {

// The run's configuration as the session stores it (and --json repeats).
nlohmann::json generate_config_json(const GenerateArgs& args, const SpeculativeOptions& options, size_t prompt_tokens,
                                    const std::string& backend);

class RunRecording {
 public:
  // Creates the session file (refusing an existing one unless args.overwrite), points
  // options.observer at the recorder and starts CUPTI capture; when capture cannot run, its
  // one-line notice goes to stderr and the run records CPU spans only.
  // `backend` is where the target runs (the session's backend and device). When CUPTI capture
  // starts it switches programmatic dependent launch off, so that kernel durations are the
  // kernels' own (call it before the run's first forward, which captures the CUDA graphs).
  static Expected<RunRecording> start(const GenerateArgs& args, const Model& model, size_t prompt_tokens,
                                      SpeculativeOptions& options, const TransformerBackend& backend);
  // Writes everything queued and closes the database; the summary line names what was kept.
  Expected<std::string> finish();
  const std::string& path() const { return recorder_->path(); }

 private:
  std::shared_ptr<profiler::Recorder> recorder_;
  std::unique_ptr<profiler::CuptiCapture> capture_;
};

}  // namespace specula::cli
