// The Run view: what the run is (name, plugin and manifest, world size and
// nodes), its status, elapsed time and ETA, and the resolved config as a tree.
#pragma once

#include <QWidget>

#include "run_state.hpp"

class QFormLayout;
class QLabel;
class QTreeWidget;

namespace gantry::monitor {

class RunView : public QWidget {
  Q_OBJECT
 public:
  explicit RunView(QWidget* parent = nullptr);
  void refresh(const client::RunState& state);
  QString field(const QString& name) const;

 private:
  QLabel* add(const QString& name);

  QFormLayout* form_;
  std::vector<std::pair<QString, QLabel*>> fields_;
  QTreeWidget* config_;
  std::string shown_config_;
};

}  // namespace gantry::monitor
