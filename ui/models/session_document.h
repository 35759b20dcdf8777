#pragma once
// The open session and the round and layer the views look at, shared by every view: views
// read the data and follow roundChanged/layerFocused, so a click in one view moves the others.
#include <QObject>
#include <QString>
#include <memory>

#include "ui/models/session_data.h"
#include "ui/models/token_text.h"

namespace specula::ui {

class SessionDocument : public QObject {
  Q_OBJECT
 public:
  explicit SessionDocument(QObject* parent = nullptr);

  // Loads the session; on failure keeps the previous one and returns the reason.
  bool open(const QString& path, QString* error);
  void setData(std::shared_ptr<const SessionData> data);  // tests and the comparison view
  bool isOpen() const { return data_ != nullptr; }
  const SessionData* data() const { return data_.get(); }
  std::shared_ptr<const SessionData> sharedData() const { return data_; }
  QString path() const;
  // Token text from the session's model when it is on this machine, else "#id".
  QString tokenText(int32_t id) const;

  qint64 round() const { return round_; }
  int roundIndex() const;  // position of round() in data()->rounds, or -1
  int layer() const { return layer_; }

 public slots:
  void setRound(qint64 round);
  void setRoundIndex(int index);
  void focusLayer(int layer);

 signals:
  void sessionChanged();
  void roundChanged(qint64 round);
  void layerFocused(int layer);

 private:
  std::shared_ptr<const SessionData> data_;
  std::shared_ptr<const TokenText> tokens_;
  qint64 round_ = -1;
  int layer_ = -1;
};

}  // namespace specula::ui
