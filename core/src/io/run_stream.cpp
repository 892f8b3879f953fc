#include "io/run_stream.hpp"

#include <cstdio>
#include <filesystem>

#include "gantry/errors.hpp"
#include "io/run_dir.hpp"

namespace gantry {

RunStream::RunStream(const std::string& run_dir) {
  const std::string path = (std::filesystem::path(run_dir) / kLogName).string();
  log_path_ = path;
  // Continue the sequence of an existing log (a resumed run). A torn last
  // record from a crash is cut off first, so appends follow intact records;
  // a damaged record in the middle stays where it is (every reader skips it)
  // and the intact records after it are kept.
  const wire::Replay old = wire::replay(path);
  if (old.torn_tail) std::filesystem::resize_file(path, old.valid_bytes);
  if (!old.corrupt.empty())
    std::fprintf(stderr, "warning: %s: %s; the %zu intact records are kept\n", path.c_str(),
                 wire::describe(old.corrupt).c_str(), old.frames.size());
  if (!old.frames.empty()) seq_ = wire::decode(old.frames.back()).seq;
  try {
    log_ = std::make_unique<wire::RecordWriter>(path);
  } catch (const std::exception& e) {
    throw Error(e.what());
  }
  const std::string tb = tensorboard_dir(run_dir);
  std::error_code ec;
  std::filesystem::create_directories(tb, ec);
  if (ec) throw Error("cannot create " + tb + ": " + ec.message());
  tb_ = std::make_unique<TfEventsWriter>(tb);
}

RunStream::~RunStream() = default;

std::string RunStream::serve(const std::string& host, int port, const std::string& token, const std::string& run_name) {
  const std::string t = token.empty() ? random_token() : token;
  server_ = std::make_unique<StreamServer>(host, port, t, log_path_, run_name, seq_);
  return "gantry-monitor " + host + ":" + std::to_string(server_->port()) + " --token " + t;
}

void RunStream::send(wire::Payload payload) {
  wire::Message m;
  m.seq = ++seq_;
  const bool image = std::holds_alternative<wire::Image>(payload);
  const std::string tag = image ? std::get<wire::Image>(payload).tag : std::string();
  m.payload = std::move(payload);
  std::string frame = wire::encode(m);
  log_->append(frame);  // the log first: a client's backfill reads it
  if (server_) server_->publish(std::move(frame), m.seq, image, tag);
}

void RunStream::run_info(wire::RunInfo info) { send(std::move(info)); }

void RunStream::scalars(int64_t step, double wall_time, const std::vector<std::pair<std::string, double>>& values) {
  wire::Scalars s;
  for (const auto& [name, v] : values) {
    s.points.push_back({step, wall_time, name, v});
    tb_->scalar(name, v, step, wall_time);
  }
  send(std::move(s));
}

void RunStream::image(const std::string& tag, int64_t step, double wall_time, const std::string& png, int width,
                      int height, int channels) {
  send(wire::Image{tag, step, wall_time, static_cast<uint32_t>(width), static_cast<uint32_t>(height), png});
  tb_->image(tag, png, width, height, channels, step, wall_time);
}

void RunStream::rank_status(wire::RankStatus status) { send(std::move(status)); }

void RunStream::event(const std::string& kind, int64_t step, double wall_time, const std::string& text) {
  send(wire::Event{kind, step, wall_time, text});
}

void RunStream::flush() { tb_->flush(); }

}  // namespace gantry
