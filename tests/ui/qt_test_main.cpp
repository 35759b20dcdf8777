// The main() of every UI test: a QApplication on the offscreen platform (no display needed),
// named so that any QSettings a test writes never land in the user's Specula settings.
#include <gtest/gtest.h>

#include <QApplication>

int main(int argc, char** argv) {
  qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication application(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("SpeculaTest"));
  QApplication::setApplicationName(QStringLiteral("SpeculaTest"));
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
