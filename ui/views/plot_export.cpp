#include "ui/views/plot_export.h"

#include <qcustomplot.h>

#include <QCoreApplication>
#include <QFileInfo>
#include <QImage>
#include <QImageWriter>
#include <QPdfWriter>
#include <QSvgGenerator>

namespace specula::ui {
namespace {

// Plots that are on screen inside view, in paint order (parents before children).
QList<QCustomPlot*> visible_plots(QWidget* view) {
  QList<QCustomPlot*> plots;
  if (auto* self = qobject_cast<QCustomPlot*>(view)) plots << self;
  for (QCustomPlot* plot : view->findChildren<QCustomPlot*>()) {
    if (plot->isVisibleTo(view)) plots << plot;
  }
  return plots;
}

// What the image shows, in view coordinates: the plots' bounding box, or the whole view.
QRect image_rect(QWidget* view) {
  QRect rect;
  for (QCustomPlot* plot : visible_plots(view)) rect |= QRect(plot->mapTo(view, QPoint(0, 0)), plot->size());
  return rect.isEmpty() ? QRect(QPoint(0, 0), view->size()) : rect;
}

// Paints image_rect(view) onto painter's device, whose logical size is that rect's size.
void paint_view(QWidget* view, QCPPainter& painter, bool vector) {
  const QList<QCustomPlot*> plots = visible_plots(view);
  if (plots.isEmpty()) {
    view->render(&painter, QPoint(), QRegion(), QWidget::DrawWindowBackground | QWidget::DrawChildren);
    return;
  }
  const QRect rect = image_rect(view);
  painter.fillRect(QRect(QPoint(0, 0), rect.size()), view->palette().window());
  if (vector) painter.setMode(QCPPainter::pmVectorized);
  painter.setMode(QCPPainter::pmNoCaching);
  for (QCustomPlot* plot : plots) {
    painter.save();
    painter.translate(plot->mapTo(view, QPoint(0, 0)) - rect.topLeft());
    plot->toPainter(&painter, plot->width(), plot->height());
    painter.restore();
  }
}

}  // namespace

std::optional<ImageFormat> image_format_for(const QString& path) {
  const QString suffix = QFileInfo(path).suffix().toLower();
  if (suffix == QLatin1String("png")) return ImageFormat::kPng;
  if (suffix == QLatin1String("svg")) return ImageFormat::kSvg;
  if (suffix == QLatin1String("pdf")) return ImageFormat::kPdf;
  return std::nullopt;
}

QString export_view_image(QWidget* view, const QString& path, QSize size) {
  const auto format = image_format_for(path);
  if (!format) return path + QStringLiteral(": the name must end in .png, .svg or .pdf");
  if (size.isValid() && !size.isEmpty()) view->resize(size);
  if (!view->isVisible() && view->parentWidget() == nullptr) view->show();
  for (int i = 0; i < 3; ++i) QCoreApplication::processEvents();
  for (QCustomPlot* plot : visible_plots(view)) plot->replot(QCustomPlot::rpImmediateRefresh);
  const QSize out = image_rect(view).size();
  if (out.isEmpty()) return QStringLiteral("the view has no size to export");

  switch (*format) {
    case ImageFormat::kPng: {
      QImage image(out, QImage::Format_ARGB32_Premultiplied);
      image.fill(Qt::transparent);
      {
        QCPPainter painter(&image);
        painter.setRenderHint(QPainter::Antialiasing);
        paint_view(view, painter, /*vector=*/false);
      }
      QImageWriter writer(path, "png");
      if (!writer.write(image)) return path + QStringLiteral(": ") + writer.errorString();
      return {};
    }
    case ImageFormat::kSvg: {
      QSvgGenerator svg;
      svg.setFileName(path);
      svg.setSize(out);
      svg.setViewBox(QRect(QPoint(0, 0), out));
      svg.setTitle(view->windowTitle());
      svg.setDescription(QStringLiteral("Specula session view"));
      QCPPainter painter;
      if (!painter.begin(&svg)) return path + QStringLiteral(": cannot write the SVG file");
      paint_view(view, painter, /*vector=*/true);
      painter.end();
      return QFileInfo(path).size() > 0 ? QString() : path + QStringLiteral(": the SVG file is empty");
    }
    case ImageFormat::kPdf: {
      QPdfWriter pdf(path);
      pdf.setCreator(QStringLiteral("Specula"));
      // One page the size of the view, one PDF point per pixel (72 dpi).
      pdf.setResolution(72);
      pdf.setPageSize(QPageSize(QSizeF(out), QPageSize::Point));
      pdf.setPageMargins(QMarginsF(0, 0, 0, 0));
      QCPPainter painter;
      if (!painter.begin(&pdf)) return path + QStringLiteral(": cannot write the PDF file");
      paint_view(view, painter, /*vector=*/true);
      painter.end();
      return QFileInfo(path).size() > 0 ? QString() : path + QStringLiteral(": the PDF file is empty");
    }
  }
  return {};
}

}  // namespace specula::ui
