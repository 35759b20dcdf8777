#include "ui/views/experts_view.h"

#include <qcustomplot.h>

#include <QCheckBox>
#include <QVBoxLayout>

#include "ui/models/session_document.h"
#include "ui/views/plot_theme.h"

namespace specula::ui {
namespace {

void no_data(QCustomPlot* plot, const QString& message) {
  auto* text = new QCPItemText(plot);
  text->position->setType(QCPItemPosition::ptAxisRectRatio);
  text->position->setCoords(0.5, 0.5);
  text->setColor(plot->parentWidget()->palette().color(QPalette::WindowText));
  text->setText(message);
}

}  // namespace

ExpertsView::ExpertsView(SessionDocument* document, QWidget* parent)
    : QWidget(parent),
      document_(document),
      moe_plot_(new QCustomPlot(this)),
      ffn_plot_(new QCustomPlot(this)),
      averaged_(new QCheckBox(tr("average over all rounds"), this)) {
  setObjectName(QStringLiteral("expertsView"));
  averaged_->setChecked(true);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addWidget(averaged_);
  layout->addWidget(moe_plot_, 1);
  layout->addWidget(ffn_plot_, 1);
  connect(averaged_, &QCheckBox::toggled, this, &ExpertsView::rebuild);
  connect(document_, &SessionDocument::sessionChanged, this, &ExpertsView::rebuild);
  connect(document_, &SessionDocument::roundChanged, this, [this] {
    if (!averaged_->isChecked()) rebuild();
  });
  rebuild();
}

void ExpertsView::setAveraged(bool averaged) { averaged_->setChecked(averaged); }

void ExpertsView::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) rebuild();
}

void ExpertsView::rebuild() {
  for (QCustomPlot* plot : {moe_plot_, ffn_plot_}) {
    plot->clearPlottables();
    plot->clearItems();
    apply_plot_theme(plot, palette());
  }
  const QPalette& p = palette();
  const std::optional<int64_t> scope =
      averaged_->isChecked() || !document_->isOpen() ? std::nullopt : std::optional<int64_t>(document_->round());
  experts_ = document_->isOpen() ? expert_stats(*document_->data(), scope) : std::vector<LayerExperts>{};
  ffn_ = document_->isOpen() ? ffn_stats(*document_->data(), scope) : std::vector<LayerFfn>{};
  const QString scope_text = scope ? tr("round %1").arg(*scope) : tr("mean over rounds");

  QVector<double> layers, routed, skipped, ratio, ffn_skipped;
  bool any_moe = false, any_ffn = false;
  for (size_t l = 0; l < experts_.size(); ++l) {
    layers << static_cast<double>(l);
    routed << experts_[l].routed;
    skipped << experts_[l].skipped;
    any_moe = any_moe || experts_[l].total > 0;
    const double r = std::isnan(ffn_[l].active_ratio) ? 0.0 : ffn_[l].active_ratio;
    ratio << r;
    ffn_skipped << ffn_[l].skipped;
    any_ffn = any_ffn || !std::isnan(ffn_[l].active_ratio);
  }

  auto* routed_bars = new QCPBars(moe_plot_->xAxis, moe_plot_->yAxis);
  routed_bars->setName(tr("routed (ran)"));
  routed_bars->setBrush(accepted_colour(p));
  routed_bars->setPen(Qt::NoPen);
  routed_bars->setData(layers, routed);
  auto* skipped_bars = new QCPBars(moe_plot_->xAxis, moe_plot_->yAxis);
  skipped_bars->setName(tr("skipped by the policy"));
  skipped_bars->setBrush(rejected_colour(p));
  skipped_bars->setPen(Qt::NoPen);
  skipped_bars->setData(layers, skipped);
  skipped_bars->moveAbove(routed_bars);
  moe_plot_->xAxis->setLabel(tr("layer"));
  moe_plot_->yAxis->setLabel(tr("experts per token (%1)").arg(scope_text));
  moe_plot_->xAxis->setRange(-0.7, std::max<double>(1, static_cast<double>(layers.size())) - 0.3);
  double top = 1;
  for (int i = 0; i < routed.size(); ++i) top = std::max(top, routed[i] + skipped[i]);
  moe_plot_->yAxis->setRange(0, top * 1.4);
  moe_plot_->legend->setVisible(any_moe);
  if (!any_moe) no_data(moe_plot_, tr("No MoE statistics in this session (dense model)"));

  auto* ratio_bars = new QCPBars(ffn_plot_->xAxis, ffn_plot_->yAxis);
  ratio_bars->setName(tr("active FFN channels / all"));
  ratio_bars->setBrush(reuse_colour(p));
  ratio_bars->setPen(Qt::NoPen);
  ratio_bars->setData(layers, ratio);
  auto* ffn_skip = new QCPGraph(ffn_plot_->xAxis, ffn_plot_->yAxis);
  ffn_skip->setName(tr("whole FFN skipped (share of rounds)"));
  ffn_skip->setLineStyle(QCPGraph::lsNone);
  ffn_skip->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDiamond, rejected_colour(p), 7));
  QVector<double> skip_layers, skip_share;  // markers only where some round skipped the FFN
  for (int i = 0; i < ffn_skipped.size(); ++i) {
    if (ffn_skipped[i] > 0) {
      skip_layers << layers[i];
      skip_share << ffn_skipped[i];
    }
  }
  ffn_skip->setData(skip_layers, skip_share);
  ffn_plot_->xAxis->setLabel(tr("layer"));
  ffn_plot_->yAxis->setLabel(tr("FFN (%1)").arg(scope_text));
  ffn_plot_->xAxis->setRange(-0.7, std::max<double>(1, static_cast<double>(layers.size())) - 0.3);
  ffn_plot_->yAxis->setRange(0, 1.35);  // headroom for the legend
  ffn_plot_->legend->setVisible(any_ffn);
  if (!any_ffn) no_data(ffn_plot_, tr("No FFN statistics in this session\n(record with --sparse sffn or hybrid)"));
  moe_plot_->replot();
  ffn_plot_->replot();
}

}  // namespace specula::ui
