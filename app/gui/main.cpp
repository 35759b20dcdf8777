// specula: the desktop app.
//   specula [--session S.sqlite] [--view NAME] [--round N]
//   specula --session S.sqlite --view NAME [--round N] [--stage STAGE] --screenshot OUT.png|OUT.svg|OUT.pdf [--size WxH]
// The second form renders one session view offscreen into an image and exits (tests, docs, CI):
// SVG and PDF by suffix (vector plots, ui/views/plot_export.h), PNG otherwise.
// Bad input gets one line on stderr and exit status 2 in that mode, a dialog otherwise.
#include <QApplication>
#include <QCommandLineParser>
#include <QRegularExpression>
#include <cstdio>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "ui/models/session_document.h"
#include "ui/views/main_window.h"
#include "ui/views/plot_export.h"
#include "ui/views/session_views.h"
#include "ui/views/teach_view.h"

namespace {

int fail(const QString& message) {
  std::fprintf(stderr, "specula: %s\n", qPrintable(message));
  return 2;
}

bool screenshot_requested(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const QString arg = QString::fromLocal8Bit(argv[i]);
    if (arg == QLatin1String("--screenshot") || arg.startsWith(QLatin1String("--screenshot="))) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // Screenshots need no display; pick the offscreen platform unless the caller chose one.
  if (screenshot_requested(argc, argv)) {
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
    // Headless, Qt's platform chatter (no XDG_RUNTIME_DIR, no size hints) would bury the one
    // line a failure prints; keep only critical messages unless asked.
    if (qEnvironmentVariableIsEmpty("SPECULA_QT_WARNINGS")) {
      qInstallMessageHandler([](QtMsgType type, const QMessageLogContext&, const QString& message) {
        if (type == QtCriticalMsg || type == QtFatalMsg) std::fprintf(stderr, "%s\n", qPrintable(message));
      });
    }
  }
  // QGuiApplication takes "-session"/"--session ID" for X11 session management and removes it,
  // so ours is read from the untouched argv and hidden from Qt.
  QStringList arguments;
  std::vector<char*> qt_argv;
  for (int i = 0; i < argc; ++i) {
    arguments << QString::fromLocal8Bit(argv[i]);
    const std::string_view arg(argv[i]);
    if ((arg == "--session" || arg == "-s") && i + 1 < argc) {
      arguments << QString::fromLocal8Bit(argv[++i]);
      continue;
    }
    if (arg.starts_with("--session=")) continue;
    qt_argv.push_back(argv[i]);
  }
  int qt_argc = static_cast<int>(qt_argv.size());
  qt_argv.push_back(nullptr);
  QApplication app(qt_argc, qt_argv.data());
  QApplication::setApplicationName(QStringLiteral("Specula"));
  QApplication::setOrganizationName(QStringLiteral("Specula"));

  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("Profiler and visualizer for speculative decoding."));
  parser.addHelpOption();
  const QCommandLineOption session({QStringLiteral("s"), QStringLiteral("session")},
                                   QStringLiteral("Open the recorded session FILE."), QStringLiteral("FILE"));
  const QCommandLineOption view(QStringLiteral("view"),
                                QStringLiteral("Show the view NAME: %1.").arg(specula::ui::session_view_names().join(", ")),
                                QStringLiteral("NAME"));
  const QCommandLineOption round(QStringLiteral("round"), QStringLiteral("Start on round N."), QStringLiteral("N"));
  const QCommandLineOption screenshot(QStringLiteral("screenshot"),
                                      QStringLiteral("Render the view offscreen into OUT (.svg and .pdf by suffix, else PNG) and exit."),
                                      QStringLiteral("OUT"));
  const QCommandLineOption size(QStringLiteral("size"), QStringLiteral("Screenshot size WxH (default 1200x700)."),
                                QStringLiteral("WxH"), QStringLiteral("1200x700"));
  const QCommandLineOption stage(QStringLiteral("stage"),
                                 QStringLiteral("Teaching view: start on STAGE (draft, select, verify, accept, commit)."),
                                 QStringLiteral("STAGE"));
  parser.addOptions({session, view, round, stage, screenshot, size});
  if (!parser.parse(arguments)) return fail(parser.errorText());
  if (parser.isSet(QStringLiteral("help"))) parser.showHelp(0);
  if (!parser.positionalArguments().isEmpty()) {
    return fail(QStringLiteral("unexpected argument '%1'").arg(parser.positionalArguments().first()));
  }

  std::optional<specula::ui::SessionViewKind> kind;
  if (parser.isSet(view)) {
    kind = specula::ui::parse_session_view(parser.value(view));
    if (!kind) {
      return fail(QStringLiteral("--view: unknown view '%1' (one of %2)")
                      .arg(parser.value(view), specula::ui::session_view_names().join(", ")));
    }
  }
  std::optional<qint64> round_id;
  if (parser.isSet(round)) {
    bool ok = false;
    round_id = parser.value(round).toLongLong(&ok);
    if (!ok) return fail(QStringLiteral("--round: '%1' is not a number").arg(parser.value(round)));
  }

  std::optional<specula::ui::TeachStage> teach_stage;
  if (parser.isSet(stage)) {
    const QStringList names = {"draft", "select", "verify", "accept", "commit"};
    const auto at = names.indexOf(parser.value(stage));
    if (at < 0) return fail(QStringLiteral("--stage: unknown stage '%1' (one of %2)").arg(parser.value(stage), names.join(", ")));
    teach_stage = static_cast<specula::ui::TeachStage>(at);
  }
  const auto apply_stage = [&teach_stage](QWidget* root) {
    if (!teach_stage) return;
    if (auto* teach = root->findChild<specula::ui::TeachView*>(); teach != nullptr) teach->setStage(*teach_stage);
    if (auto* teach = qobject_cast<specula::ui::TeachView*>(root); teach != nullptr) teach->setStage(*teach_stage);
  };

  if (parser.isSet(screenshot)) {
    if (!parser.isSet(session) || !kind) return fail(QStringLiteral("--screenshot needs --session and --view"));
    const auto match = QRegularExpression(QStringLiteral("^(\\d+)x(\\d+)$")).match(parser.value(size));
    if (!match.hasMatch() || match.captured(1).toInt() < 100 || match.captured(2).toInt() < 100 ||
        match.captured(1).toInt() > 8000 || match.captured(2).toInt() > 8000) {
      return fail(QStringLiteral("--size: '%1' is not WxH between 100 and 8000").arg(parser.value(size)));
    }
    specula::ui::SessionDocument document;
    QString error;
    if (!document.open(parser.value(session), &error)) return fail(error);
    if (round_id) {
      if (document.data()->round(*round_id) == nullptr) {
        return fail(QStringLiteral("--round: %1: no round %2 (the session has %3 rounds)")
                        .arg(parser.value(session))
                        .arg(*round_id)
                        .arg(document.data()->rounds.size()));
      }
      document.setRound(*round_id);
    }
    std::unique_ptr<QWidget> widget(specula::ui::create_session_view(*kind, &document));
    apply_stage(widget.get());
    const QSize out_size(match.captured(1).toInt(), match.captured(2).toInt());
    const auto format = specula::ui::image_format_for(parser.value(screenshot));
    error = format && *format != specula::ui::ImageFormat::kPng
                ? specula::ui::export_view_image(widget.get(), parser.value(screenshot), out_size)
                : specula::ui::render_widget_png(widget.get(), out_size, parser.value(screenshot));
    if (!error.isEmpty()) return fail(error);
    return 0;
  }

  specula::ui::MainWindow window;
  window.show();
  if (parser.isSet(session)) {
    if (window.openSession(parser.value(session)) && round_id) window.document()->setRound(*round_id);
  }
  if (kind) window.showView(*kind);
  apply_stage(&window);
  return QApplication::exec();
}
