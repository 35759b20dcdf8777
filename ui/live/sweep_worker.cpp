#include "ui/live/sweep_worker.h"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QRegularExpression>
#include <vector>

#include "engine/model/model_identity.h"
#include "engine/sparse/sparse_setup.h"
#include "engine/spec/drafters.h"
#include "engine/spec/speculative.h"
#include "kernels/cpu/cpu_info.h"
#include "profiler/recorder.h"
#include "ui/live/model_load.h"

namespace specula::ui {
namespace {

struct PreparedConfig {
  SweepConfig config;
  TreeShape tree;
  SparseConfig sparse;
};

// "sa-reuse / static:2,2,1,1" -> "sa-reuse_static-2-2-1-1": safe in a file name everywhere.
QString file_part(const SweepConfig& c) {
  QString s = c.sparse + "_" + c.tree;
  s.replace(QRegularExpression(QStringLiteral("[^A-Za-z0-9_-]+")), QStringLiteral("-"));
  return s;
}

// The recorder's SQLite file and the journal files SQLite may leave beside it.
void remove_session(const QString& path) {
  for (const char* suffix : {"", "-journal", "-wal", "-shm"}) QFile::remove(path + QLatin1String(suffix));
}

}  // namespace

SweepWorker::SweepWorker(QObject* parent) : QObject(parent) {}
SweepWorker::~SweepWorker() = default;

void SweepWorker::run(const SweepRequest& request) {
  if (request.configs.isEmpty()) return emit failed(tr("Sweep: tick at least one sparse preset and one tree shape"));
  if (request.prompt.trimmed().isEmpty()) return emit failed(tr("Sweep: type a prompt or take the run panel's"));
  if (request.drafter != "none" && request.drafter != "ngram" && request.drafter != "layerskip") {
    return emit failed(tr("Sweep: unknown drafter '%1' (none, ngram or layerskip)").arg(request.drafter));
  }
  std::vector<PreparedConfig> prepared;
  for (const SweepConfig& c : request.configs) {
    auto tree = parse_tree_shape(c.tree.toStdString());
    if (!tree) {
      return emit failed(
          tr("Sweep configuration %1: tree: %2").arg(c.label(), QString::fromStdString(tree.error().message)));
    }
    prepared.push_back({c, *tree, {}});
  }
  if (!QDir().mkpath(request.session_dir)) {
    return emit failed(tr("Sweep: cannot create the sessions folder %1").arg(request.session_dir));
  }

  if (!model_ || loaded_spec_ != request.model_spec) {
    emit stage(tr("Loading %1 ...").arg(request.model_spec));
    engine_.reset();
    model_.reset();
    loaded_spec_.clear();
    WorkerLoad load =
        load_model_for_worker(request.model_spec, cancel_, [this](int permille) { emit loadProgress(permille); });
    if (load.cancelled) return emit cancelled(0, false);
    if (!load.model) return emit failed(load.error);
    emit stage(tr("Hashing the model file ..."));
    auto sha = model_sha256(load.model->path);
    if (!sha) return emit failed(QString::fromStdString(sha.error().message));
    model_ = std::move(load.model);
    engine_ = std::make_unique<SpeculativeEngine>(*model_, 0);
    model_sha256_ = *sha;
    loaded_spec_ = request.model_spec;
  }
  if (cancel_) return emit cancelled(0, false);

  // Every configuration is checked against the model before the first run, so a refused one
  // (e.g. a calibration-less preset the engine cannot set up) costs no runs.
  for (PreparedConfig& p : prepared) {
    auto sparse = sparse_preset(p.config.sparse.toStdString());
    if (sparse) sparse = prepare_sparse_config(std::move(*sparse), *model_);
    if (!sparse) {
      return emit failed(tr("Sweep configuration %1: sparse settings: %2")
                             .arg(p.config.label(), QString::fromStdString(sparse.error().message)));
    }
    p.sparse = std::move(*sparse);
  }

  const std::vector<int32_t> prompt = model_->tokenizer.encode_prompt(request.prompt.toStdString(), request.chat);

  const int total = static_cast<int>(prepared.size());
  const QString stamp = QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss-zzz"));
  emit progress(0, total);
  for (int i = 0; i < total; ++i) {
    if (cancel_) return emit cancelled(i, false);
    const PreparedConfig& p = prepared[static_cast<size_t>(i)];
    emit stage(tr("Run %1 of %2: %3 ...").arg(i + 1).arg(total).arg(p.config.label()));
    // A fresh drafter per run: the n-gram drafter learns from what it has seen.
    std::unique_ptr<Drafter> drafter;
    if (request.drafter == "ngram") {
      drafter = make_ngram_drafter();
    } else if (request.drafter == "layerskip") {
      auto made = make_layerskip_drafter(*model_, "every-other", {0, GenerateOptions{}.kv_block_size});
      if (!made) return emit failed(tr("Layerskip drafter: %1").arg(QString::fromStdString(made.error().message)));
      drafter = std::move(*made);
    }
    SpeculativeOptions options;
    options.max_tokens = request.max_tokens;
    options.tree = p.tree;
    options.accept = request.accept.toStdString();
    options.sparse = p.sparse;

    const QString path =
        QDir(request.session_dir)
            .filePath(QStringLiteral("sweep-%1-%2-%3.sqlite").arg(stamp).arg(i + 1).arg(file_part(p.config)));
    profiler::RecorderOptions recorder_options;
    recorder_options.level = ObserveLevel::kSummary;
    auto created = profiler::Recorder::create(path.toStdString(), recorder_options);
    if (!created) return emit failed(tr("Recording: %1").arg(QString::fromStdString(created.error().message)));
    std::shared_ptr<profiler::Recorder> recorder = *created;
    const nlohmann::json config = {{"command", "gui-sweep"},
                                   {"sweep_config", p.config.label().toStdString()},
                                   {"model", request.model_spec.toStdString()},
                                   {"chat", request.chat},
                                   {"max_tokens", options.max_tokens},
                                   {"temperature", options.sampling.temperature},
                                   {"drafter", request.drafter.toStdString()},
                                   {"tree", request.drafter == "none" ? "none" : options.tree.to_string()},
                                   {"accept", options.accept},
                                   {"prompt_tokens", prompt.size()},
                                   {"backend", "cpu"},
                                   {"sparse", options.sparse.to_json()}};
    options.session.config_json = config.dump();
    options.session.model_sha256 = model_sha256_;
    options.session.device = cpu_model_name();
    options.session.version = SPECULA_UI_VERSION;
    options.observer = recorder.get();

    auto result = engine_->generate(prompt, drafter.get(), options,
                                    [this](int32_t, std::string_view) { return !cancel_.load(); });
    const Status recorded = recorder->finish();
    recorder.reset();  // closes the database before it may be deleted
    if (cancel_) {
      remove_session(path);
      return emit cancelled(i, true);
    }
    if (!result) {
      remove_session(path);
      return emit failed(
          tr("Sweep configuration %1: %2").arg(p.config.label(), QString::fromStdString(result.error().message)));
    }
    if (!recorded) return emit failed(tr("Recording: %1").arg(QString::fromStdString(recorded.error().message)));
    SweepRow row;
    row.config = p.config.label();
    row.tokens_per_s = result->metrics.tokens_per_s;
    row.mean_accepted_length = result->metrics.mean_accepted_length;
    row.kv_bytes_read = result->metrics.kv_bytes_read;
    row.kv_bytes_dense = result->metrics.kv_bytes_dense;
    row.tokens = static_cast<int>(result->tokens.size());
    row.session_path = path;
    emit rowReady(row);
    emit progress(i + 1, total);
  }
  emit finished(total);
}

}  // namespace specula::ui
