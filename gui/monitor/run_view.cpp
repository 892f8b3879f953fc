#include "run_view.hpp"

#include <QDateTime>
#include <QFormLayout>
#include <QHeaderView>
#include <QLabel>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <cmath>
#include <yaml-cpp/yaml.h>

namespace gantry::monitor {

namespace {

void add_yaml(QTreeWidgetItem* parent, const QString& key, const YAML::Node& node) {
  auto* item = new QTreeWidgetItem(parent, {key});
  if (node.IsMap()) {
    for (const auto& kv : node) add_yaml(item, QString::fromStdString(kv.first.as<std::string>()), kv.second);
    item->setExpanded(true);
  } else if (node.IsSequence()) {
    int i = 0;
    for (const auto& v : node) add_yaml(item, QString("[%1]").arg(i++), v);
  } else if (node.IsScalar()) {
    item->setText(1, QString::fromStdString(node.Scalar()));
  } else {
    item->setText(1, "~");
  }
}

QString duration_text(double s) { return QString::fromStdString(client::duration_text(s)); }

}  // namespace

RunView::RunView(QWidget* parent) : QWidget(parent) {
  form_ = new QFormLayout;
  for (const char* f : {"name", "plugin", "manifest", "world", "status", "started", "elapsed", "step", "speed", "ETA"})
    add(f);
  config_ = new QTreeWidget;
  config_->setObjectName("config");
  config_->setColumnCount(2);
  config_->setHeaderLabels({"key", "value"});
  config_->header()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
  auto* box = new QVBoxLayout(this);
  box->addLayout(form_);
  box->addWidget(new QLabel("<b>Config</b>"));
  box->addWidget(config_, 1);
}

QLabel* RunView::add(const QString& name) {
  auto* value = new QLabel("-");
  value->setTextInteractionFlags(Qt::TextSelectableByMouse);
  value->setWordWrap(true);
  form_->addRow(name, value);
  fields_.emplace_back(name, value);
  return value;
}

QString RunView::field(const QString& name) const {
  for (const auto& [n, label] : fields_)
    if (n == name) return label->text();
  return {};
}

void RunView::refresh(const client::RunState& state) {
  auto set = [this](const QString& name, const QString& text) {
    for (auto& [n, label] : fields_)
      if (n == name && label->text() != text) label->setText(text);
  };
  const auto& info = state.info();
  set("status", state.status() == client::RunStatus::kLost ? QString::fromStdString(state.lost_text())
                                                           : QString(client::to_string(state.status())));
  if (!info) return;
  set("name", QString::fromStdString(info->name));
  set("plugin", QString::fromStdString(info->plugin + " " + info->plugin_version));
  set("manifest", QString::fromStdString(info->manifest));
  set("world", QString("%1 rank%2 on %3 node%4")
                   .arg(info->world_size)
                   .arg(info->world_size == 1 ? "" : "s")
                   .arg(info->num_nodes)
                   .arg(info->num_nodes == 1 ? "" : "s"));
  set("started", QDateTime::fromMSecsSinceEpoch(static_cast<qint64>(info->start_time * 1000)).toString(Qt::ISODate));
  const bool running = state.status() == client::RunStatus::kRunning;
  const double end = running ? std::max(state.latest_wall_time(), QDateTime::currentMSecsSinceEpoch() / 1000.0)
                             : state.latest_wall_time();
  set("elapsed", duration_text(end - info->start_time));
  set("step", info->total_steps > 0 ? QString("%1 / %2").arg(state.latest_step()).arg(info->total_steps)
                                    : QString::number(state.latest_step()));
  const double sps = state.seconds_per_step();
  set("speed", sps > 0 ? QString("%1 steps/s").arg(1.0 / sps, 0, 'f', 1) : "-");
  set("ETA", running ? duration_text(state.eta_seconds()) : "-");
  if (info->config_yaml != shown_config_) {
    shown_config_ = info->config_yaml;
    config_->clear();
    try {
      const YAML::Node root = YAML::Load(info->config_yaml);
      if (root.IsMap())
        for (const auto& kv : root)
          add_yaml(config_->invisibleRootItem(), QString::fromStdString(kv.first.as<std::string>()), kv.second);
    } catch (const YAML::Exception& e) {
      new QTreeWidgetItem(config_, {"(config does not parse)", QString::fromStdString(e.what())});
    }
  }
}

}  // namespace gantry::monitor
