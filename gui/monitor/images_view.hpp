// The Images view: the newest grid large, a slider over every grid logged
// (all kept), "follow latest", zoom, and save as PNG (the exact bytes sent).
#pragma once

#include <QWidget>

#include "run_state.hpp"

class QCheckBox;
class QComboBox;
class QLabel;
class QPushButton;
class QSlider;

namespace gantry::monitor {

class ImagesView : public QWidget {
  Q_OBJECT
 public:
  explicit ImagesView(QWidget* parent = nullptr);
  void refresh(const client::RunState& state);
  /// Another run is shown from now on: the next refresh starts afresh.
  void forget() { drawn_version_ = ~0ull, current_ = -1; }
  /// The grid shown (index into state.images(); -1: none) and its step.
  int current_index() const { return current_; }
  int64_t current_step() const;
  QSlider* slider() const { return slider_; }
  bool save_current(const QString& path) const;

 protected:
  void resizeEvent(QResizeEvent* e) override;

 private:
  void show_index(int i);

  QSlider* slider_;
  QCheckBox* follow_;
  QComboBox* zoom_;
  QLabel* caption_;
  QLabel* picture_;
  QPushButton* save_;
  const client::RunState* state_ = nullptr;
  int current_ = -1;
  uint64_t drawn_version_ = ~0ull;
};

}  // namespace gantry::monitor
