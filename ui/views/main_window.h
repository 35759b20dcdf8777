#pragma once
// The first window a user meets: choose a model, type a prompt, press Run, watch the text
// stream in. Generation runs on a worker thread (ui/live/generation_worker.h).
#include <QMainWindow>
#include <QThread>

class QCheckBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;

namespace specula::ui {

class GenerationWorker;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  void setModelSpec(const QString& spec);
  void setPrompt(const QString& prompt);
  QString outputText() const;
  bool isRunning() const { return running_; }

 public slots:
  void startRun();
  void stopRun();

 signals:
  void runFinished(bool ok);  // emitted after every run, for tests and scripting

 private:
  void browseModel();
  void setRunning(bool running);

  QThread worker_thread_;
  GenerationWorker* worker_ = nullptr;  // lives on worker_thread_, deleted when it finishes
  QLineEdit* model_edit_ = nullptr;
  QCheckBox* chat_box_ = nullptr;
  QSpinBox* max_tokens_ = nullptr;
  QDoubleSpinBox* temperature_ = nullptr;
  QPlainTextEdit* prompt_edit_ = nullptr;
  QPlainTextEdit* output_ = nullptr;
  QPushButton* run_button_ = nullptr;
  QPushButton* stop_button_ = nullptr;
  QLabel* speed_label_ = nullptr;
  bool running_ = false;
};

}  // namespace specula::ui
