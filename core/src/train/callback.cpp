#include "train/callback.hpp"

#include <stdexcept>

namespace gantry {

namespace {

bool under(const std::string& key, const std::vector<std::string>& prefixes) {
  for (const auto& p : prefixes)
    if (key.rfind(p, 0) == 0) return true;
  return false;
}

const char* slot_name(CallbackSlot slot) { return kCallbackSlotNames[size_t(slot)]; }

}  // namespace

void Callbacks::add(CallbackSlot slot, std::unique_ptr<Callback> cb) {
  for (const std::string& mine : cb->state_keys()) {
    if (mine.empty()) throw std::logic_error(std::string(slot_name(slot)) + ": an empty state key prefix");
    for (const auto& [other_slot, other] : list_)
      for (const std::string& theirs : other->state_keys())
        if (mine.rfind(theirs, 0) == 0 || theirs.rfind(mine, 0) == 0)
          throw std::logic_error(std::string(slot_name(slot)) + " keeps its state under '" + mine + "', which " +
                                 slot_name(other_slot) + "'s '" + theirs + "' overlaps");
  }
  auto at = std::upper_bound(list_.begin(), list_.end(), slot,
                             [](CallbackSlot s, const auto& entry) { return s < entry.first; });
  list_.emplace(at, slot, std::move(cb));
}

void Callbacks::save_state(FitState& fit, TensorMap& trainer_state) {
  for (auto& [slot, cb] : list_) {
    const std::vector<std::string> prefixes = cb->state_keys();
    if (prefixes.empty()) continue;
    TensorMap state = cb->state(fit);
    for (auto it = trainer_state.begin(); it != trainer_state.end();)
      it = under(it->first, prefixes) ? trainer_state.erase(it) : std::next(it);
    for (auto& [key, t] : state) {
      if (!under(key, prefixes))
        throw std::logic_error(std::string(slot_name(slot)) + ": state key '" + key +
                               "' is under none of its prefixes");
      trainer_state[key] = t;
    }
  }
}

void Callbacks::load_state(FitState& fit, const TensorMap& trainer_state) {
  for (auto& [slot, cb] : list_) {
    const std::vector<std::string> prefixes = cb->state_keys();
    TensorMap mine;
    for (const auto& [key, t] : trainer_state)
      if (under(key, prefixes)) mine[key] = t;
    cb->load(fit, mine);
  }
}

}  // namespace gantry
