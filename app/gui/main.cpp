// specula: the desktop app.
#include <QApplication>

#include "ui/views/main_window.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName(QStringLiteral("Specula"));
  QApplication::setOrganizationName(QStringLiteral("Specula"));
  specula::ui::MainWindow window;
  window.show();
  return QApplication::exec();
}
