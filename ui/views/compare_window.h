#pragma once
// Two sessions side by side in the same view (tree, a heatmap, schedule, experts, timeline),
// each with its own SessionDocument; "same round" keeps the two on the same round position.
#include <QWidget>

#include "ui/views/session_views.h"

class QCheckBox;
class QComboBox;
class QHBoxLayout;

namespace specula::ui {

class SessionDocument;

class CompareWindow : public QWidget {
  Q_OBJECT
 public:
  CompareWindow(SessionDocument* left, SessionDocument* right, QWidget* parent = nullptr);
  void setView(SessionViewKind kind);
  QWidget* leftView() const { return left_view_; }
  QWidget* rightView() const { return right_view_; }
  void setRoundsLinked(bool linked);

 private:
  SessionDocument* left_;
  SessionDocument* right_;
  QComboBox* kind_;
  QCheckBox* linked_;
  QHBoxLayout* views_;
  QWidget* left_view_ = nullptr;
  QWidget* right_view_ = nullptr;
};

}  // namespace specula::ui
