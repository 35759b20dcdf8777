#pragma once
// The session views by name, for the main window's docks and `specula --view NAME --screenshot`.
#include <QSize>
#include <QString>
#include <QStringList>
#include <optional>

class QWidget;

namespace specula::ui {

class SessionDocument;

enum class SessionViewKind { kTree, kHeatmapDistance, kHeatmapLayers, kHeatmapBlocks, kSchedule, kExperts, kTimeline, kTeach };

QStringList session_view_names();  // tree, heatmap-distance, heatmap-layers, heatmap-blocks, ..., teach
std::optional<SessionViewKind> parse_session_view(const QString& name);
QWidget* create_session_view(SessionViewKind kind, SessionDocument* document, QWidget* parent = nullptr);

// Lays the widget out at size, lets pending replots run, and grabs it into a PNG. Returns an
// error message, or an empty string on success.
QString render_widget_png(QWidget* widget, QSize size, const QString& out_png);

}  // namespace specula::ui
