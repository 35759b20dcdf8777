#include "ui/live/prompt_library.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

namespace specula::ui {

QString LibraryPrompt::label() const {
  QString head = text.simplified();
  if (head.size() > 60) head = head.left(57) + "...";
  return QStringLiteral("%1 #%2: %3").arg(category, id, head);
}

PromptLoad load_prompt_library(const QString& path) {
  PromptLoad out;
  QFile file(path);
  if (!file.open(QIODevice::ReadOnly)) {
    out.error = QStringLiteral("%1: cannot open: %2").arg(path, file.errorString());
    return out;
  }
  int line_no = 0;
  while (!file.atEnd()) {
    const QByteArray line = file.readLine().trimmed();
    ++line_no;
    if (line.isEmpty()) continue;
    QJsonParseError parse_error;
    const QJsonDocument doc = QJsonDocument::fromJson(line, &parse_error);
    const auto fail = [&](const QString& what) {
      out.prompts.clear();
      out.error = QStringLiteral("%1:%2: %3").arg(path).arg(line_no).arg(what);
    };
    if (parse_error.error != QJsonParseError::NoError) {
      fail(QStringLiteral("not JSON (%1)").arg(parse_error.errorString()));
      return out;
    }
    const QJsonObject obj = doc.object();
    const QJsonArray turns = obj.value("turns").toArray();
    if (!doc.isObject() || turns.isEmpty() || !turns.first().isString()) {
      fail(QStringLiteral("expected an object with a non-empty \"turns\" array of strings (the Spec-Bench format)"));
      return out;
    }
    LibraryPrompt prompt;
    const QJsonValue id = obj.value("question_id");
    prompt.id = id.isString() ? id.toString() : QString::number(id.toInteger());
    prompt.category = obj.value("category").toString(QStringLiteral("uncategorized"));
    prompt.text = turns.first().toString();
    out.prompts.push_back(prompt);
  }
  if (out.prompts.isEmpty()) out.error = QStringLiteral("%1: no prompts in the file").arg(path);
  return out;
}

PromptLoad builtin_prompts() { return load_prompt_library(QStringLiteral(":/prompts/builtin.jsonl")); }

}  // namespace specula::ui
