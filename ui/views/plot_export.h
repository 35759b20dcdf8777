#pragma once
// A session view as an image file: PNG, SVG or PDF, chosen by the file's suffix. QCustomPlot
// plots go through QCustomPlot::toPainter in vectorized mode, so SVG and PDF keep lines and text
// as vectors; a view without plots (the draft tree's QGraphicsView) is rendered by
// QWidget::render, which is vector for graphics items too. Other widgets around the plots
// (combo boxes, check boxes) are left out of the image.
#include <QSize>
#include <QString>
#include <optional>

class QWidget;

namespace specula::ui {

enum class ImageFormat { kPng, kSvg, kPdf };
std::optional<ImageFormat> image_format_for(const QString& path);  // by suffix, case-insensitive

// Lays the view out at `size` (an empty size keeps its current size) and writes it to path.
// Returns an error message, or an empty string on success.
QString export_view_image(QWidget* view, const QString& path, QSize size = {});

}  // namespace specula::ui
