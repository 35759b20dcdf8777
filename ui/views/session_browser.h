#pragma once
// The recorded sessions in a folder (the run panel's, by default): file, date, model, drafter,
// sparse preset, rounds, kernels. Double click (or Enter) opens one.
#include <QWidget>

class QTreeWidget;
class QLabel;

namespace specula::ui {

class SessionBrowser : public QWidget {
  Q_OBJECT
 public:
  explicit SessionBrowser(QWidget* parent = nullptr);
  void setDirectory(const QString& dir);
  QString directory() const { return dir_; }
  int sessionCount() const;
  QString pathAt(int row) const;

 public slots:
  void refresh();

 signals:
  void openRequested(const QString& path);

 private:
  QString dir_;
  QLabel* header_;
  QTreeWidget* list_;
};

}  // namespace specula::ui
