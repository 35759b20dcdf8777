#pragma once
// Expert skipping and sparse FFN per layer: stacked bars of routed and skipped experts (MoE
// models), and bars of the active FFN channel ratio, for the current round or averaged over
// every round. Says so when the session recorded neither.
#include <QWidget>

#include "ui/models/layer_stats.h"

class QCustomPlot;
class QCheckBox;

namespace specula::ui {

class SessionDocument;

class ExpertsView : public QWidget {
  Q_OBJECT
 public:
  explicit ExpertsView(SessionDocument* document, QWidget* parent = nullptr);
  void setAveraged(bool averaged);
  const std::vector<LayerExperts>& experts() const { return experts_; }
  const std::vector<LayerFfn>& ffn() const { return ffn_; }

 protected:
  void changeEvent(QEvent* event) override;

 private:
  void rebuild();

  SessionDocument* document_;
  QCustomPlot* moe_plot_;
  QCustomPlot* ffn_plot_;
  QCheckBox* averaged_;
  std::vector<LayerExperts> experts_;
  std::vector<LayerFfn> ffn_;
};

}  // namespace specula::ui
