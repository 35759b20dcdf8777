// Every session view, offscreen (QT_QPA_PLATFORM=offscreen), on the fixture session: each one
// renders a non-blank screenshot and its interactions do what they promise. `specula
// --screenshot` is run as a user would, on the committed fixtures, and on bad input.
#include <gtest/gtest.h>
#include <qcustomplot.h>

#include <QApplication>
#include <QDir>
#include <QEventLoop>
#include <QImage>
#include <QKeyEvent>
#include <QLabel>
#include <QProcess>
#include <QSet>
#include <QTemporaryDir>
#include <QTimer>
#include <filesystem>

#include "../ui_session_fixture.h"
#include "ui/models/range_stats_model.h"
#include "ui/models/session_document.h"
#include "ui/views/draft_tree_view.h"
#include "ui/views/experts_view.h"
#include "ui/views/heatmap_view.h"
#include "ui/views/plot_theme.h"
#include "ui/views/schedule_view.h"
#include "ui/views/session_views.h"
#include "ui/views/teach_view.h"
#include "ui/views/timeline_plottable.h"
#include "ui/views/timeline_view.h"

namespace specula::ui {
namespace {

// Screenshots go to $SPECULA_SCREENSHOT_DIR when set (to look at them), else a temporary folder.
QString shot_dir() {
  static QTemporaryDir temp;
  const QString dir = qEnvironmentVariable("SPECULA_SCREENSHOT_DIR");
  if (!dir.isEmpty()) {
    QDir().mkpath(dir);
    return dir;
  }
  return temp.path();
}

class SessionViews : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.filePath("fixture.sqlite");
    ASSERT_EQ(testing::write_fixture_session(path_.toStdString()), "");
    QString error;
    ASSERT_TRUE(document_.open(path_, &error)) << error.toStdString();
  }
  QTemporaryDir dir_;
  QString path_;
  SessionDocument document_;
};

// Distinct colours in a coarse sample of the image: a blank or single-colour view has 1-2.
int distinct_colours(const QImage& image) {
  QSet<QRgb> colours;
  for (int y = 0; y < image.height(); y += 7) {
    for (int x = 0; x < image.width(); x += 7) colours.insert(image.pixel(x, y));
  }
  return static_cast<int>(colours.size());
}

TEST_F(SessionViews, EveryViewRendersAScreenshot) {
  for (const QString& name : session_view_names()) {
    const auto kind = parse_session_view(name);
    ASSERT_TRUE(kind.has_value()) << name.toStdString();
    std::unique_ptr<QWidget> view(create_session_view(*kind, &document_));
    const QString out = QDir(shot_dir()).filePath("fixture-" + name + ".png");
    ASSERT_EQ(render_widget_png(view.get(), QSize(900, 560), out), QString()) << name.toStdString();
    const QImage image(out);
    ASSERT_FALSE(image.isNull()) << name.toStdString();
    EXPECT_EQ(image.size(), QSize(900, 560));
    EXPECT_GT(distinct_colours(image), 8) << name.toStdString() << " looks blank";
  }
  EXPECT_FALSE(parse_session_view("pie-chart").has_value());
}

TEST_F(SessionViews, TreeShowsTheRoundAndItsAcceptedPath) {
  document_.setRound(3);  // accepts 3: nodes 0 -> 2 -> 4
  DraftTreeView view(&document_);
  const TreeLayout& t = view.layout();
  ASSERT_EQ(t.nodes.size(), testing::fixture_tree().size() + 1);
  for (const auto& n : t.nodes) {
    if (n.node >= 0) {
      EXPECT_EQ(n.on_accepted_path, testing::fixture_on_path(n.node)) << n.node;
    }
  }
  EXPECT_TRUE(view.caption().contains("round 3")) << view.caption().toStdString();
  document_.setRound(0);  // accepts nothing
  int on_path = 0;
  for (const auto& n : view.layout().nodes) on_path += n.node >= 0 && n.on_accepted_path;
  EXPECT_EQ(on_path, 0);
}

TEST_F(SessionViews, TreePlaysThroughTheRounds) {
  document_.setRound(5);
  DraftTreeView view(&document_);
  view.setPlaying(true);
  QEventLoop loop;
  QTimer::singleShot(2000, &loop, &QEventLoop::quit);
  loop.exec();
  EXPECT_EQ(document_.round(), testing::kFixtureRounds - 1);  // reached the end
  EXPECT_FALSE(view.isPlaying());                                // and stopped there
}

// At an anchor layer a node at depth d reads sink + local (3 blocks) and middle blocks
// {c + d, c + d + 1, c + d + 2}: two nodes at distance D share 3 + (3 - D) of 6 blocks.
TEST_F(SessionViews, HeatmapDistanceMatchesTheFixture) {
  HeatmapView view(&document_);
  view.setMode(HeatmapView::Mode::kDistance);
  const Grid& g = view.grid();
  ASSERT_EQ(g.rows, testing::kFixtureLayers);
  ASSERT_EQ(g.cols, 3);
  for (int layer = 0; layer < g.rows; ++layer) {
    EXPECT_DOUBLE_EQ(g.at(layer, 0), 1.0) << layer;
    EXPECT_NEAR(g.at(layer, 1), 5.0 / 6.0, 1e-12) << layer;
    EXPECT_NEAR(g.at(layer, 2), 4.0 / 6.0, 1e-12) << layer;
  }
  EXPECT_TRUE(view.cellText(2, 1).contains("0.833")) << view.cellText(2, 1).toStdString();
  view.setMode(HeatmapView::Mode::kLayers);
  EXPECT_DOUBLE_EQ(view.grid().at(1, 2), 1.0);  // layers 1 and 2 both reuse layer 0
  EXPECT_LT(view.grid().at(0, 3), 1.0);         // different anchors
}

TEST_F(SessionViews, HeatmapClickOpensTheLayersBlocks) {
  HeatmapView view(&document_);
  view.setMode(HeatmapView::Mode::kLayers);
  int focused = -1;
  QObject::connect(&document_, &SessionDocument::layerFocused, [&](int layer) { focused = layer; });
  view.activateCell(4, 1);
  EXPECT_EQ(focused, 4);
  EXPECT_EQ(view.mode(), HeatmapView::Mode::kBlocks);
  const Grid& g = view.grid();
  ASSERT_EQ(g.cols, testing::fixture_blocks(document_.round()));
  // Every one of the 5 queries reads the sink block and the two local blocks.
  EXPECT_DOUBLE_EQ(g.at(4, 0), 5);
  EXPECT_DOUBLE_EQ(g.at(4, g.cols - 1), 5);
  EXPECT_TRUE(view.cellText(4, 0).contains("sink")) << view.cellText(4, 0).toStdString();
  EXPECT_TRUE(view.cellText(4, g.cols - 1).contains("local"));
}

TEST_F(SessionViews, ScheduleMarksTheAnchors) {
  ScheduleView view(&document_);
  const Schedule& s = view.schedule();
  ASSERT_EQ(s.layers, testing::kFixtureLayers);
  for (int l = 0; l < s.layers; ++l) {
    EXPECT_EQ(s.anchor[static_cast<size_t>(l)], l == 0 || l == 3) << l;
    EXPECT_EQ(s.refresh_count(l), l == 0 || l == 3 ? testing::kFixtureRounds : 0) << l;
  }
}

TEST_F(SessionViews, ExpertsPerRoundAndAveraged) {
  ExpertsView view(&document_);
  ASSERT_EQ(view.experts().size(), static_cast<size_t>(testing::kFixtureLayers));
  EXPECT_DOUBLE_EQ(view.experts()[0].routed, 4);
  EXPECT_DOUBLE_EQ(view.experts()[0].skipped, 1);
  EXPECT_DOUBLE_EQ(view.experts()[1].skipped, 0);
  EXPECT_DOUBLE_EQ(view.ffn()[5].skipped, 0.5);  // layer 5 skips its FFN every other round
  view.setAveraged(false);
  document_.setRound(1);
  EXPECT_DOUBLE_EQ(view.ffn()[5].active_ratio, 0.0);
  EXPECT_NEAR(view.ffn()[0].active_ratio, (512.0 - 16) / 2048, 1e-12);
}

TEST_F(SessionViews, TimelineRangeFiltersTheStatistics) {
  TimelineView view(&document_);
  view.resize(1000, 600);
  view.show();
  QCoreApplication::processEvents();
  const auto extent = view.model().extent();
  view.selectRange(extent.t0, extent.t1);
  RangeStatsModel* stats = view.statsModel();
  ASSERT_EQ(stats->rowCount(), 3);
  const int64_t per_name = testing::kFixtureRounds * testing::kFixtureLayers;
  for (const auto& s : stats->stats()) EXPECT_EQ(s.count, per_name) << s.name;
  // Round 0's first layer only: [0, 10 us) after the first kernel's start.
  const auto& first = view.model().tracks()[static_cast<size_t>(view.model().lanes()[1].first_track)].spans[0];
  view.selectRange(static_cast<double>(first.start), static_cast<double>(first.start) + 9'000);
  int64_t kernels = 0;
  for (const auto& s : stats->stats()) kernels += s.count;
  EXPECT_EQ(kernels, testing::kFixtureKernelsPerLayer);
  EXPECT_EQ(stats->data(stats->index(0, RangeStatsModel::kCount), Qt::UserRole).toLongLong(), 1);
  view.clearRange();  // back to the visible range: everything
  EXPECT_EQ(stats->rowCount(), 3);
}

TEST_F(SessionViews, TeachingStepsThroughTheStagesAndRounds) {
  document_.setRound(3);
  TeachView view(&document_);
  view.resize(1000, 650);
  view.show();
  QCoreApplication::processEvents();
  EXPECT_EQ(view.stage(), TeachStage::kDraft);
  EXPECT_EQ(view.highlightedStageTitle(), "Draft");
  EXPECT_TRUE(view.explanation().startsWith("Round 3: the ngram drafter")) << view.explanation().toStdString();
  QStringList seen;
  for (int i = 0; i < kTeachStageCount; ++i) {
    seen << view.highlightedStageTitle();
    EXPECT_FALSE(seen.mid(0, i).contains(view.highlightedStageTitle()));
    const QString before = view.explanation();
    if (i + 1 < kTeachStageCount) {
      QKeyEvent right(QEvent::KeyPress, Qt::Key_Right, Qt::NoModifier);
      QCoreApplication::sendEvent(&view, &right);
      EXPECT_NE(view.explanation(), before) << "stage " << i;
    }
  }
  EXPECT_EQ(seen, QStringList({"Draft", "Select blocks", "Verify", "Accept", "Commit"}));
  EXPECT_TRUE(view.explanation().contains("rolled back")) << view.explanation().toStdString();
  view.next();  // past commit: the next round's draft
  EXPECT_EQ(document_.round(), 4);
  EXPECT_EQ(view.stage(), TeachStage::kDraft);
  EXPECT_TRUE(view.explanation().startsWith("Round 4:"));
  view.previous();  // before draft: the previous round's commit
  EXPECT_EQ(document_.round(), 3);
  EXPECT_EQ(view.stage(), TeachStage::kCommit);

  auto* text = view.findChild<QLabel*>("teachExplanation");
  ASSERT_NE(text, nullptr);
  view.setPresentationScale(1.0);
  const double normal = text->font().pointSizeF();
  view.setPresentationScale(2.0);
  EXPECT_NEAR(text->font().pointSizeF(), 2.0 * normal, 1e-6) << "projector scale";
  QKeyEvent minus(QEvent::KeyPress, Qt::Key_Minus, Qt::NoModifier);
  QCoreApplication::sendEvent(&view, &minus);
  EXPECT_EQ(view.presentationScale(), 1.75);
  view.setPresentationScale(100);
  EXPECT_EQ(view.presentationScale(), 4.0);
}

TEST_F(SessionViews, TeachScreenshotsDifferByStage) {
  QStringList shots;
  for (const char* stage : {"draft", "accept"}) {
    const QString out = QDir(shot_dir()).filePath(QStringLiteral("teach-%1.png").arg(QLatin1String(stage)));
    QProcess p;
    p.start(SPECULA_GUI, {"--session", path_, "--view", "teach", "--round", "3", "--stage", stage, "--screenshot", out});
    ASSERT_TRUE(p.waitForFinished(60000));
    ASSERT_EQ(p.exitCode(), 0) << p.readAllStandardError().toStdString();
    shots << out;
  }
  const QImage draft(shots[0]), accept(shots[1]);
  ASSERT_FALSE(draft.isNull());
  ASSERT_EQ(draft.size(), accept.size());
  EXPECT_GT(distinct_colours(accept), 4);
  EXPECT_NE(draft, accept) << "the accept stage highlights the path";
  QProcess bad;
  bad.start(SPECULA_GUI, {"--session", path_, "--view", "teach", "--stage", "lunch", "--screenshot", shots[0]});
  ASSERT_TRUE(bad.waitForFinished(60000));
  EXPECT_EQ(bad.exitCode(), 2);
  EXPECT_TRUE(bad.readAllStandardError().contains("--stage: unknown stage 'lunch'"));
}

TEST_F(SessionViews, TimelineSaysWhyItHasNoGpuLanes) {
  {
    TimelineView view(&document_);
    EXPECT_TRUE(view.note().isEmpty()) << "the GPU fixture has kernels";
    EXPECT_FALSE(view.findChild<QLabel*>("timelineNote")->isVisibleTo(&view));
  }
  const QString cpu = dir_.filePath("cpu.sqlite");
  ASSERT_EQ(testing::write_fixture_session(cpu.toStdString(), /*with_kernels=*/false), "");
  SessionDocument document;
  QString error;
  ASSERT_TRUE(document.open(cpu, &error)) << error.toStdString();
  TimelineView view(&document);
  EXPECT_TRUE(view.note().startsWith("No GPU records in this session: it was recorded on the CPU (backend cpu"))
      << view.note().toStdString();
  EXPECT_TRUE(view.note().endsWith("Only the engine's phases are drawn.")) << view.note().toStdString();
  auto* label = view.findChild<QLabel*>("timelineNote");
  ASSERT_NE(label, nullptr);
  EXPECT_TRUE(label->isVisibleTo(&view));
  EXPECT_EQ(label->text(), view.note());
  EXPECT_FALSE(view.model().lanes().empty()) << "the phases are still drawn";
}

TEST_F(SessionViews, TimelineClickShowsKernelDetailsAndZoomKeepsTheAnchor) {
  TimelineView view(&document_);
  view.resize(1000, 600);
  view.show();
  QCoreApplication::processEvents();
  const int32_t track = view.model().lanes()[1].first_track;  // stream 7
  const auto& span = view.model().tracks()[static_cast<size_t>(track)].spans[0];
  ASSERT_TRUE(view.selectAt(static_cast<double>(span.start + 10), track));
  EXPECT_TRUE(view.details().contains("grid (132, 1, 1)")) << view.details().toStdString();
  EXPECT_TRUE(view.details().contains("registers")) << view.details().toStdString();
  EXPECT_FALSE(view.selectAt(-1e9, track));
  const TimeRange before = view.visibleRange();
  const double anchor = before.t0 + 0.3 * before.width();
  view.zoomAt(anchor, 4.0);
  const TimeRange after = view.visibleRange();
  EXPECT_NEAR(after.width(), before.width() / 4, 1e-6 * before.width());
  EXPECT_NEAR((anchor - after.t0) / after.width(), 0.3, 1e-9);
  view.plot()->replot(QCustomPlot::rpImmediateRefresh);
  EXPECT_GT(view.plottable()->lastRectCount(), 0);
}

// The gestures themselves, as mouse events on the plot: right drag marks a range, the wheel
// zooms around the cursor, a left drag pans.
TEST_F(SessionViews, TimelineMouseGestures) {
  TimelineView view(&document_);
  view.resize(1000, 600);
  view.show();
  QCoreApplication::processEvents();
  QCustomPlot* plot = view.plot();
  plot->replot(QCustomPlot::rpImmediateRefresh);
  const QRect area = plot->axisRect()->rect();
  const QPointF a(area.left() + 0.25 * area.width(), area.center().y());
  const QPointF b(area.left() + 0.50 * area.width(), area.center().y());
  const auto send = [&](QEvent::Type type, QPointF pos, Qt::MouseButton button, Qt::MouseButtons buttons) {
    QMouseEvent event(type, pos, plot->mapToGlobal(pos), button, buttons, Qt::NoModifier);
    QCoreApplication::sendEvent(plot, &event);
  };
  send(QEvent::MouseButtonPress, a, Qt::RightButton, Qt::RightButton);
  send(QEvent::MouseMove, b, Qt::NoButton, Qt::RightButton);
  send(QEvent::MouseButtonRelease, b, Qt::RightButton, Qt::NoButton);
  const double t0 = plot->xAxis->pixelToCoord(a.x()) * 1000, t1 = plot->xAxis->pixelToCoord(b.x()) * 1000;
  EXPECT_NEAR(view.statsModel()->rangeStart(), t0, 1e-6 * t1);
  EXPECT_NEAR(view.statsModel()->rangeEnd(), t1, 1e-6 * t1);
  int64_t in_range = 0;
  for (const auto& s : view.statsModel()->stats()) in_range += s.count;
  EXPECT_GT(in_range, 0);
  EXPECT_LT(in_range, static_cast<int64_t>(document_.data()->kernels.size()));

  const TimeRange before = view.visibleRange();
  QWheelEvent wheel(a, plot->mapToGlobal(a), QPoint(), QPoint(0, 240), Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase,
                    false);
  QCoreApplication::sendEvent(plot, &wheel);
  const TimeRange zoomed = view.visibleRange();
  EXPECT_LT(zoomed.width(), before.width() * 0.8);
  EXPECT_NEAR((t0 - zoomed.t0) / zoomed.width(), (t0 - before.t0) / before.width(), 1e-6);

  send(QEvent::MouseButtonPress, b, Qt::LeftButton, Qt::LeftButton);
  send(QEvent::MouseMove, a, Qt::NoButton, Qt::LeftButton);
  send(QEvent::MouseButtonRelease, a, Qt::LeftButton, Qt::NoButton);
  const TimeRange panned = view.visibleRange();
  EXPECT_NEAR(panned.width(), zoomed.width(), 1e-6 * zoomed.width());
  EXPECT_GT(panned.t0, zoomed.t0);  // dragged left: later times come into view
}

TEST_F(SessionViews, DarkPaletteDarkensThePlots) {
  ScheduleView view(&document_);
  QPalette dark = view.palette();
  dark.setColor(QPalette::Window, QColor(30, 30, 30));
  dark.setColor(QPalette::Base, QColor(20, 20, 20));
  dark.setColor(QPalette::WindowText, QColor(230, 230, 230));
  view.setPalette(dark);
  QCoreApplication::processEvents();
  EXPECT_TRUE(is_dark(view.plot()->palette()));
  EXPECT_LT(view.plot()->axisRect()->backgroundBrush().color().lightness(), 64);
}

#ifdef SPECULA_GUI
struct GuiRun {
  int exit_code;
  QString err;
};

GuiRun run_gui(const QStringList& args) {
  QProcess p;
  p.start(QStringLiteral(SPECULA_GUI), args);
  if (!p.waitForFinished(60000)) {
    p.kill();
    return {-1, "timed out"};
  }
  return {p.exitCode(), QString::fromLocal8Bit(p.readAllStandardError())};
}

TEST_F(SessionViews, ScreenshotModeRendersTheCommittedSessions) {
  const QDir sessions(QStringLiteral(SPECULA_TEST_DATA_DIR "/sessions"));
  const QStringList files = sessions.entryList({"*.sqlite"}, QDir::Files);
  ASSERT_FALSE(files.isEmpty());
  for (const QString& file : files) {
    for (const QString& view : {QStringLiteral("tree"), QStringLiteral("timeline")}) {
      const QString out = QDir(shot_dir()).filePath(QFileInfo(file).baseName() + "-" + view + ".png");
      const GuiRun run = run_gui({"--session", sessions.filePath(file), "--view", view, "--screenshot", out,
                                  "--size", "800x500"});
      ASSERT_EQ(run.exit_code, 0) << file.toStdString() << " " << run.err.toStdString();
      const QImage image(out);
      EXPECT_EQ(image.size(), QSize(800, 500)) << out.toStdString();
    }
  }
}

TEST_F(SessionViews, ScreenshotModeRefusesBadInput) {
  const QString text = dir_.filePath("notes.sqlite");
  QFile f(text);
  ASSERT_TRUE(f.open(QIODevice::WriteOnly));
  f.write("not a session\n");
  f.close();
  const QString out = dir_.filePath("out.png");
  GuiRun run = run_gui({"--session", text, "--view", "tree", "--screenshot", out});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_TRUE(run.err.contains("notes.sqlite")) << run.err.toStdString();
  EXPECT_EQ(run.err.count('\n'), 1) << run.err.toStdString();
  EXPECT_FALSE(QFileInfo::exists(out));
  run = run_gui({"--session", path_, "--view", "pie", "--screenshot", out});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_TRUE(run.err.contains("unknown view 'pie'")) << run.err.toStdString();
  run = run_gui({"--session", path_, "--view", "tree", "--round", "999", "--screenshot", out});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_TRUE(run.err.contains("no round 999")) << run.err.toStdString();
  run = run_gui({"--session", path_, "--view", "tree", "--size", "10x10", "--screenshot", out});
  EXPECT_EQ(run.exit_code, 2);
  run = run_gui({"--session", path_, "--view", "tree", "--round", "4", "--screenshot", out});
  EXPECT_EQ(run.exit_code, 0) << run.err.toStdString();
  EXPECT_TRUE(QFileInfo::exists(out));
}
#endif

}  // namespace
}  // namespace specula::ui
