#pragma once
// Colours for the session views, taken from the widget's palette so light and dark themes (the
// system's, or the View menu's) both read well; re-applied on QEvent::PaletteChange.
#include <QColor>
#include <QPalette>

class QCustomPlot;

namespace specula::ui {

bool is_dark(const QPalette& palette);
void apply_plot_theme(QCustomPlot* plot, const QPalette& palette);  // background, axes, grid, text

// Fixed meanings across views, tuned per theme.
QColor accepted_colour(const QPalette& palette);  // accepted path / refresh
QColor rejected_colour(const QPalette& palette);  // rejected draft node
QColor reuse_colour(const QPalette& palette);
QColor dim_colour(const QPalette& palette);       // not visited / no data
// A stable colour per name (kernels, phases): the same name gets the same hue in every run.
QColor name_colour(size_t name_hash, const QPalette& palette);

}  // namespace specula::ui
