#pragma once
// Overlap heatmaps over layers (QCPColorMap with a colour scale):
//   distance  layers x tree distance: mean overlap of the blocks two draft nodes' queries read
//   layers    layers x layers: Jaccard similarity of the layers' selections
//   blocks    layers x block index: how many queries read each block in the round (sink and
//             local blocks marked)
// Hovering shows a cell's value; clicking a cell focuses its layer and opens the round's blocks.
#include <QWidget>

#include "ui/models/layer_stats.h"

class QCustomPlot;
class QCPColorMap;
class QCPColorScale;
class QComboBox;
class QCheckBox;
class QLabel;

namespace specula::ui {

class SessionDocument;

class HeatmapView : public QWidget {
  Q_OBJECT
 public:
  enum class Mode { kDistance = 0, kLayers = 1, kBlocks = 2 };
  explicit HeatmapView(SessionDocument* document, QWidget* parent = nullptr);

  void setMode(Mode mode);
  Mode mode() const;
  void setAllRounds(bool all);  // distance and layers modes: every round, or the current one
  const Grid& grid() const { return grid_; }
  QString cellText(int row, int col) const;  // what hovering the cell shows
  void activateCell(int row, int col);       // what clicking the cell does
  QCustomPlot* plot() const { return plot_; }

 protected:
  void changeEvent(QEvent* event) override;

 private:
  void rebuild();
  bool cellAt(const QPoint& pos, int* row, int* col) const;

  SessionDocument* document_;
  QCustomPlot* plot_;
  QCPColorMap* map_;
  QCPColorScale* scale_;
  QComboBox* mode_box_;
  QCheckBox* all_rounds_;
  QLabel* hover_;
  Grid grid_;
  BlockCounts blocks_;
};

}  // namespace specula::ui
