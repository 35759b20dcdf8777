#pragma once
// Teaching mode: one recorded round, stage by stage (draft, select blocks, verify, accept,
// commit). A strip names the stages and marks the current one; the draft tree and the KV block
// strip are drawn for that stage (what it adds or decides stands out, the rest is dimmed); a
// short explanation with the round's numbers sits under them. Fonts scale by a presentation
// factor so a lecture projector can show it (+ and - change it). Right/PgDn/Space step on (into
// the next round after commit), Left/PgUp step back; presenter clickers send PgDn/PgUp.
#include <QWidget>

#include "ui/models/teach_steps.h"
#include "ui/models/tree_layout.h"

class QGraphicsScene;
class QGraphicsView;
class QLabel;
class QPushButton;

namespace specula::ui {

class SessionDocument;

class TeachView : public QWidget {
  Q_OBJECT
 public:
  explicit TeachView(SessionDocument* document, QWidget* parent = nullptr);

  TeachStage stage() const { return stage_; }
  QString explanation() const;
  QString highlightedStageTitle() const;  // the stage strip's highlighted entry
  double presentationScale() const { return scale_; }
  const TeachFacts& facts() const { return facts_; }

 public slots:
  void setStage(specula::ui::TeachStage stage);
  void next();      // the next stage, or the next round's draft after commit
  void previous();  // the previous stage, or the previous round's commit before draft
  void setPresentationScale(double scale);  // 1 = the app's font; clamped to [0.75, 4]

 signals:
  void stageChanged(specula::ui::TeachStage stage);

 protected:
  void keyPressEvent(QKeyEvent* event) override;

 private:
  void rebuild();
  void draw();
  void applyFonts();

  SessionDocument* document_;
  TeachStage stage_ = TeachStage::kDraft;
  double scale_ = 1.5;
  TeachFacts facts_;
  TreeLayout tree_;
  QList<QLabel*> stage_labels_;
  QGraphicsScene* scene_;
  QGraphicsView* view_;
  QLabel* explanation_;
  QLabel* round_label_;
  QPushButton* prev_;
  QPushButton* next_;
};

}  // namespace specula::ui
