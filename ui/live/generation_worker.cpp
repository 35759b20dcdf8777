#include "ui/live/generation_worker.h"

#include <QFileInfo>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/cuda_backend.h"
#include "engine/model/model_identity.h"
#include "engine/sparse/sparse_setup.h"
#include "engine/spec/drafters.h"
#include "engine/spec/head_drafter.h"
#include "engine/text/utf8_stream.h"
#include "kernels/cpu/cpu_info.h"
#include "profiler/cupti_capture.h"
#include "profiler/recorder.h"
#include "ui/live/model_load.h"

namespace specula::ui {
namespace {

// Follows the observer stream on the worker thread to label each emitted token: after an
// AcceptanceEvent the round's first accepted_length - 1 tokens are accepted drafts, the next is
// the correction or bonus; without one the round was a plain step.
class TokenLabeler final : public Observer {
 public:
  explicit TokenLabeler(GenerationWorker* worker) : worker_(worker) {}
  ObserveLevel level() const override { return ObserveLevel::kSummary; }
  void on_event(const Event& event) override {
    if (const auto* begin = std::get_if<RoundBeginEvent>(&event)) {
      round_ = static_cast<int>(begin->round);
      speculative_ = false;
      drafts_left_ = 0;
    } else if (const auto* acc = std::get_if<AcceptanceEvent>(&event)) {
      speculative_ = true;
      drafts_left_ = acc->accepted_length - 1;
      bonus_ = acc->bonus;
    } else if (const auto* end = std::get_if<RoundEndEvent>(&event)) {
      emit worker_->roundFinished(static_cast<int>(end->round), end->accepted_length, end->speculative, end->emitted);
      kv_read_ += end->kv_bytes_read;
      kv_dense_ += end->kv_bytes_dense;
      emit worker_->kvTraffic(kv_read_, kv_dense_);
    }
  }
  // The kind of the next token of the current round.
  TokenKind next_kind() {
    if (!speculative_) return TokenKind::kPlain;
    if (drafts_left_ > 0) {
      --drafts_left_;
      return TokenKind::kAcceptedDraft;
    }
    return bonus_ ? TokenKind::kBonus : TokenKind::kCorrection;
  }
  int round() const { return round_; }

 private:
  GenerationWorker* worker_;
  int round_ = -1;
  bool speculative_ = false;
  bool bonus_ = false;
  int drafts_left_ = 0;
  qint64 kv_read_ = 0;  // running totals over the rounds so far (bytes)
  qint64 kv_dense_ = 0;
};

}  // namespace

GenerationWorker::GenerationWorker(QObject* parent) : QObject(parent) {}
GenerationWorker::~GenerationWorker() = default;

bool GenerationWorker::ensure_model(const QString& spec) {
  if (model_ && loaded_spec_ == spec) return true;
  emit status(tr("Loading %1 ...").arg(spec));
  engine_.reset();
  engine_backend_.clear();
  model_.reset();
  if (!loaded_spec_.isEmpty()) {
    loaded_spec_.clear();
    emit modelChanged(QString());
  }
  WorkerLoad load = load_model_for_worker(spec, stop_requested_, [this](int permille) { emit loadProgress(permille); });
  if (load.cancelled) {
    emit loadCancelled();
    return false;
  }
  if (!load.model) {
    emit failed(load.error);
    return false;
  }
  model_ = std::move(load.model);
  loaded_spec_ = spec;
  emit modelChanged(spec);
  return true;
}

bool GenerationWorker::ensure_engine(const QString& backend, const SparseConfig& sparse) {
  // auto: the GPU when one is present and the run needs nothing only the CPU has (the CLI's rule,
  // app/cli/commands.cpp engine_backend).
  QString kind = backend;
  if (kind == "auto") {
    kind =
        cuda_gpu_available() && cuda_backend_supports(model_->config) && cuda_sparse_supported(sparse) ? "cuda" : "cpu";
  }
  if (kind == "cuda") {
    if (auto ok = cuda_sparse_supported(sparse); !ok) {
      emit failed(tr("Backend: %1").arg(QString::fromStdString(ok.error().message)));
      return false;
    }
  }
  if (engine_ && engine_backend_ == kind) return true;
  engine_.reset();
  engine_backend_.clear();
  BackendOptions options;
  options.kind = kind.toStdString();
  auto made = make_backend(*model_, options);
  if (!made) {
    emit failed(tr("Backend %1: %2").arg(kind, QString::fromStdString(made.error().message)));
    return false;
  }
  engine_ = std::make_unique<SpeculativeEngine>(*model_, std::move(*made));
  engine_backend_ = kind;
  return true;
}

void GenerationWorker::run(const RunRequest& request) {
  auto tree = parse_tree_shape(request.tree.toStdString());
  if (!tree) {
    emit failed(tr("Tree: %1").arg(QString::fromStdString(tree.error().message)));
    return;
  }
  if (!ensure_model(request.model_spec)) return;
  const std::vector<int32_t> prompt = model_->tokenizer.encode_prompt(request.prompt.toStdString(), request.chat);
  if (prompt.empty()) {
    emit failed(tr("The prompt is empty."));
    return;
  }

  SpeculativeOptions options;
  options.max_tokens = request.options.max_tokens;
  options.sampling = request.options.sampling;
  options.kv_block_size = request.options.kv_block_size;
  options.stop_at_eos = request.options.stop_at_eos;
  options.tree = *tree;
  options.accept = request.accept.toStdString();
  // The engine's own checks decide what is allowed (e.g. SMoE on a dense model is refused).
  auto sparse = request.sparse_config.isEmpty() ? sparse_preset(request.sparse.toStdString())
                                                : load_sparse_config(request.sparse_config.toStdString());
  if (sparse) sparse = prepare_sparse_config(std::move(*sparse), *model_);
  if (!sparse) {
    emit failed(tr("Sparse settings: %1").arg(QString::fromStdString(sparse.error().message)));
    return;
  }
  options.sparse = std::move(*sparse);
  // A head drafter reads the target's final hidden rows, which only the CPU backend keeps.
  const bool head_drafter = drafter_uses_head(request.drafter.toStdString());
  QString backend = request.backend;
  if (head_drafter) {
    auto kind = head_drafter_target_backend(request.backend.toStdString());
    if (!kind) {
      emit failed(tr("Backend: %1").arg(QString::fromStdString(kind.error().message)));
      return;
    }
    backend = QString::fromStdString(*kind);
  }
  if (!ensure_engine(backend, options.sparse)) return;

  std::unique_ptr<Drafter> drafter;
  if (request.drafter == "ngram") {
    drafter = make_ngram_drafter();
  } else if (request.drafter == "layerskip") {
    auto made = make_layerskip_drafter(*model_, request.layers.toStdString(),
                                       {0, request.options.kv_block_size, engine_backend_.toStdString()});
    if (!made) {
      emit failed(tr("Layerskip drafter: %1").arg(QString::fromStdString(made.error().message)));
      return;
    }
    drafter = std::move(*made);
  } else if (head_drafter) {
    DraftHeadOptions head_options;
    head_options.pool = &engine_->cpu_transformer()->thread_pool();
    head_options.min_confidence = request.head_min_confidence;
    auto made = make_head_drafter(*model_, request.draft_head.toStdString(), head_options);
    if (!made) {
      emit failed(tr("Draft head: %1").arg(QString::fromStdString(made.error().message)));
      return;
    }
    drafter =
        request.drafter == "head" ? std::move(*made) : make_fallback_drafter(make_ngram_drafter(), std::move(*made));
  } else if (request.drafter != "none") {
    emit failed(tr("Unknown drafter '%1' (none, ngram, layerskip, head or ngram+head)").arg(request.drafter));
    return;
  }

  auto labeler = std::make_shared<TokenLabeler>(this);
  FanOut fan_out;
  fan_out.attach(labeler);
  std::shared_ptr<profiler::Recorder> recorder;
  std::unique_ptr<profiler::CuptiCapture> capture;  // GPU kernels, for a recorded CUDA run
  if (!request.session_path.isEmpty()) {
    profiler::RecorderOptions recorder_options;
    recorder_options.level = ObserveLevel::kSummary;
    auto created = profiler::Recorder::create(request.session_path.toStdString(), recorder_options);
    if (!created) {
      emit failed(tr("Recording: %1").arg(QString::fromStdString(created.error().message)));
      return;
    }
    recorder = *created;
    fan_out.attach(recorder);
    const nlohmann::json config = {{"command", "gui"},
                                   {"model", request.model_spec.toStdString()},
                                   {"chat", request.chat},
                                   {"max_tokens", options.max_tokens},
                                   {"temperature", options.sampling.temperature},
                                   {"drafter", request.drafter.toStdString()},
                                   {"draft_head", request.draft_head.toStdString()},
                                   {"head_min_confidence", request.head_min_confidence},
                                   {"tree", request.drafter == "none" ? "none" : options.tree.to_string()},
                                   {"accept", options.accept},
                                   {"prompt_tokens", prompt.size()},
                                   {"backend", engine_backend_.toStdString()},
                                   {"sparse", options.sparse.to_json()}};
    options.session.config_json = config.dump();
    if (auto sha = model_sha256(model_->path)) options.session.model_sha256 = *sha;
    options.session.backend = engine_->backend().name();
    options.session.device = engine_backend_ == "cpu" ? cpu_model_name() : engine_->backend().device();
    options.session.version = SPECULA_UI_VERSION;
    if (engine_backend_ == "cuda") {
      // As the CLI's --record: kernel rows from CUPTI, launched without programmatic dependent
      // launch so that each kernel's duration is its own (engine/backend/cuda_backend.h).
      auto started = profiler::CuptiCapture::start(recorder);
      if (started) {
        capture = std::move(*started);
        set_cuda_programmatic_launch(false);
      } else {
        emit status(tr("Recording without GPU kernels: %1").arg(QString::fromStdString(started.error().message)));
      }
    }
  }
  options.observer = &fan_out;
  emit status(tr("Generating (%1 prompt tokens) ...").arg(prompt.size()));

  Utf8Stream stream;
  auto result = engine_->generate(prompt, drafter.get(), options, [&](int32_t, std::string_view bytes) {
    const TokenKind kind = labeler->next_kind();
    const std::string ready = stream.push(bytes);
    if (!ready.empty()) {
      const QString piece = QString::fromUtf8(ready.data(), static_cast<qsizetype>(ready.size()));
      emit textReady(piece);
      emit segmentReady(piece, labeler->round(), static_cast<int>(kind));
    }
    return !stop_requested_.load();
  });
  if (capture) {
    const Status stopped = capture->stop();
    set_cuda_programmatic_launch(true);
    // The run and its rounds stay recorded; only the kernel rows may be incomplete.
    if (!stopped) emit status(tr("GPU kernel capture: %1").arg(QString::fromStdString(stopped.error().message)));
  }
  if (recorder) {
    if (Status s = recorder->finish(); !s) {
      emit failed(tr("Recording: %1").arg(QString::fromStdString(s.error().message)));
      return;
    }
    emit sessionRecorded(request.session_path, recorder->stats().rounds_written);
  }
  if (!result) {
    emit failed(QString::fromStdString(result.error().message));
    return;
  }
  const std::string rest = stream.flush();
  if (!rest.empty()) {
    const QString piece = QString::fromUtf8(rest.data(), static_cast<qsizetype>(rest.size()));
    emit textReady(piece);
    emit segmentReady(piece, labeler->round(), static_cast<int>(TokenKind::kPlain));
  }
  emit kvTraffic(result->metrics.kv_bytes_read, result->metrics.kv_bytes_dense);
  emit finished(result->timings.prefill_tokens_per_s(), result->timings.decode_tokens_per_s(),
                static_cast<int>(result->tokens.size()));
}

}  // namespace specula::ui
