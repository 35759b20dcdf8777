#include "ui/views/session_views.h"

#include <qcustomplot.h>

#include <QCoreApplication>
#include <QImageWriter>
#include <QPixmap>

#include "ui/views/draft_tree_view.h"
#include "ui/views/experts_view.h"
#include "ui/views/heatmap_view.h"
#include "ui/views/schedule_view.h"
#include "ui/views/teach_view.h"
#include "ui/views/timeline_view.h"

namespace specula::ui {
namespace {

struct Named {
  const char* name;
  SessionViewKind kind;
};
constexpr Named kViews[] = {{"tree", SessionViewKind::kTree},
                            {"heatmap-distance", SessionViewKind::kHeatmapDistance},
                            {"heatmap-layers", SessionViewKind::kHeatmapLayers},
                            {"heatmap-blocks", SessionViewKind::kHeatmapBlocks},
                            {"schedule", SessionViewKind::kSchedule},
                            {"experts", SessionViewKind::kExperts},
                            {"timeline", SessionViewKind::kTimeline},
                            {"teach", SessionViewKind::kTeach}};

}  // namespace

QStringList session_view_names() {
  QStringList names;
  for (const auto& v : kViews) names << QString::fromLatin1(v.name);
  return names;
}

std::optional<SessionViewKind> parse_session_view(const QString& name) {
  for (const auto& v : kViews) {
    if (name == QLatin1String(v.name)) return v.kind;
  }
  return std::nullopt;
}

QWidget* create_session_view(SessionViewKind kind, SessionDocument* document, QWidget* parent) {
  switch (kind) {
    case SessionViewKind::kTree: return new DraftTreeView(document, parent);
    case SessionViewKind::kHeatmapDistance:
    case SessionViewKind::kHeatmapLayers:
    case SessionViewKind::kHeatmapBlocks: {
      auto* view = new HeatmapView(document, parent);
      view->setMode(kind == SessionViewKind::kHeatmapDistance ? HeatmapView::Mode::kDistance
                    : kind == SessionViewKind::kHeatmapLayers ? HeatmapView::Mode::kLayers
                                                              : HeatmapView::Mode::kBlocks);
      return view;
    }
    case SessionViewKind::kSchedule: return new ScheduleView(document, parent);
    case SessionViewKind::kExperts: return new ExpertsView(document, parent);
    case SessionViewKind::kTimeline: return new TimelineView(document, parent);
    case SessionViewKind::kTeach: return new TeachView(document, parent);
  }
  return nullptr;
}

QString render_widget_png(QWidget* widget, QSize size, const QString& out_png) {
  widget->resize(size);
  widget->show();
  for (int i = 0; i < 3; ++i) QCoreApplication::processEvents();
  for (QCustomPlot* plot : widget->findChildren<QCustomPlot*>()) plot->replot(QCustomPlot::rpImmediateRefresh);
  const QPixmap pixmap = widget->grab();
  if (pixmap.isNull()) return QStringLiteral("could not render the view");
  QImageWriter writer(out_png, "png");
  if (!writer.write(pixmap.toImage())) return out_png + QStringLiteral(": ") + writer.errorString();
  return {};
}

}  // namespace specula::ui
