#include "ui/live/generation_worker.h"

#include "engine/text/utf8_stream.h"

namespace specula::ui {

GenerationWorker::GenerationWorker(QObject* parent) : QObject(parent) {}

void GenerationWorker::run(const RunRequest& request) {
  stop_requested_ = false;
  if (!model_ || loaded_spec_ != request.model_spec) {
    emit status(tr("Loading %1 ...").arg(request.model_spec));
    model_.reset();
    auto loaded = load_model(resolve_model_path(request.model_spec.toStdString()));
    if (!loaded) {
      emit failed(QString::fromStdString(loaded.error().message));
      return;
    }
    model_ = std::make_unique<Model>(std::move(loaded).value());
    loaded_spec_ = request.model_spec;
  }
  const Tokenizer& tok = model_->tokenizer;
  std::string text = request.prompt.toStdString();
  if (request.chat) {
    const ChatMessage user{"user", text};
    text = tok.apply_chat_template(std::span(&user, 1), true);
  }
  std::vector<int32_t> prompt;
  if (tok.add_bos() && tok.bos_id() >= 0) prompt.push_back(tok.bos_id());
  const auto ids = tok.encode(text, request.chat);
  prompt.insert(prompt.end(), ids.begin(), ids.end());
  if (prompt.empty()) {
    emit failed(tr("The prompt is empty."));
    return;
  }
  emit status(tr("Generating (%1 prompt tokens) ...").arg(prompt.size()));

  Utf8Stream stream;
  auto result = generate(*model_, prompt, request.options, [&](int32_t, std::string_view bytes) {
    const std::string ready = stream.push(bytes);
    if (!ready.empty()) emit textReady(QString::fromUtf8(ready.data(), static_cast<qsizetype>(ready.size())));
    return !stop_requested_.load();
  });
  if (!result) {
    emit failed(QString::fromStdString(result.error().message));
    return;
  }
  const std::string rest = stream.flush();
  if (!rest.empty()) emit textReady(QString::fromUtf8(rest.data(), static_cast<qsizetype>(rest.size())));
  emit finished(result->timings.prefill_tokens_per_s(), result->timings.decode_tokens_per_s(),
                static_cast<int>(result->tokens.size()));
}

}  // namespace specula::ui
