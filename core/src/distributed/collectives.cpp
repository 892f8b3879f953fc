// The group's collectives: the status gather, the small all-reduces (a
// tree over Gloo's point-to-point messages, bit-identical on every rank),
// Gloo's for the rest, a value rank 0 shares; each failure named with the
// verdict (silent_ranks).
#include <torch/csrc/distributed/c10d/comm.hpp>

#include <cstring>

#include "distributed/group_internals.hpp"
#include "gantry/errors.hpp"
#include "runtime/runtime.hpp"

namespace gantry {

using group_detail::seconds;

std::string ProcessGroup::share(const std::string& key, const std::string& value) {
  if (env_.rank == 0) {
    entering();  // the others enter collective() below
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
    return value;
  }
  std::vector<uint8_t> v;
  collective("waiting for rank 0's shared value", [&] { v = store_->get(key); });
  return std::string(v.begin(), v.end());
}

void ProcessGroup::barrier() {
  torch::Tensor t = torch::zeros({1});
  allreduce_sum(t);
}

std::vector<std::string> ProcessGroup::gather_status(const std::string& record) {
  // Fixed slots of bytes (a length, then the record): one gather to rank 0,
  // one message from each other rank, instead of a store key per rank that
  // rank 0 read one request at a time.
  constexpr int64_t kSlot = 1024;
  if (record.size() + 4 > size_t(kSlot))
    throw Error("rank " + std::to_string(env_.rank) + ": a status record of " + std::to_string(record.size()) +
                " bytes (at most " + std::to_string(kSlot - 4) + ")");
  torch::Tensor mine = torch::zeros({kSlot}, torch::kUInt8);
  const uint32_t n = static_cast<uint32_t>(record.size());
  std::memcpy(mine.data_ptr(), &n, 4);
  std::memcpy(static_cast<uint8_t*>(mine.data_ptr()) + 4, record.data(), record.size());
  std::vector<std::vector<torch::Tensor>> all;
  if (env_.rank == 0) {
    all.emplace_back();
    for (int r = 0; r < env_.world_size; ++r) all[0].push_back(torch::empty({kSlot}, torch::kUInt8));
  }
  std::vector<torch::Tensor> in{mine};
  c10d::GatherOptions o;
  o.rootRank = 0;
  o.timeout = timeout_;
  collective("gathering the ranks' status", [&] { pg_->gather(all, in, o)->wait(); });
  std::vector<std::string> out;
  if (env_.rank != 0) return out;
  for (const torch::Tensor& t : all[0]) {
    uint32_t len = 0;
    std::memcpy(&len, t.data_ptr(), 4);
    out.emplace_back(static_cast<const char*>(t.data_ptr()) + 4, std::min<uint32_t>(len, kSlot - 4));
  }
  return out;
}

template <class F>
void ProcessGroup::collective(const char* what, F&& f) {
  entering();
  try {
    f();
  } catch (const std::exception& e) {
    const std::string silent = silent_ranks();
    throw Error("rank " + std::to_string(env_.rank) + ": " + what + " failed: " +
                (silent.empty() ? "another rank died or stopped responding (see its output" : silent + " (") +
                "; timeout " + seconds(timeout_) + "): " + error_text(e));
  }
}

void ProcessGroup::broadcast(const std::vector<torch::Tensor>& tensors) {
  if (tensors.empty()) return;
  collective("broadcast from rank 0", [&] { c10d::broadcast_coalesced(pg_, tensors, 16 * 1024 * 1024, 0); });
}

bool ProcessGroup::small(const torch::Tensor& t) const {
  return env_.world_size > 1 && t.numel() > 0 && t.device().is_cpu() && t.is_contiguous() && !t.is_sparse() &&
         int64_t(t.numel()) * int64_t(t.element_size()) <= kSmallAllreduceBytes;
}

// Recursive doubling. With p the largest power of two <= N, ranks p..N-1
// first hand their value to rank r - p and at the end get the result back
// from it; ranks 0..p-1 exchange with rank r ^ 1, r ^ 2, ..., r ^ p/2, each
// round both partners combining the same two operands (a + b == b + a in
// IEEE arithmetic, and max is symmetric), so every rank ends with the same
// bits. Per rank: log2(p) rounds (+2 for the ranks folded in), one message
// each way a round; Gloo's ring takes 2(N-1) steps one after another.
// Messages go through Gloo's unbound buffers under plain tags (its
// collectives' slots carry a prefix byte above bit 56: no clash); the tag
// holds `seq` and the round.
void ProcessGroup::tree_allreduce(torch::Tensor& t, Op op, uint32_t seq) {
  const int n = env_.world_size, r = env_.rank;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const auto tag = [seq](int round) { return int((1u << 30) | ((seq & 0xFFFFFFu) << 6) | uint32_t(round)); };
  torch::Tensor other = torch::empty_like(t);
  const auto combine = [&] {
    if (op == Op::kSum)
      t.add_(other);
    else
      t.copy_(torch::maximum(t, other));
  };
  const auto send = [&](int to, int round) {
    std::vector<torch::Tensor> v{t};
    return pg_->send(v, to, tag(round));
  };
  const auto recv = [&](int from, int round) {
    std::vector<torch::Tensor> v{other};
    return pg_->recv(v, from, tag(round));
  };
  if (r >= p) {  // folded in: hand over, then receive the result
    send(r - p, 0)->wait();
    std::vector<torch::Tensor> v{t};
    pg_->recv(v, r - p, tag(63))->wait();
    return;
  }
  if (r + p < n) {
    recv(r + p, 0)->wait();
    combine();
  }
  int round = 1;
  for (int mask = 1; mask < p; mask *= 2, ++round) {
    const int partner = r ^ mask;
    auto in = recv(partner, round);
    auto out = send(partner, round);
    out->wait();
    in->wait();
    combine();
  }
  if (r + p < n) send(r + p, 63)->wait();
}

void ProcessGroup::allreduce_sum(torch::Tensor& t) {
  collective("all-reduce", [&] {
    if (small(t)) return tree_allreduce(t, Op::kSum, small_seq_++);
    std::vector<torch::Tensor> v{t};
    pg_->allreduce(v)->wait();
  });
}

std::function<void()> ProcessGroup::allreduce_max_async(torch::Tensor& t) {
  if (small(t)) {
    const uint32_t seq = small_seq_++;
    std::shared_future<void> done;
    collective("all-reduce", [&] {
      if (!worker_) worker_ = std::make_unique<Worker>();
      done = worker_->post([this, t, seq]() mutable { tree_allreduce(t, Op::kMax, seq); });
    });
    return [this, done] { collective("all-reduce", [&] { done.get(); }); };
  }
  std::vector<torch::Tensor> v{t};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  c10::intrusive_ptr<c10d::Work> work;
  collective("all-reduce", [&] { work = pg_->allreduce(v, o); });
  return [this, work] { collective("all-reduce", [&] { work->wait(); }); };
}

std::vector<torch::Tensor> ProcessGroup::allgather(const torch::Tensor& t) {
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int r = 0; r < env_.world_size; ++r) out[0].push_back(torch::empty_like(t));
  std::vector<torch::Tensor> in{t.contiguous()};
  collective("all-gather", [&] { pg_->allgather(out, in)->wait(); });
  return out[0];
}

void ProcessGroup::allreduce_max(torch::Tensor& t) {
  collective("all-reduce", [&] {
    if (small(t)) return tree_allreduce(t, Op::kMax, small_seq_++);
    std::vector<torch::Tensor> v{t};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::MAX;
    pg_->allreduce(v, o)->wait();
  });
}

}  // namespace gantry
