#pragma once
// Prompts a user can pick in the run panel: a small built-in set (resources/prompts/builtin.jsonl,
// compiled in as :/prompts/builtin.jsonl) and any JSONL file in the Spec-Bench format the user
// opens: one object per line, {"question_id", "category", "turns": [first user turn, ...]}.
#include <QString>
#include <QStringList>
#include <QVector>

namespace specula::ui {

struct LibraryPrompt {
  QString id;        // question_id as text
  QString category;  // "summarization", "rag", ...
  QString text;      // the first turn
  QString label() const;  // "category #id: first words..."
};

struct PromptLoad {
  QVector<LibraryPrompt> prompts;
  QString error;  // empty on success: "<file>:<line>: <what is wrong>"
};

// Reads a Spec-Bench style JSONL file (a Qt resource path works too). Blank lines are skipped;
// the first malformed line stops the load with an error naming the line.
PromptLoad load_prompt_library(const QString& path);
PromptLoad builtin_prompts();

}  // namespace specula::ui
