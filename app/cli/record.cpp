#include "app/cli/record.h"

#include <cstdio>
#include <filesystem>

#include "engine/backend/cuda_backend.h"
#include "engine/model/model_identity.h"
#include "kernels/cpu/cpu_info.h"

namespace specula::cli {

nlohmann::json generate_config_json(const GenerateArgs& args, const SpeculativeOptions& options, size_t prompt_tokens,
                                    const std::string& backend) {
  nlohmann::json config = {{"command", "generate"},
                           {"model", args.model},
                           {"chat", args.chat},
                           {"prompt_tokens", prompt_tokens},
                           {"max_tokens", args.max_tokens},
                           {"temperature", args.temperature},
                           {"top_k", args.top_k},
                           {"top_p", args.top_p},
                           {"seed", args.seed},
                           {"threads", args.threads},
                           {"kv_block_size", args.kv_block_size},
                           {"drafter", args.spec.drafter},
                           {"draft_model", args.spec.draft_model.value_or("")},
                           {"draft_head", args.spec.draft_head.value_or("")},
                           {"head_min_confidence", args.spec.head_min_confidence},
                           {"tree", args.spec.drafter == "none" ? "none" : options.tree.to_string()},
                           {"accept", options.accept},
                           {"layers", args.spec.layers},
                           {"ngram",
                            {{"n", args.spec.ngram_n},
                             {"min", args.spec.ngram_min},
                             {"max_length", args.spec.ngram_max_length},
                             {"min_confidence", args.spec.ngram_min_confidence},
                             {"history", args.spec.ngram_history}}},
                           {"controller", options.controller.enabled},
                           {"precision", args.precision},
                           {"sparse", options.sparse.to_json()},
                           {"backend", backend},
                           {"draft_backend", args.spec.draft_backend}};
  // Recorded CUDA runs launch without programmatic dependent launch (RunRecording::start).
  if (backend == "cuda") config["programmatic_launch"] = false;
  return config;
}

Expected<RunRecording> RunRecording::start(const GenerateArgs& args, const Model& model, size_t prompt_tokens,
                                           SpeculativeOptions& options, const TransformerBackend& backend) {
  std::error_code ec;
  if (!args.overwrite && std::filesystem::exists(*args.record, ec)) {
    return make_error("--record: " + *args.record + " already exists; choose another name or pass --overwrite");
  }
  auto level = parse_observe_level(args.record_level);
  if (!level) return make_error("--record-level: " + level.error().message);
  profiler::RecorderOptions recorder_options;
  recorder_options.level = *level;
  recorder_options.overwrite = args.overwrite;
  auto recorder = profiler::Recorder::create(*args.record, recorder_options);
  if (!recorder) return make_error("--record: " + recorder.error().message);
  auto sha = model_sha256(model.path);
  if (!sha) return make_error("--record: " + sha.error().message);

  SessionStartEvent& session = options.session;
  session.config_json = generate_config_json(args, options, prompt_tokens, backend.name()).dump();
  session.model_name = model.config.name.empty() ? model.path.filename().string() : model.config.name;
  session.model_sha256 = *sha;
  session.architecture = model.config.architecture;
  session.backend = backend.name();
  session.device = backend.name() == "cpu" ? cpu_model_name() : backend.device();
  session.version = SPECULA_VERSION;
  options.observer = recorder->get();
  RunRecording recording;
  recording.recorder_ = std::move(*recorder);
  auto capture = profiler::CuptiCapture::start(recording.recorder_);
  if (capture) {
    recording.capture_ = std::move(*capture);
    set_cuda_programmatic_launch(false);  // also a CUDA drafter's kernels beside a CPU target
  } else {
    std::fprintf(stderr, "%s\n", capture.error().message.c_str());
  }
  return recording;
}

Expected<std::string> RunRecording::finish() {
  std::string gpu;
  if (capture_) {
    if (Status s = capture_->stop(); !s) return make_error("--record: " + s.error().message);
    const profiler::CuptiStats c = capture_->stats();
    gpu = ", " + std::to_string(c.records) + " CUPTI records";
    if (c.dropped > 0) gpu += " (" + std::to_string(c.dropped) + " dropped by CUPTI)";
    if (c.invalid > 0) gpu += " (" + std::to_string(c.invalid) + " with invalid timestamps skipped)";
  }
  if (Status s = recorder_->finish(); !s) return make_error("--record: " + s.error().message);
  const profiler::RecorderStats stats = recorder_->stats();
  std::string line = "recorded " + std::to_string(stats.rounds_written) + " rounds" + gpu + " to " + recorder_->path();
  if (stats.dropped > 0) line += " (" + std::to_string(stats.dropped) + " events dropped: the writer fell behind)";
  return line;
}

}  // namespace specula::cli
