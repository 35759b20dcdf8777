#include "ui/models/session_document.h"

#include <algorithm>

namespace specula::ui {

SessionDocument::SessionDocument(QObject* parent) : QObject(parent) {}

bool SessionDocument::open(const QString& path, QString* error) {
  auto data = load_session_data(path.toStdString());
  if (!data) {
    if (error != nullptr) *error = QString::fromStdString(data.error().message);
    return false;
  }
  setData(std::make_shared<const SessionData>(std::move(*data)));
  return true;
}

void SessionDocument::setData(std::shared_ptr<const SessionData> data) {
  data_ = std::move(data);
  tokens_ = data_ ? TokenText::for_session(*data_) : nullptr;
  layer_ = -1;
  round_ = -1;
  // Start on the first round that drafted something (the tree view is the first thing shown).
  if (data_ != nullptr && !data_->rounds.empty()) {
    round_ = data_->rounds.front().round;
    for (const auto& r : data_->rounds) {
      if (data_->draft_nodes.count(r.round) != 0) {
        round_ = r.round;
        break;
      }
    }
  }
  emit sessionChanged();
  emit roundChanged(round_);
}

QString SessionDocument::path() const { return data_ ? QString::fromStdString(data_->path) : QString(); }

QString SessionDocument::tokenText(int32_t id) const {
  return tokens_ ? QString::fromStdString(tokens_->display(id)) : QStringLiteral("#%1").arg(id);
}

int SessionDocument::roundIndex() const {
  if (!data_) return -1;
  const auto& rounds = data_->rounds;
  auto it = std::find_if(rounds.begin(), rounds.end(), [&](const auto& r) { return r.round == round_; });
  return it == rounds.end() ? -1 : static_cast<int>(it - rounds.begin());
}

void SessionDocument::setRound(qint64 round) {
  if (!data_ || data_->round(round) == nullptr || round == round_) return;
  round_ = round;
  emit roundChanged(round_);
}

void SessionDocument::setRoundIndex(int index) {
  if (!data_ || index < 0 || static_cast<size_t>(index) >= data_->rounds.size()) return;
  setRound(data_->rounds[static_cast<size_t>(index)].round);
}

void SessionDocument::focusLayer(int layer) {
  layer_ = layer;
  emit layerFocused(layer);
}

}  // namespace specula::ui
