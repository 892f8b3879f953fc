// gantry serve's numbers, declared once: the runner's command line adds each
// with these bounds, and serve() checks a ServeOptions built in code against
// the same table (a caller other than the command line gets the same line).
#include <string>
#include <vector>

#include "gantry/engine.hpp"
#include "gantry/errors.hpp"

namespace gantry::engine {

const std::vector<ServeOption>& serve_options() {
  static const std::vector<ServeOption> options = {
      {"--port", "Port (0: a free one, printed)", 0, 65535, &ServeOptions::port},
      {"--max-batch", "Rows of one forward (dynamic batching; 1: off)", 1, int64_t(1) << 20, &ServeOptions::max_batch},
      {"--max-wait-ms", "How long a request waits for others to batch with", 0, 60000, &ServeOptions::max_wait_ms},
      {"--max-n", "Rows one request may ask for", 1, int64_t(1) << 20, &ServeOptions::max_n},
      {"--max-queue", "Requests waiting before 503", 1, int64_t(1) << 20, &ServeOptions::max_queue},
      {"--workers", "Inference threads", 1, 64, &ServeOptions::workers},
      {"--threads", "Intra-op threads (0: LibTorch's default)", 0, 1024, &ServeOptions::threads},
      {"--timeout", "Seconds of a connection's read/write timeout (and of the drain at SIGTERM)", 1, 3600,
       &ServeOptions::timeout_s},
      {"--request-timeout-ms", "A request not answered by then is 504 (0: never)", 0, 3600000,
       &ServeOptions::request_timeout_ms},
      {"--watch-interval-ms", "How often --watch looks (default 1000)", 10, 3600000, &ServeOptions::watch_interval_ms},
  };
  return options;
}

void check_serve_options(const ServeOptions& o) {
  for (const ServeOption& s : serve_options()) {
    const int64_t v = o.*s.field;
    if (v < s.min || v > s.max)
      throw Error(std::string("serve: ") + s.flag + " " + std::to_string(v) + " is not in [" + std::to_string(s.min) +
                  ", " + std::to_string(s.max) + "]");
  }
}

}  // namespace gantry::engine
