// GradSync: DDP's gradient average, through c10d's Reducer over Gloo or
// NCCL (buckets in DDP's order and sizes, fp16 compression), or through a
// shared-memory segment when every rank is on one host (trainer.grad_transport).
#include <unistd.h>

#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <type_traits>

#include "distributed/distributed.hpp"
#include "distributed/shm_allreduce.hpp"
#include "gantry/errors.hpp"

namespace gantry {

namespace {

#if TORCH_VERSION_MAJOR >= 2
// c10d::Reducer's constructor grew trailing arguments during 2.x (2.15 has
// skip_all_reduce_unused_params, use_python_reducer and the caps to rebuild
// buckets with; earlier 2.x releases end at first_bucket_bytes_cap): the
// longest form this LibTorch has, with DDP's defaults. A template, so that
// only the chosen branch is compiled.
template <class R>
std::shared_ptr<R> new_reducer(std::vector<at::Tensor> params, std::vector<std::vector<size_t>> buckets,
                               c10::intrusive_ptr<c10d::ProcessGroup> group, std::vector<bool> sparse,
                               int64_t first_bucket, int64_t bucket) {
  using Names = std::unordered_map<size_t, std::string>;
  using Group = c10::intrusive_ptr<c10d::ProcessGroup>;
  using Tensors = std::vector<at::Tensor>;
  using Buckets = std::vector<std::vector<size_t>>;
  if constexpr (std::is_constructible_v<R, Tensors, Buckets, Group, std::vector<bool>, int64_t, bool, bool, Names,
                                        int64_t, bool, bool, std::vector<int64_t>>) {
    return std::make_shared<R>(std::move(params), std::move(buckets), std::move(group), std::move(sparse), bucket,
                               /*find_unused_parameters=*/false, /*gradient_as_bucket_view=*/false, Names{},
                               first_bucket, /*skip_all_reduce_unused_params=*/false,
                               /*use_python_reducer=*/false, std::vector<int64_t>{first_bucket, bucket});
  } else if constexpr (std::is_constructible_v<R, Tensors, Buckets, Group, std::vector<bool>, int64_t, bool, bool,
                                               Names, int64_t, bool, bool>) {
    return std::make_shared<R>(std::move(params), std::move(buckets), std::move(group), std::move(sparse), bucket,
                               false, false, Names{}, first_bucket, false, false);
  } else if constexpr (std::is_constructible_v<R, Tensors, Buckets, Group, std::vector<bool>, int64_t, bool, bool,
                                               Names, int64_t, bool>) {
    return std::make_shared<R>(std::move(params), std::move(buckets), std::move(group), std::move(sparse), bucket,
                               false, false, Names{}, first_bucket, false);
  } else {
    return std::make_shared<R>(std::move(params), std::move(buckets), std::move(group), std::move(sparse), bucket,
                               false, false, Names{}, first_bucket);
  }
}
#endif

}  // namespace

GradSync::GradSync(ProcessGroup& pg, std::vector<torch::Tensor> params, Transport transport, bool fp16)
    : params_(params), pg_(&pg), world_(pg.world_size()) {
  bool float_cpu = true;
  size_t count = 0;
  for (const auto& p : params_) {
    float_cpu = float_cpu && p.device().is_cpu() && p.scalar_type() == torch::kFloat;
    count += static_cast<size_t>(p.numel());
  }
  if (transport == Transport::kShm && float_cpu) {
    // Rank 0 creates the segment under a random name, then shares the name;
    // the others open it. Every rank says whether it could; only if all could
    // is it used (a rank may see another /dev/shm, e.g. in a container), else
    // all fall back to Gloo together. Rank 0 removes the name at once either
    // way: nothing is left in /dev/shm, whatever happens to the job later.
    const int id = pg.next_id();
    const double timeout_s = std::chrono::duration<double>(pg.timeout()).count();
    std::unique_ptr<ShmAllreduce> shm;
    std::string why;
    std::string name;
    // The segment's bound: rank 0's, shared with the name ("name budget").
    size_t budget = ShmAllreduce::kSegmentBudget;
    if (pg.rank() == 0) {
      if (const char* mib = std::getenv("GANTRY_SHM_SEGMENT_MIB"); mib && std::atoll(mib) > 0)
        budget = size_t(std::atoll(mib)) << 20;
      std::random_device rd;
      name = "/gantry-" + std::to_string(::getpid()) + "-" + std::to_string(rd()) + "-" + std::to_string(id);
      try {
        shm = std::make_unique<ShmAllreduce>(name, 0, pg.world_size(), count, true, timeout_s, 5.0, budget);
        name += " " + std::to_string(budget);
      } catch (const Error& e) {
        why = e.what();
        name.clear();
      }
    }
    name = pg.share("gantry/shm/" + std::to_string(id), name);
    if (pg.rank() != 0 && !name.empty()) {
      const size_t space = name.find(' ');
      budget = size_t(std::stoull(name.substr(space + 1)));
      name.resize(space);
      try {
        shm = std::make_unique<ShmAllreduce>(name, pg.rank(), pg.world_size(), count, false, timeout_s, 5.0, budget);
      } catch (const Error& e) {
        why = e.what();
      }
    }
    torch::Tensor ready = torch::full({1}, shm ? 1.0f : 0.0f);
    pg.allreduce_sum(ready);
    if (pg.rank() == 0 && shm) shm->unlink();
    if (ready.item<float>() == static_cast<float>(pg.world_size())) {
      shm_ = std::move(shm);
      return;
    }
    if (!why.empty())
      std::fprintf(stderr, "rank %d: %s; gradients are averaged with Gloo instead\n", pg.rank(), why.c_str());
  }
  constexpr int64_t kFirstBucket = 1024 * 1024, kBucket = 25 * 1024 * 1024;  // DDP's defaults
  const std::vector<bool> sparse(params.size(), false);
  auto [buckets, limits] =
      c10d::compute_bucket_assignment_by_size(params, {size_t(kFirstBucket), size_t(kBucket)}, sparse);
  // Gradients become ready last layer first: reduce the buckets in that order (as DDP does).
  std::reverse(buckets.begin(), buckets.end());
  std::reverse(limits.begin(), limits.end());
#if TORCH_VERSION_MAJOR >= 2
  // 2.x takes no per-bucket limits (they are the buckets' own).
  (void)limits;
  reducer_ =
      new_reducer<c10d::Reducer>(std::move(params), std::move(buckets), pg.group(), sparse, kFirstBucket, kBucket);
#else
  reducer_ = std::make_shared<c10d::Reducer>(
      std::move(params), std::move(buckets), std::move(limits), pg.group(), sparse, kBucket,
      /*find_unused_parameters=*/false,
      /*gradient_as_bucket_view=*/false, std::unordered_map<size_t, std::string>{}, kFirstBucket);
#endif
  if (fp16) reducer_->register_builtin_comm_hook(c10d::BuiltinCommHookType::FP16_COMPRESS);
  // Each gradient's arrival time (a hook before the Reducer's on the same
  // accumulation; the shared counter outlives this object with the hooks).
  for (const auto& p : params_)
    p.register_hook([last = last_gradient_](const torch::Tensor&) {
      const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
      int64_t seen = last->load(std::memory_order_relaxed);
      while (seen < now && !last->compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
      }
    });
}

GradSync::~GradSync() = default;

void GradSync::prepare() {
  pg_->entering();
  if (reducer_) reducer_->prepare_for_backward({});
}

void GradSync::finish() {
  if (!shm_) return;
  torch::NoGradGuard no_grad;
  // The exchange's elements: each parameter's gradient in the parameter's
  // own memory order (a transposed weight stays transposed:
  // trainer.weight_layout), one parameter after another, so the copies are
  // straight memory copies, not transposes. Every rank lays its parameters
  // out alike, so the slots line up element for element. They go through the
  // segment a chunk at a time (ShmAllreduce::chunk(): all of them unless many
  // ranks share the host); each element is summed in the same order either way.
  std::vector<torch::Tensor> in, out;  // dense, in the parameter's layout
  in.reserve(params_.size());
  out.reserve(params_.size());
  for (auto& p : params_) {
    const bool dense = p.is_non_overlapping_and_dense();
    auto laid_out = [&] {
      return dense ? torch::empty_strided(p.sizes(), p.strides(), p.options())
                   : torch::empty_like(p, at::MemoryFormat::Contiguous);
    };
    const auto fits = [&](const torch::Tensor& t) {
      return t.defined() && t.scalar_type() == torch::kFloat && t.device().is_cpu() &&
             (dense ? t.strides() == p.strides() && t.is_non_overlapping_and_dense() : t.is_contiguous());
    };
    const torch::Tensor g = p.grad();
    if (fits(g))
      in.push_back(g);
    else if (g.defined())
      in.push_back(laid_out().copy_(g));
    else
      in.push_back(laid_out().zero_());  // no gradient on this rank: it contributes zeros
    if (!fits(g)) p.mutable_grad() = laid_out();
    out.push_back(p.grad());
  }
  // Copies elements [from, from + n) of the parameters' gradients to or from `at`.
  auto copy = [](std::vector<torch::Tensor>& ts, size_t from, size_t n, float* at, bool to_segment) {
    size_t off = 0;
    for (const auto& t : ts) {
      const size_t len = static_cast<size_t>(t.numel());
      const size_t a = std::max(from, off), b = std::min(from + n, off + len);
      if (a < b) {
        float* mine = t.data_ptr<float>() + (a - off);
        if (to_segment)
          std::memcpy(at + (a - from), mine, (b - a) * sizeof(float));
        else
          std::memcpy(mine, at + (a - from), (b - a) * sizeof(float));
      }
      off += len;
      if (off >= from + n) break;
    }
  };
  const size_t count = shm_->count(), chunk = shm_->chunk();
  for (size_t from = 0; from < count; from += chunk) {
    const size_t n = std::min(chunk, count - from);
    copy(in, from, n, shm_->slot(), true);
    shm_->run(1.0f / static_cast<float>(world_), n);
    copy(out, from, n, const_cast<float*>(shm_->result()), false);
  }
}

}  // namespace gantry
