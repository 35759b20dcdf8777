#include "ui/views/main_window.h"

#include <QAction>
#include <QApplication>
#include <QFileDialog>
#include <QKeySequence>
#include <QMenuBar>
#include <QPlainTextEdit>
#include <QStatusBar>

#include "ui/views/run_panel.h"

namespace specula::ui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(tr("Specula"));
  resize(1100, 760);
  run_panel_ = new RunPanel(this);
  setCentralWidget(run_panel_);

  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* open_prompts = file->addAction(tr("Open &prompts..."));
  open_prompts->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_P));
  connect(open_prompts, &QAction::triggered, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open prompts"), QString(), tr("JSONL (*.jsonl)"));
    if (!path.isEmpty() && !run_panel_->openPromptFile(path)) statusBar()->showMessage(tr("Could not read %1").arg(path));
  });
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"));
  quit->setShortcut(QKeySequence::Quit);
  connect(quit, &QAction::triggered, qApp, &QApplication::quit);

  statusBar()->showMessage(tr("Ready. Ctrl+Enter runs, Esc stops."));
  connect(run_panel_, &RunPanel::runFinished, this, &MainWindow::runFinished);
  connect(run_panel_, &RunPanel::sessionRecorded, this,
          [this](const QString& path) { statusBar()->showMessage(tr("Session recorded: %1").arg(path)); });
}

MainWindow::~MainWindow() = default;

void MainWindow::setModelSpec(const QString& spec) { run_panel_->setModelSpec(spec); }
void MainWindow::setPrompt(const QString& prompt) { run_panel_->setPrompt(prompt); }
QString MainWindow::outputText() const { return run_panel_->outputText(); }
bool MainWindow::isRunning() const { return run_panel_->isRunning(); }
void MainWindow::startRun() { run_panel_->startRun(); }
void MainWindow::stopRun() { run_panel_->stopRun(); }

}  // namespace specula::ui
