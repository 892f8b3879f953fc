#include "data/data_loader.hpp"

#include <torch/torch.h>

#include <cstring>

#include "config/errors.hpp"

namespace gantry {

DataLoader::DataLoader(const ImageDataset& data, LoaderOptions options) : data_(&data), opt_(options) {
  const int64_t n = size();
  const int64_t world = opt_.world_size;
  // DistributedSampler: pad to a multiple of the world size (or drop the rest).
  per_rank_ = opt_.drop_last && n % world ? n / world : (n + world - 1) / world;
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> data, LoaderOptions options)
    : own_(std::move(data)), opt_(options) {
  const int64_t n = size();
  const int64_t world = opt_.world_size;
  per_rank_ = opt_.drop_last && n % world ? n / world : (n + world - 1) / world;
}

int64_t DataLoader::size() const { return data_ ? data_->size() : own_->size(); }

DataLoader::~DataLoader() { stop_worker(); }

int64_t DataLoader::batches_per_epoch() const {
  return opt_.drop_last ? per_rank_ / opt_.batch_size
                        : (per_rank_ + opt_.batch_size - 1) / opt_.batch_size;
}

torch::Tensor DataLoader::indices(int64_t epoch) const {
  const int64_t n = size();
  torch::Tensor order;
  if (opt_.shuffle) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(opt_.seed + static_cast<uint64_t>(epoch));
    order = torch::randperm(n, gen, torch::kInt64);
  } else {
    order = torch::arange(n, torch::kInt64);
  }
  const int64_t total = per_rank_ * opt_.world_size;
  if (total > n) order = torch::cat({order, order.slice(0, 0, total - n)});  // pad by wrapping
  return order.slice(0, opt_.rank, total, opt_.world_size).contiguous();
}

void DataLoader::start_epoch(int64_t epoch, int64_t skip) {
  stop_worker();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_.clear();
    error_ = nullptr;
    stop_ = false;
    done_ = false;
  }
  const int64_t last = batches_per_epoch();
  worker_ = std::thread([this, order = indices(epoch), skip, last] { work(order, skip, last); });
}

void DataLoader::stop_worker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

Batch DataLoader::make_batch(const int64_t* idx, int64_t n) const {
  // A plain gather + scale loop: no ATen parallel region on this thread, so it
  // never competes with the training thread's intra-op pool.
  if (own_) {
    Batch b = own_->get_batch(std::vector<int64_t>(idx, idx + n));
    if (!b.input.defined() || b.input.dim() < 1 || b.input.size(0) != n)
      throw DataError("the system's dataset returned a batch of " +
                      (b.input.defined() && b.input.dim() > 0 ? std::to_string(b.input.size(0)) : std::string("no")) +
                      " samples for " + std::to_string(n) + " indices");
    b.struct_size = sizeof(Batch);
    if (opt_.pin_memory) {
      if (b.input.device().is_cpu() && !b.input.is_pinned()) b.input = b.input.pin_memory();
      if (b.target.defined() && b.target.device().is_cpu() && !b.target.is_pinned()) b.target = b.target.pin_memory();
    }
    return b;
  }
  const auto& images = data_->images;
  const int64_t sample = images.numel() / images.size(0);
  std::vector<int64_t> shape = images.sizes().vec();
  shape[0] = n;
  Batch b;
  b.input = torch::empty(shape, torch::TensorOptions(torch::kFloat32).pinned_memory(opt_.pin_memory));
  const uint8_t* src = images.data_ptr<uint8_t>();
  float* dst = b.input.data_ptr<float>();
  const float scale = static_cast<float>((opt_.high - opt_.low) / 255.0);
  const float offset = static_cast<float>(opt_.low);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* s = src + idx[i] * sample;
    float* d = dst + i * sample;
    for (int64_t j = 0; j < sample; ++j) d[j] = static_cast<float>(s[j]) * scale + offset;
  }
  if (data_->labels.defined()) {
    b.target = torch::empty({n}, torch::TensorOptions(torch::kInt64).pinned_memory(opt_.pin_memory));
    const int64_t* l = data_->labels.data_ptr<int64_t>();
    int64_t* t = b.target.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) t[i] = l[idx[i]];
  }
  return b;
}

void DataLoader::work(torch::Tensor order, int64_t first, int64_t last) {
  try {
    const int64_t* idx = order.data_ptr<int64_t>();
    for (int64_t b = first; b < last; ++b) {
      const int64_t begin = b * opt_.batch_size;
      const int64_t n = std::min(opt_.batch_size, per_rank_ - begin);
      Batch batch = make_batch(idx + begin, n);
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || static_cast<int64_t>(ready_.size()) < opt_.prefetch; });
      if (stop_) return;
      ready_.push_back(std::move(batch));
      cv_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(mu_);
  done_ = true;
  cv_.notify_all();
}

std::optional<Batch> DataLoader::next() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !ready_.empty() || done_ || error_; });
  if (error_) std::rethrow_exception(error_);
  if (ready_.empty()) return std::nullopt;
  Batch b = std::move(ready_.front());
  ready_.pop_front();
  cv_.notify_all();
  return b;
}

}  // namespace gantry
