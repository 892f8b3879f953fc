#include "connect_dialog.hpp"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QVBoxLayout>
#include <stdexcept>

namespace gantry::monitor {

ConnectDialog::ConnectDialog(const QStringList& recent, QWidget* parent) : QDialog(parent) {
  setWindowTitle("Connect to a run");
  input_ = new QComboBox;
  input_->setEditable(true);
  input_->addItems(recent);
  input_->setMinimumWidth(520);
  input_->lineEdit()->setPlaceholderText("monitor: gantry-monitor 127.0.0.1:PORT --token TOKEN");
  error_ = new QLabel;
  error_->setStyleSheet("color: #b00000");
  error_->setWordWrap(true);
  auto* browse = new QPushButton("Open run directory...");
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
  buttons->addButton(browse, QDialogButtonBox::ActionRole);
  auto* box = new QVBoxLayout(this);
  box->addWidget(
      new QLabel("Paste the line the runner printed (also in RUN_DIR/monitor.txt), "
                 "HOST:PORT --token TOKEN, or a run directory:"));
  box->addWidget(input_);
  box->addWidget(error_);
  box->addWidget(buttons);
  connect(buttons, &QDialogButtonBox::accepted, this, &ConnectDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &ConnectDialog::reject);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, "Run directory");
    if (!dir.isEmpty()) input_->setCurrentText(dir);
  });
}

QString ConnectDialog::text() const { return input_->currentText().trimmed(); }

void ConnectDialog::accept() {
  try {
    target_ = client::parse_target(text().toStdString());
  } catch (const std::invalid_argument& e) {
    error_->setText(QString::fromStdString(e.what()));
    return;
  }
  QDialog::accept();
}

}  // namespace gantry::monitor
