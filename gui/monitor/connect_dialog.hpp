// "Connect to a run": paste the runner's line (monitor: gantry-monitor
// HOST:PORT --token T), type HOST:PORT --token T, or pick a run directory.
// Recent entries come from QSettings.
#pragma once

#include <QDialog>

#include "source.hpp"

class QComboBox;
class QLabel;

namespace gantry::monitor {

class ConnectDialog : public QDialog {
  Q_OBJECT
 public:
  ConnectDialog(const QStringList& recent, QWidget* parent = nullptr);
  /// The parsed target (valid after accept()).
  const client::Target& target() const { return target_; }
  /// The text as typed, to remember.
  QString text() const;

 public slots:
  void accept() override;

 private:
  QComboBox* input_;
  QLabel* error_;
  client::Target target_;
};

}  // namespace gantry::monitor
