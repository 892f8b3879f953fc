#include "serve/swap.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "gantry/errors.hpp"
#include "runtime/runtime.hpp"
#include "serve/parse.hpp"

namespace gantry::serve {

namespace fs = std::filesystem;

namespace {

// What --watch compares: the checkpoint a directory resolves to, and its file's time and size.
struct Seen {
  std::string path;
  fs::file_time_type time{};
  uintmax_t size = 0;
  bool operator==(const Seen& o) const { return path == o.path && time == o.time && size == o.size; }
};

Seen seen(const std::string& path) {
  std::error_code ec;
  Seen s{path, fs::last_write_time(path, ec), 0};
  s.size = fs::file_size(path, ec);
  return s;
}

}  // namespace

void watch_for_checkpoints(ModelSlot& slot, Metrics& metrics, const std::string& dir, const std::string& plugin,
                           int64_t interval_ms) {
  Seen current = seen(slot.current()->checkpoint);
  Seen refused;
  while (!stop_requested()) {
    for (int64_t waited = 0; waited < interval_ms && !stop_requested(); waited += 20)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (stop_requested()) return;
    // The file the directory means now, compared by name, time and size
    // before anything is read.
    const std::vector<std::string> candidates = checkpoint_candidates(dir, CheckpointUse::kInference);
    if (candidates.empty()) continue;  // between a run's start and its first checkpoint
    Seen now = seen(candidates.front());
    if (now == current || now == refused) continue;
    ResolvedCheckpoint resolved;
    try {
      resolved = resolve_checkpoint(dir, CheckpointUse::kInference);
    } catch (const std::exception&) {
      continue;
    }
    if (!resolved.found()) continue;
    if (resolved.path !=
        now.path) {  // the first does not read (a file renamed in whole never will): the next that does
      refused = now;
      now = seen(resolved.path);
    }
    if (now == current || now == refused) continue;
    const std::shared_ptr<ServedModel> old = slot.current();
    try {
      std::shared_ptr<ServedModel> fresh;
      {
        std::lock_guard lock(slot.rng);
        fresh = std::make_shared<ServedModel>(resolved, plugin);
      }
      if (fresh->input_shape != old->input_shape || fresh->output_shape != old->output_shape)
        throw Error("it maps " + shape_json(fresh->input_shape) + " -> " + shape_json(fresh->output_shape) +
                    ", the served one " + shape_json(old->input_shape) + " -> " + shape_json(old->output_shape));
      slot.set(fresh);
      ++metrics.swaps;
      current = now;
      std::printf("serve: --watch: now serving %s (step %ld; was %s, step %ld)\n", now.path.c_str(),
                  long(fresh->step()), old->checkpoint.c_str(), long(old->step()));
    } catch (const std::exception& e) {
      refused = now;
      std::printf("serve: --watch: not swapping in %s: %s; still serving %s\n", now.path.c_str(), error_text(e).c_str(),
                  old->checkpoint.c_str());
    }
    std::fflush(stdout);
  }
}

}  // namespace gantry::serve
