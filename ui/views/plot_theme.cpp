#include "ui/views/plot_theme.h"

#include <qcustomplot.h>

namespace specula::ui {

bool is_dark(const QPalette& palette) { return palette.color(QPalette::Window).lightness() < 128; }

void apply_plot_theme(QCustomPlot* plot, const QPalette& p) {
  const QColor fg = p.color(QPalette::WindowText);
  QColor grid = fg;
  grid.setAlpha(40);
  plot->setBackground(p.color(QPalette::Base));
  for (QCPAxisRect* rect : plot->axisRects()) {
    rect->setBackground(p.color(QPalette::Base));
    for (QCPAxis* axis : rect->axes()) {
      axis->setBasePen(QPen(fg));
      axis->setTickPen(QPen(fg));
      axis->setSubTickPen(QPen(fg));
      axis->setTickLabelColor(fg);
      axis->setLabelColor(fg);
      axis->grid()->setPen(QPen(grid, 0, Qt::DotLine));
    }
  }
  if (plot->legend != nullptr) {
    plot->legend->setBrush(p.color(QPalette::Base));
    plot->legend->setTextColor(fg);
    plot->legend->setBorderPen(QPen(grid));
  }
}

QColor accepted_colour(const QPalette& palette) { return is_dark(palette) ? QColor(76, 175, 80) : QColor(46, 125, 50); }
QColor rejected_colour(const QPalette& palette) { return is_dark(palette) ? QColor(229, 115, 115) : QColor(198, 40, 40); }
QColor reuse_colour(const QPalette& palette) { return is_dark(palette) ? QColor(100, 181, 246) : QColor(30, 136, 229); }
QColor dim_colour(const QPalette& palette) {
  QColor c = palette.color(QPalette::WindowText);
  c.setAlpha(70);
  return c;
}

QColor name_colour(size_t name_hash, const QPalette& palette) {
  const int hue = static_cast<int>(name_hash % 360);
  return is_dark(palette) ? QColor::fromHsv(hue, 140, 200) : QColor::fromHsv(hue, 120, 230);
}

}  // namespace specula::ui
