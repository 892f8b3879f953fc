// A c10d::Store that counts the requests it forwards to the real one (the
// rendezvous TCPStore on rank 0): every request is one round trip to rank 0's
// store thread, so these counts are the job's control traffic through the
// store, gantry's own and Gloo's (its PrefixStore wraps this one).
// docs/scaling.md reports them per rank at start-up and per logged step.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/version.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace gantry {

struct StoreCounts {
  std::atomic<int64_t> set{0}, get{0}, add{0}, check{0}, wait{0}, other{0};
  int64_t total() const { return set + get + add + check + wait + other; }
  std::string text() const {
    return std::to_string(total()) + " (set " + std::to_string(set) + ", get " + std::to_string(get) + ", add " +
           std::to_string(add) + ", check " + std::to_string(check) + ", wait " + std::to_string(wait) +
           (other ? ", other " + std::to_string(other) : "") + ")";
  }
};

class CountingStore final : public c10d::Store {
 public:
  CountingStore(c10::intrusive_ptr<c10d::Store> inner, std::shared_ptr<StoreCounts> counts)
      : c10d::Store(inner->getTimeout()), inner_(std::move(inner)), counts_(std::move(counts)) {}

  const StoreCounts& counts() const { return *counts_; }

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    ++counts_->set;
    inner_->set(key, value);
  }
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& current,
                                  const std::vector<uint8_t>& value) override {
    ++counts_->other;
    return inner_->compareSet(key, current, value);
  }
  std::vector<uint8_t> get(const std::string& key) override {
    ++counts_->get;
    return inner_->get(key);
  }
  int64_t add(const std::string& key, int64_t value) override {
    ++counts_->add;
    return inner_->add(key, value);
  }
  bool deleteKey(const std::string& key) override {
    ++counts_->other;
    return inner_->deleteKey(key);
  }
  bool check(const std::vector<std::string>& keys) override {
    ++counts_->check;
    return inner_->check(keys);
  }
  int64_t getNumKeys() override {
    ++counts_->other;
    return inner_->getNumKeys();
  }
  void wait(const std::vector<std::string>& keys) override {
    ++counts_->wait;
    inner_->wait(keys);
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    ++counts_->wait;
    inner_->wait(keys, timeout);
  }
  const std::chrono::milliseconds& getTimeout() const noexcept override { return inner_->getTimeout(); }
  void setTimeout(const std::chrono::milliseconds& timeout) override { inner_->setTimeout(timeout); }

#if TORCH_VERSION_MAJOR >= 2
  c10::intrusive_ptr<c10d::Store> clone() override {
    return c10::make_intrusive<CountingStore>(inner_->clone(), counts_);
  }
  void append(const std::string& key, const std::vector<uint8_t>& value) override {
    ++counts_->other;
    inner_->append(key, value);
  }
  std::vector<std::vector<uint8_t>> multiGet(const std::vector<std::string>& keys) override {
    ++counts_->get;
    return inner_->multiGet(keys);
  }
  void multiSet(const std::vector<std::string>& keys, const std::vector<std::vector<uint8_t>>& values) override {
    ++counts_->set;
    inner_->multiSet(keys, values);
  }
  bool hasExtendedApi() const override { return inner_->hasExtendedApi(); }
#endif

 private:
  c10::intrusive_ptr<c10d::Store> inner_;
  std::shared_ptr<StoreCounts> counts_;
};

}  // namespace gantry
