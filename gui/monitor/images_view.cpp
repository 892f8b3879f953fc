#include "images_view.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QImage>
#include <QLabel>
#include <QMessageBox>
#include <QPixmap>
#include <QPushButton>
#include <QScrollArea>
#include <QSlider>
#include <QVBoxLayout>

namespace gantry::monitor {

ImagesView::ImagesView(QWidget* parent) : QWidget(parent) {
  slider_ = new QSlider(Qt::Horizontal);
  slider_->setObjectName("image_step");
  slider_->setRange(0, 0);
  slider_->setEnabled(false);
  follow_ = new QCheckBox("follow latest");
  follow_->setChecked(true);
  zoom_ = new QComboBox;
  zoom_->addItems({"fit", "1x", "2x", "4x"});
  zoom_->setCurrentIndex(0);
  save_ = new QPushButton("Save PNG...");
  caption_ = new QLabel("no image yet");
  picture_ = new QLabel;
  picture_->setAlignment(Qt::AlignCenter);
  picture_->setMinimumSize(64, 64);
  auto* scroll = new QScrollArea;
  scroll->setWidget(picture_);
  scroll->setWidgetResizable(true);
  scroll->setAlignment(Qt::AlignCenter);

  auto* controls = new QHBoxLayout;
  controls->addWidget(slider_, 1);
  controls->addWidget(follow_);
  controls->addWidget(zoom_);
  controls->addWidget(save_);
  auto* box = new QVBoxLayout(this);
  box->addWidget(caption_);
  box->addWidget(scroll, 1);
  box->addLayout(controls);

  connect(slider_, &QSlider::valueChanged, this, [this](int v) {
    if (state_ && state_->images().empty()) return;
    // Moving the slider off the newest grid stops following.
    if (state_ && v != static_cast<int>(state_->images().size()) - 1) follow_->setChecked(false);
    show_index(v);
  });
  connect(follow_, &QCheckBox::toggled, this, [this](bool on) {
    if (on && state_ && !state_->images().empty()) slider_->setValue(static_cast<int>(state_->images().size()) - 1);
  });
  connect(zoom_, &QComboBox::currentIndexChanged, this, [this] { show_index(current_); });
  connect(save_, &QPushButton::clicked, this, [this] {
    if (current_ < 0) return;
    const QString path =
        QFileDialog::getSaveFileName(this, "Save image", QString("step_%1.png").arg(current_step()), "PNG (*.png)");
    if (!path.isEmpty() && !save_current(path)) QMessageBox::warning(this, "Save image", "cannot write " + path);
  });
}

int64_t ImagesView::current_step() const {
  if (!state_ || current_ < 0 || current_ >= static_cast<int>(state_->images().size())) return -1;
  return state_->images()[static_cast<size_t>(current_)].step;
}

bool ImagesView::save_current(const QString& path) const {
  if (!state_ || current_ < 0 || current_ >= static_cast<int>(state_->images().size())) return false;
  const std::string& png = state_->images()[static_cast<size_t>(current_)].png;
  QFile f(path);
  return f.open(QIODevice::WriteOnly | QIODevice::Truncate) &&
         f.write(png.data(), static_cast<qint64>(png.size())) == static_cast<qint64>(png.size()) && f.flush();
}

void ImagesView::refresh(const client::RunState& state) {
  state_ = &state;
  if (state.version() == drawn_version_) return;
  drawn_version_ = state.version();
  const int n = static_cast<int>(state.images().size());
  const QSignalBlocker block(slider_);
  slider_->setEnabled(n > 1);
  slider_->setRange(0, std::max(0, n - 1));
  int want = current_;
  if (follow_->isChecked() || want < 0 || want >= n) want = n - 1;
  slider_->setValue(std::max(0, want));
  if (want != current_ || (want >= 0 && caption_->text().startsWith("no image"))) show_index(want);
}

void ImagesView::resizeEvent(QResizeEvent* e) {
  QWidget::resizeEvent(e);
  if (current_ >= 0 && zoom_->currentIndex() == 0) show_index(current_);  // "fit" follows the size
}

void ImagesView::show_index(int i) {
  if (!state_ || i < 0 || i >= static_cast<int>(state_->images().size())) {
    current_ = -1;
    picture_->clear();
    caption_->setText("no image yet");
    return;
  }
  current_ = i;
  const wire::Image& img = state_->images()[static_cast<size_t>(i)];
  QImage image;
  if (!image.loadFromData(reinterpret_cast<const uchar*>(img.png.data()), static_cast<int>(img.png.size()), "PNG")) {
    caption_->setText(QString("step %1: the PNG does not decode").arg(img.step));
    picture_->clear();
    return;
  }
  QPixmap pm = QPixmap::fromImage(image);
  const int z = zoom_->currentIndex();
  if (z == 0) {  // fit the view, whole pixels where possible (keeps the grid crisp)
    const QSize room = picture_->parentWidget() ? picture_->parentWidget()->size() : picture_->size();
    const int k =
        std::max(1, std::min(room.width() / std::max(1, pm.width()), room.height() / std::max(1, pm.height())));
    pm = pm.scaled(pm.size() * k, Qt::KeepAspectRatio, Qt::FastTransformation);
  } else {
    pm = pm.scaled(pm.size() * (1 << (z - 1)), Qt::KeepAspectRatio, Qt::FastTransformation);
  }
  picture_->setPixmap(pm);
  caption_->setText(QString("%1 at step %2   (%3 of %4)")
                        .arg(QString::fromStdString(img.tag))
                        .arg(img.step)
                        .arg(i + 1)
                        .arg(state_->images().size()));
}

}  // namespace gantry::monitor
