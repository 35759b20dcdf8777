#include "ui/models/range_stats_model.h"

#include <cmath>

namespace specula::ui {

QString format_duration(double ns) {
  const double a = std::fabs(ns);
  // Four significant digits, no trailing zeros: "250 µs", "1.5 ms", "2.204 s".
  const auto fmt = [](double v, const char* unit) { return QString::number(v, 'g', 4) + QString::fromUtf8(unit); };
  if (a >= 1e9) return fmt(ns / 1e9, " s");
  if (a >= 1e6) return fmt(ns / 1e6, " ms");
  if (a >= 1e3) return fmt(ns / 1e3, " µs");
  return fmt(ns, " ns");
}

RangeStatsModel::RangeStatsModel(QObject* parent) : QAbstractTableModel(parent) {}

void RangeStatsModel::setStats(std::vector<KernelRangeStat> stats, double t0_ns, double t1_ns) {
  beginResetModel();
  stats_ = std::move(stats);
  t0_ = t0_ns;
  t1_ = t1_ns;
  endResetModel();
}

int RangeStatsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(stats_.size());
}

int RangeStatsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : kColumns; }

QVariant RangeStatsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const KernelRangeStat& s = stats_[static_cast<size_t>(index.row())];
  if (role == Qt::UserRole) {
    switch (index.column()) {
      case kName: return QString::fromStdString(s.name);
      case kCount: return static_cast<qlonglong>(s.count);
      case kTotal: return static_cast<qlonglong>(s.total_ns);
      case kMean: return s.mean_ns;
      case kShare: return s.share;
      default: return {};
    }
  }
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case kName: return QString::fromStdString(profiler::kernel_short_name(s.name));
      case kCount: return static_cast<qlonglong>(s.count);
      case kTotal: return format_duration(static_cast<double>(s.total_ns));
      case kMean: return format_duration(s.mean_ns);
      case kShare: return QStringLiteral("%1 %").arg(100.0 * s.share, 0, 'f', 1);
      default: return {};
    }
  }
  if (role == Qt::ToolTipRole && index.column() == kName) return QString::fromStdString(s.name);
  if (role == Qt::TextAlignmentRole && index.column() != kName) return int(Qt::AlignRight | Qt::AlignVCenter);
  return {};
}

QVariant RangeStatsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case kName: return tr("Kernel");
    case kCount: return tr("Count");
    case kTotal: return tr("Total");
    case kMean: return tr("Mean");
    case kShare: return tr("Share of range");
    default: return {};
  }
}

}  // namespace specula::ui
