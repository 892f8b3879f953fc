#include "data/data_loader.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>

#include "data/image_dataset.hpp"
#include "gantry/errors.hpp"

namespace gantry {

DataLoader::DataLoader(std::shared_ptr<const Dataset> data, LoaderOptions options)
    : data_(std::move(data)), images_(dynamic_cast<const ImageTensorDataset*>(data_.get())), opt_(options) {}

DataLoader::~DataLoader() { stop_worker(); }

int64_t DataLoader::samples_per_rank(int64_t from_sample) const {
  const int64_t n = std::max<int64_t>(0, data_->size() - from_sample);
  const int64_t world = opt_.world_size;
  // DistributedSampler: pad to a multiple of the world size (or drop the rest).
  return opt_.drop_last && n % world ? n / world : (n + world - 1) / world;
}

int64_t DataLoader::batches_per_epoch(int64_t from_sample) const {
  const int64_t per_rank = samples_per_rank(from_sample);
  const int64_t all = opt_.drop_last ? per_rank / opt_.batch_size : (per_rank + opt_.batch_size - 1) / opt_.batch_size;
  return opt_.limit.of(all);
}

torch::Tensor DataLoader::indices(int64_t epoch, int64_t from_sample) const {
  const int64_t n = data_->size();
  from_sample = std::clamp<int64_t>(from_sample, 0, n);
  torch::Tensor order;
  if (opt_.shuffle) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(opt_.seed + static_cast<uint64_t>(epoch));
    order = torch::randperm(n, gen, torch::kInt64);
  } else {
    order = torch::arange(n, torch::kInt64);
  }
  const int64_t total = samples_per_rank(from_sample) * opt_.world_size;
  torch::Tensor rest = order.slice(0, from_sample, n);
  // Pad by wrapping to the permutation's start: from sample 0 that is
  // DistributedSampler's padding, and from k x W x B at the same W it is the
  // same padding at the same positions (what a skip of k batches gives).
  if (total > rest.size(0)) rest = torch::cat({rest, order.slice(0, 0, total - rest.size(0))});
  return rest.slice(0, opt_.rank, total, opt_.world_size).contiguous();
}

void DataLoader::start_epoch(int64_t epoch, int64_t skip, int64_t from_sample) {
  stop_worker();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_.clear();
    error_ = nullptr;
    stop_ = false;
    done_ = false;
  }
  const int64_t last = batches_per_epoch(from_sample), per_rank = samples_per_rank(from_sample);
  worker_ = std::thread(
      [this, order = indices(epoch, from_sample), skip, last, per_rank] { work(order, skip, last, per_rank); });
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
  if (images_) return images_->gather(idx, n, opt_.pin_memory);
  Batch b = data_->get_batch(std::vector<int64_t>(idx, idx + n));
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

void DataLoader::work(torch::Tensor order, int64_t first, int64_t last, int64_t per_rank) {
  try {
    const int64_t* idx = order.data_ptr<int64_t>();
    for (int64_t b = first; b < last; ++b) {
      const int64_t begin = b * opt_.batch_size;
      const int64_t n = std::min(opt_.batch_size, per_rank - begin);
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
