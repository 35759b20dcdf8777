#pragma once
// The progress bar of a long-work dock (evaluation, calibration, profiling sweep): the model
// load first, in per mille, then the units done of the total. The worker lives on its own
// thread; its signals reach the bar queued, on the bar's thread.
#include <QObject>
#include <QProgressBar>
#include <QString>

namespace specula::ui {

// Worker: a QObject with signals loadProgress(int permille) and progress(int done, int total).
// units_format: the bar's text for the second stage, e.g. tr("%v / %m runs").
template <class Worker>
void connect_progress_bar(QProgressBar* bar, Worker* worker, const QString& units_format) {
  QObject::connect(worker, &Worker::loadProgress, bar, [bar](int permille) {
    bar->setFormat(QObject::tr("Loading the model %p%"));
    bar->setRange(0, 1000);
    bar->setValue(permille);
  });
  QObject::connect(worker, &Worker::progress, bar, [bar, units_format](int done, int total) {
    bar->setFormat(units_format);
    bar->setRange(0, total);
    bar->setValue(done);
  });
}

}  // namespace specula::ui
