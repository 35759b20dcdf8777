#pragma once
// One round's draft tree as a graph: tokens as nodes, depth left to right, the accepted path
// highlighted, rejected and unvisited nodes dimmed; tooltips give draft and target probability.
// A round slider and a play button step through the session.
#include <QWidget>

#include "ui/models/tree_layout.h"

class QGraphicsScene;
class QGraphicsView;
class QLabel;
class QSlider;
class QTimer;
class QToolButton;

namespace specula::ui {

class SessionDocument;

class DraftTreeView : public QWidget {
  Q_OBJECT
 public:
  explicit DraftTreeView(SessionDocument* document, QWidget* parent = nullptr);

  const TreeLayout& layout() const { return layout_; }
  bool isPlaying() const;
  QString caption() const;

 public slots:
  void setPlaying(bool playing);

 protected:
  void changeEvent(QEvent* event) override;

 private:
  void rebuild();
  void fit();
  void stepPlayback();

  SessionDocument* document_;
  TreeLayout layout_;
  QGraphicsScene* scene_;
  QGraphicsView* view_;
  QSlider* slider_;
  QToolButton* play_;
  QLabel* caption_;
  QTimer* timer_;
};

}  // namespace specula::ui
