#include "ui/live/eval_worker.h"

#include "engine/eval/runner.h"
#include "engine/eval/tasks.h"
#include "engine/model/loader.h"
#include "engine/sparse/sparse_setup.h"
#include "engine/spec/drafters.h"
#include "engine/spec/speculative.h"
#include "ui/live/model_load.h"

namespace specula::ui {

EvalWorker::EvalWorker(QObject* parent) : QObject(parent) {}
EvalWorker::~EvalWorker() = default;

void EvalWorker::run(const EvalRequest& request) {
  const auto fail = [this](const QString& message) { emit failed(message); };
  auto task = eval::parse_task(request.task.toStdString());
  if (!task || (*task != eval::TaskKind::kGsm8k && *task != eval::TaskKind::kSpecbench && *task != eval::TaskKind::kPasskey)) {
    return fail(tr("Task '%1': the app runs gsm8k, specbench or passkey").arg(request.task));
  }
  auto tree = parse_tree_shape(request.tree.toStdString());
  if (!tree) return fail(tr("Tree: %1").arg(QString::fromStdString(tree.error().message)));
  if (request.drafter != "none" && request.drafter != "ngram") {
    return fail(tr("Drafter '%1': evaluation here runs none or ngram").arg(request.drafter));
  }
  if (!model_ || loaded_spec_ != request.model_spec) {
    emit stage(tr("Loading %1 ...").arg(request.model_spec));
    model_.reset();
    loaded_spec_.clear();
    WorkerLoad load = load_model_for_worker(request.model_spec, cancel_, [this](int permille) { emit loadProgress(permille); });
    if (load.cancelled) return emit cancelled();
    if (!load.model) return fail(load.error);
    model_ = std::move(load.model);
    loaded_spec_ = request.model_spec;
  }
  if (cancel_) return emit cancelled();

  emit stage(tr("Preparing the items ..."));
  Expected<std::vector<eval::EvalItem>> items = std::vector<eval::EvalItem>{};
  if (*task == eval::TaskKind::kPasskey) {
    eval::PasskeyOptions o;
    o.items = request.limit;
    o.context_tokens = request.context_tokens;
    const Model& model = *model_;
    items = eval::make_passkey_items(o, [&model](std::string_view text) {
      return static_cast<int64_t>(model.tokenizer.encode(text, /*parse_special=*/false).size());
    });
  } else if (request.data.isEmpty()) {
    return fail(tr("%1 needs its JSONL data file").arg(request.task));
  } else if (*task == eval::TaskKind::kGsm8k) {
    items = eval::load_gsm8k(request.data.toStdString(), request.limit);
  } else {
    items = eval::load_specbench(request.data.toStdString(), request.limit);
  }
  if (!items) return fail(QString::fromStdString(items.error().message));
  if (items->empty()) return fail(tr("No items to run"));
  if (request.max_tokens > 0) {
    for (auto& item : *items) item.max_tokens = request.max_tokens;
  }

  auto sparse = request.sparse_config.isEmpty() ? sparse_preset(request.sparse.toStdString())
                                                : load_sparse_config(request.sparse_config.toStdString());
  if (sparse) sparse = prepare_sparse_config(std::move(*sparse), *model_);
  if (!sparse) return fail(tr("Sparse settings: %1").arg(QString::fromStdString(sparse.error().message)));

  std::unique_ptr<Drafter> drafter = request.drafter == "ngram" ? make_ngram_drafter() : nullptr;
  SpeculativeEngine engine(*model_, 0);
  eval::EngineRunnerOptions options;
  options.strict.tree = *tree;
  options.configured = options.strict;
  options.configured.sparse = std::move(*sparse);  // the strict run keeps the strict default
  options.keep_going = [this] { return !cancel_.load(); };
  const auto inner = eval::make_engine_runner(engine, drafter.get(), options);
  const int total = static_cast<int>(items->size()) * 2;
  int done = 0;
  const eval::ItemRunner runner = [&](const eval::EvalItem& item, eval::Verification which) {
    auto out = inner(item, which);
    if (out) emit progress(++done, total);
    return out;
  };
  emit stage(tr("Running %1 items, strict and configured ...").arg(items->size()));
  emit progress(0, total);
  auto report = eval::run_eval(*task, *items, runner);
  if (cancel_) return emit cancelled();
  if (!report) return fail(QString::fromStdString(report.error().message));

  const eval::EvalSummary& s = report->summary;
  EvalOutcome outcome;
  outcome.items = s.items;
  outcome.token_agreement = s.token_agreement;
  outcome.rouge_l = s.rouge_l;
  outcome.identical_outputs = s.identical_outputs;
  outcome.strict_accepted_length = s.strict_accepted_length;
  outcome.configured_accepted_length = s.configured_accepted_length;
  outcome.strict_kv_bytes = s.strict_kv_bytes_read;
  outcome.configured_kv_bytes = s.configured_kv_bytes_read;
  outcome.strict_score = s.strict_score.value_or(-1);
  outcome.configured_score = s.configured_score.value_or(-1);
  emit finished(outcome);
}

}  // namespace specula::ui
