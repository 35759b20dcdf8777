// Kernel timeline replot cost (goal: <= 16 ms per replot at 100k spans, issue 6). Builds a
// decode-like timeline (kernels of 1-5 us with launch gaps on a few streams, engine phases
// with nested layer ranges above them), puts it into the real TimelinePlottable in an offscreen
// QCustomPlot, and times replot() at several zoom levels: the whole run, and windows of 1/10,
// 1/100, 1/1000 and 1/10000 of it (the middle of the run). Median and max of --reps replots per
// level. Prints JSON; --out also writes it.
#include <qcustomplot.h>

#include <CLI/CLI.hpp>
#include <QApplication>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_info.h"
#include "ui/models/timeline_model.h"
#include "ui/views/timeline_plottable.h"

namespace {

using Clock = std::chrono::steady_clock;
using specula::ui::SpanKind;
using specula::ui::TimelineModel;
using specula::ui::TimelineSpan;

TimelineModel make_timeline(int64_t kernels, int streams, std::vector<std::string>& names) {
  const char* ops[] = {"gemv_q4_1", "rmsnorm", "rope", "tree_attention", "select_blocks", "silu_mul", "add", "argmax"};
  for (const char* op : ops) {
    for (int variant : {64, 128}) {
      names.push_back("void specula::cuda::" + std::string(op) + "_kernel<" + std::to_string(variant) + ">(float*, int)");
    }
  }
  const int32_t phase_base = static_cast<int32_t>(names.size());
  names.push_back("verify");
  names.push_back("layer");
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> duration(1000, 5000), gap(300, 900), name(0, phase_base - 1);
  std::vector<TimelineModel::LaneInput> lanes;
  lanes.push_back({"phases", SpanKind::kPhase, {}});
  for (int s = 0; s < streams; ++s) lanes.push_back({"stream " + std::to_string(s), SpanKind::kKernel, {}});
  std::vector<int64_t> t(static_cast<size_t>(streams), 0);
  int32_t source = 0;
  constexpr int kKernelsPerLayer = 12, kLayersPerRound = 30;
  int64_t layer_start = 0, round_start = 0;
  for (int64_t i = 0; i < kernels; ++i) {
    const size_t s = static_cast<size_t>(i % streams);
    const int64_t start = t[s] + gap(rng);
    const int64_t end = start + duration(rng);
    t[s] = end;
    lanes[s + 1].spans.push_back({start, end, name(rng), source++});
    if ((i + 1) % kKernelsPerLayer == 0) {  // a layer range over the kernels just launched
      const int64_t layer_end = *std::max_element(t.begin(), t.end());
      lanes[0].spans.push_back({layer_start, layer_end, phase_base + 1, source++});
      layer_start = layer_end;
      if ((i + 1) % (kKernelsPerLayer * kLayersPerRound) == 0) {
        lanes[0].spans.push_back({round_start, layer_end, phase_base, source++});
        round_start = layer_end;
      }
    }
  }
  return TimelineModel::from_lanes(std::move(lanes), names);
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"Timeline replot cost at 100k+ spans"};
  int64_t spans = 100'000;
  int streams = 4, reps = 30, width = 1600, height = 700;
  std::string out, commit = "unknown";
  cli.add_option("--commit", commit, "commit the binary was built from");
  cli.add_option("--spans", spans, "kernels (layer/round ranges come on top)")->check(CLI::Range(int64_t{1}, int64_t{50'000'000}));
  cli.add_option("--streams", streams, "CUDA streams")->check(CLI::Range(1, 64));
  cli.add_option("--reps", reps, "replots per zoom level")->check(CLI::Range(1, 10'000));
  cli.add_option("--width", width, "plot width, px")->check(CLI::Range(200, 8000));
  cli.add_option("--height", height, "plot height, px")->check(CLI::Range(200, 8000));
  cli.add_option("--out", out, "also write the JSON here");
  CLI11_PARSE(cli, argc, argv);

  qputenv("QT_QPA_PLATFORM", "offscreen");
  int qt_argc = 1;
  QApplication app(qt_argc, argv);

  std::vector<std::string> names;
  const auto build_start = Clock::now();
  const TimelineModel model = make_timeline(spans, streams, names);
  const double build_ms = std::chrono::duration<double, std::milli>(Clock::now() - build_start).count();

  QCustomPlot plot;
  plot.resize(width, height);
  auto* plottable = new specula::ui::TimelinePlottable(plot.xAxis, plot.yAxis, &model);
  plot.yAxis->setRangeReversed(true);
  plot.yAxis->setRange(-0.6, plottable->rowCount());
  plot.show();
  QCoreApplication::processEvents();

  const double extent_us = model.extent().t1 / 1000.0;
  nlohmann::json levels = nlohmann::json::array();
  double worst_median = 0;
  for (double zoom : {1.0, 10.0, 100.0, 1000.0, 10000.0}) {
    const double w = extent_us / zoom, centre = extent_us / 2;
    std::vector<double> ms;
    int64_t rects = 0;
    for (int r = 0; r < reps; ++r) {
      // Pan a little each time so nothing is cached between replots.
      const double shift = (r % 2 == 0 ? 0.01 : -0.01) * w;
      plot.xAxis->setRange(centre - w / 2 + shift, centre + w / 2 + shift);
      const auto start = Clock::now();
      plot.replot(QCustomPlot::rpImmediateRefresh);
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      rects = plottable->lastRectCount();
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    worst_median = std::max(worst_median, median);
    levels.push_back({{"zoom", zoom}, {"visible_us", w}, {"median_ms", median}, {"max_ms", ms.back()},
                      {"rects_drawn", rects}});
    std::fprintf(stderr, "zoom %7.0fx: %.3f ms/replot median, %.3f max, %lld rects\n", zoom, median, ms.back(),
                 static_cast<long long>(rects));
  }
  nlohmann::json result = {
      {"benchmark", "timeline_replot"},
      {"date", specula::bench::utc_now()},
      {"command", specula::bench::command_line(argc, argv)},
      {"commit", commit},
      {"host", specula::bench::host_info()},
      {"device", "CPU, offscreen Qt platform (software raster)"},
      {"loadavg", load_average()},  // the 2 cores are shared with other builds: context for the figures
      {"spans", model.span_count()},
      {"kernels", spans},
      {"streams", streams},
      {"plot_px", {width, height}},
      {"model_build_ms", build_ms},
      {"levels", levels},
      {"worst_median_ms", worst_median},
      {"goal_ms", 16},
      {"goal_met", worst_median <= 16.0}};
  std::printf("%s\n", result.dump(2).c_str());
  if (!out.empty()) {
    std::ofstream file(out);
    file << result.dump(2) << "\n";
    if (!file) {
      std::fprintf(stderr, "bench_timeline_replot: cannot write %s\n", out.c_str());
      return 1;
    }
  }
  return 0;
}
