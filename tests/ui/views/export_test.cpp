// Exports from the main window, headless, on the fixture session: Perfetto JSON (parses, has
// the fixture's kernels and phases in traceEvents), CSV (headers, one row per kernel and round),
// and every view as PNG, SVG and PDF (magic bytes; SVG keeps text as vector <text>; PNG has the
// plots' size). The same formats through `specula --screenshot OUT.svg|OUT.pdf`.
#include <gtest/gtest.h>

#include <QApplication>
#include <QDockWidget>
#include <QFile>
#include <QImage>
#include <QProcess>
#include <QSettings>
#include <QTemporaryDir>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "../ui_session_fixture.h"
#include "ui/views/main_window.h"
#include "ui/views/plot_export.h"

namespace specula::ui {
namespace {

QByteArray head(const QString& path, int n) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  return f.read(n);
}

std::vector<std::string> lines_of(const QString& path) {
  std::ifstream in(path.toStdString());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

const QByteArray kPngMagic("\x89PNG\r\n\x1a\n", 8);

class Export : public ::testing::Test {
 protected:
  void SetUp() override {
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, settings_dir_.path());
    QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, settings_dir_.path());
    QSettings().clear();
    fixture_ = dir_.filePath("fixture.sqlite");
    ASSERT_EQ(testing::write_fixture_session(fixture_.toStdString()), "");
  }
  QTemporaryDir settings_dir_, dir_;
  QString fixture_;
};

TEST_F(Export, PerfettoJsonHasTheSessionsKernelsAndPhases) {
  MainWindow window;
  QString error;
  EXPECT_FALSE(window.exportPerfetto(dir_.filePath("none.json"), &error)) << "no session open yet";
  ASSERT_TRUE(window.openSession(fixture_, &error, true)) << error.toStdString();
  const QString out = dir_.filePath("trace.json");
  ASSERT_TRUE(window.exportPerfetto(out, &error)) << error.toStdString();
  std::ifstream in(out.toStdString());
  const auto trace = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(trace.is_discarded()) << "not JSON";
  ASSERT_TRUE(trace.contains("traceEvents") && trace["traceEvents"].is_array());
  int gemv = 0, verify = 0;
  for (const auto& e : trace["traceEvents"]) {
    const std::string name = e.value("name", "");
    if (e.value("ph", "") != "X") continue;
    if (name.find("gemv_q4") != std::string::npos) ++gemv;
    if (name == "verify") ++verify;
  }
  EXPECT_EQ(gemv, testing::kFixtureRounds * testing::kFixtureLayers) << "one gemv kernel per layer and round";
  EXPECT_EQ(verify, testing::kFixtureRounds);
}

TEST_F(Export, CsvFilesHaveHeadersAndOneRowPerRecord) {
  MainWindow window;
  ASSERT_TRUE(window.openSession(fixture_, nullptr, true));
  const QString out = dir_.filePath("csv");
  QString error;
  ASSERT_TRUE(window.exportCsv(out, &error)) << error.toStdString();
  const auto kernels = lines_of(out + "/kernels.csv");
  ASSERT_FALSE(kernels.empty());
  EXPECT_EQ(kernels[0].rfind("start_ns,end_ns,duration_ns,device,context,stream,correlation_id,short_name,name", 0), 0u)
      << kernels[0];
  EXPECT_EQ(kernels.size(), 1u + testing::kFixtureRounds * testing::kFixtureLayers * testing::kFixtureKernelsPerLayer);
  const auto rounds = lines_of(out + "/rounds.csv");
  ASSERT_FALSE(rounds.empty());
  EXPECT_EQ(rounds[0].rfind("round,start_ns,end_ns,speculative", 0), 0u) << rounds[0];
  EXPECT_EQ(rounds.size(), 1u + testing::kFixtureRounds);
  for (const char* name : {"memcpy.csv", "selections.csv", "nvtx.csv"}) {
    EXPECT_FALSE(lines_of(out + "/" + name).empty()) << name;
  }
}

TEST_F(Export, EveryViewAsPngSvgAndPdf) {
  MainWindow window;
  window.resize(1400, 900);
  window.show();
  ASSERT_TRUE(window.openSession(fixture_, nullptr, true));
  struct Case {
    const char* name;
    SessionViewKind kind;
    const char* dock;
  };
  const Case views[] = {{"tree", SessionViewKind::kTree, "treeDock"},
                        {"heatmap", SessionViewKind::kHeatmapBlocks, "heatmapDock"},
                        {"schedule", SessionViewKind::kSchedule, "scheduleDock"},
                        {"experts", SessionViewKind::kExperts, "expertsDock"},
                        {"timeline", SessionViewKind::kTimeline, "timelineDock"}};
  for (const auto& [name, kind, dock] : views) {
    window.showView(kind);
    QCoreApplication::processEvents();
    const QString base = dir_.filePath(QString::fromLatin1(name));
    QString error;
    ASSERT_TRUE(window.exportView(kind, base + ".png", &error)) << name << ": " << error.toStdString();
    ASSERT_TRUE(window.exportView(kind, base + ".svg", &error)) << name << ": " << error.toStdString();
    ASSERT_TRUE(window.exportView(kind, base + ".pdf", &error)) << name << ": " << error.toStdString();
    EXPECT_EQ(head(base + ".png", 8), kPngMagic) << name;
    EXPECT_EQ(head(base + ".pdf", 5), QByteArray("%PDF-")) << name;
    const QByteArray svg = head(base + ".svg", 1 << 22);
    EXPECT_TRUE(svg.startsWith("<?xml") && svg.contains("<svg")) << name;
    EXPECT_TRUE(svg.contains("<text")) << name << ": labels should stay text in the SVG";
    const QImage png(base + ".png");
    ASSERT_FALSE(png.isNull()) << name;
    QWidget* view = window.dock(QString::fromLatin1(dock))->widget();
    EXPECT_LE(png.width(), view->width()) << name;
    EXPECT_LE(png.height(), view->height()) << name;
    EXPECT_GT(png.width() * png.height(), view->width() * view->height() / 4) << name << ": the plots fill most of the view";
  }
  // The timeline's phases are drawn as text on the spans.
  EXPECT_TRUE(head(dir_.filePath("timeline.svg"), 1 << 22).contains("verify"));
  QString error;
  EXPECT_FALSE(window.exportView(SessionViewKind::kTree, dir_.filePath("tree.bmp"), &error));
  EXPECT_TRUE(error.contains(".png, .svg or .pdf")) << error.toStdString();
}

TEST_F(Export, ScreenshotModeWritesSvgAndPdfBySuffix) {
  for (const char* suffix : {"svg", "pdf"}) {
    const QString out = dir_.filePath(QStringLiteral("schedule.%1").arg(QLatin1String(suffix)));
    QProcess p;
    p.start(SPECULA_GUI, {"--session", fixture_, "--view", "schedule", "--screenshot", out, "--size", "800x500"});
    ASSERT_TRUE(p.waitForFinished(60000));
    EXPECT_EQ(p.exitCode(), 0) << p.readAllStandardError().toStdString();
    const QByteArray bytes = head(out, 1 << 22);
    if (QLatin1String(suffix) == QLatin1String("svg")) {
      EXPECT_TRUE(bytes.contains("<svg")) << suffix;
    } else {
      EXPECT_TRUE(bytes.startsWith("%PDF-")) << suffix;
    }
  }
}

}  // namespace
}  // namespace specula::ui
