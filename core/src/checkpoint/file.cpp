#include "checkpoint/file.hpp"

#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "gantry/errors.hpp"
#include "files/files.hpp"
#include "gantry/version.hpp"

#include <yaml-cpp/yaml.h>

namespace gantry {

namespace {

constexpr int64_t kFormatVersion = 1;

using GenericDict = c10::impl::GenericDict;

torch::Tensor bytes_tensor(const std::string& bytes) {
  auto t = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(t.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  return t;
}

std::string tensor_bytes(const torch::Tensor& t) {
  const auto c = t.contiguous();
  return std::string(reinterpret_cast<const char*>(c.data_ptr<uint8_t>()), c.numel());
}

// CRC32 over every entry but "checksum": keys sorted, scalars as text,
// tensors as their bytes; nested dicts likewise. `legacy`: as gantry
// computed it until December 2026, when an empty tensor restarted the sum
// (zlib's crc32 of a null buffer is 0): a file of then is still read; its
// checksum covers what came after its last empty tensor.
uint32_t content_crc(const GenericDict& d, uint32_t crc = 0, bool legacy = false) {
  std::vector<std::string> keys;
  for (const auto& e : d) keys.push_back(e.key().toStringRef());
  std::sort(keys.begin(), keys.end());
  auto feed = [&](const void* p, size_t n) {
    // zlib's crc32 with a null buffer returns 0, the initial value: an empty
    // tensor's (data_ptr null) would drop everything fed before it.
    if (n == 0 && !legacy) return;
    crc = static_cast<uint32_t>(crc32(crc, static_cast<const Bytef*>(p), static_cast<uInt>(n)));
  };
  for (const auto& k : keys) {
    if (k == "checksum") continue;
    feed(k.data(), k.size());
    const auto& v = d.at(k);
    if (v.isTensor()) {
      const auto t = v.toTensor().contiguous();
      feed(t.data_ptr(), t.numel() * t.element_size());
    } else if (v.isGenericDict()) {
      crc = content_crc(v.toGenericDict(), crc, legacy);
    } else if (v.isString()) {
      feed(v.toStringRef().data(), v.toStringRef().size());
    } else if (v.isInt()) {
      const int64_t x = v.toInt();
      feed(&x, sizeof x);
    }
  }
  return crc;
}

std::string crc_text(uint32_t crc) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "crc32:%08x", crc);
  return buf;
}

// A file that is not gantry's: when it is Lightning's (its pickle holds the
// key "pytorch-lightning_version"), the message says so, with the version
// (pickle's BINUNICODE: 'X', a 4-byte little-endian length, the text).
std::string not_ours(const std::string& path, const std::string& bytes, const std::string& why) {
  const std::string key = "pytorch-lightning_version";
  const size_t at = bytes.find(key);
  if (at == std::string::npos) return "checkpoint " + path + why;
  std::string version;
  for (size_t i = at + key.size(); i < at + key.size() + 16 && i + 5 < bytes.size() && version.empty(); ++i) {
    if (bytes[i] != 'X') continue;
    const uint32_t n = uint8_t(bytes[i + 1]) | uint8_t(bytes[i + 2]) << 8 | uint8_t(bytes[i + 3]) << 16 |
                       uint32_t(uint8_t(bytes[i + 4])) << 24;
    if (n > 0 && n < 32 && i + 5 + n <= bytes.size()) version = bytes.substr(i + 5, n);
  }
  return "checkpoint " + path + " is a Lightning checkpoint" +
         (version.empty() ? std::string() : " (pytorch-lightning " + version + ")") +
         ", not a gantry checkpoint: gantry resumes, samples and serves the checkpoints it writes "
         "(Lightning's load_from_checkpoint reads gantry's, not the other way)";
}

GenericDict read_dict(const std::string& path) {
  std::string bytes;
  try {
    bytes = read_file(path, UINT64_MAX, "checkpoint");
  } catch (const Error& e) {
    throw CheckpointError(e.what());
  }
  try {
    const torch::IValue v = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
    if (!v.isGenericDict()) throw CheckpointError(not_ours(path, bytes, ": not a gantry checkpoint"));
    auto d = v.toGenericDict();
    if (!d.contains("format_version") || !d.contains("state_dict"))
      throw CheckpointError(not_ours(path, bytes, ": not a gantry checkpoint (no format_version)"));
    const std::string want = d.contains("checksum") ? d.at("checksum").toStringRef() : "";
    const std::string got = crc_text(content_crc(d));
    if (want != got && want != crc_text(content_crc(d, 0, true)))
      throw CheckpointError("checkpoint " + path + " is corrupt: checksum " + got + ", the file says " +
                            (want.empty() ? "none" : want));
    return d;
  } catch (const c10::Error& e) {
    throw CheckpointError(
        not_ours(path, bytes, std::string(" is corrupt or truncated: ") + e.what_without_backtrace()));
  }
}

std::string get_string(const GenericDict& d, const char* key) {
  return d.contains(key) && d.at(key).isString() ? d.at(key).toStringRef() : std::string();
}

int64_t get_int(const GenericDict& d, const char* key, const std::string& path) {
  if (!d.contains(key) || !d.at(key).isInt()) throw CheckpointError("checkpoint " + path + ": missing '" + key + "'");
  return d.at(key).toInt();
}

// Lightning's `hyper_parameters`: the system section of the resolved config
// (the plugin's own keys), numbers, booleans, strings and lists of them, so
// that LightningModule.load_from_checkpoint can build the module from it.
GenericDict hyper_parameters(const std::string& config_yaml) {
  GenericDict out(c10::StringType::get(), c10::AnyType::get());
  YAML::Node system;
  try {
    system = YAML::Load(config_yaml)["system"];
  } catch (const YAML::Exception&) {
    return out;
  }
  auto scalar = [](const YAML::Node& n) -> torch::IValue {
    int64_t i = 0;
    double d = 0;
    bool b = false;
    if (n.Tag() == "?" && YAML::convert<int64_t>::decode(n, i)) return i;
    if (n.Tag() == "?" && YAML::convert<double>::decode(n, d)) return d;
    if (n.Tag() == "?" && YAML::convert<bool>::decode(n, b)) return b;
    return n.Scalar();
  };
  if (!system.IsMap()) return out;
  for (const auto& kv : system) {
    const std::string key = kv.first.Scalar();
    if (key == "plugin") continue;
    if (kv.second.IsScalar()) {
      out.insert(key, scalar(kv.second));
    } else if (kv.second.IsSequence()) {
      c10::impl::GenericList list(c10::AnyType::get());
      for (const auto& x : kv.second)
        if (x.IsScalar()) list.push_back(scalar(x));
      out.insert(key, list);
    }
  }
  return out;
}

}  // namespace

GlobalRngGuard::GlobalRngGuard(torch::Device device) : device_(device), cpu_(generator_state(torch::kCPU)) {
  if (device_.is_cuda()) device_state_ = generator_state(device_);
}

GlobalRngGuard::~GlobalRngGuard() {
  set_generator_state(torch::kCPU, cpu_);
  if (device_state_.defined()) set_generator_state(device_, device_state_);
}

std::string shape_str(const torch::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

torch::Tensor generator_state(torch::Device device) {
  auto gen = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_generator_state(torch::Device device, const torch::Tensor& state) {
  auto gen = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

void save_checkpoint(const std::string& path, const std::vector<NamedModule>& modules,
                     const std::vector<NamedOptimizer>& optimizers, const TrainState& state, const CheckpointMeta& meta,
                     const std::vector<torch::Tensor>& rng_states, const std::vector<torch::Tensor>& cuda_rng_states) {
  // Saved contiguous whatever the layout in memory (trainer.weight_layout):
  // the file is the same either way, and loading copies into any layout.
  c10::Dict<std::string, torch::Tensor> state_dict;
  for (const auto& m : modules) {
    for (const auto& p : m.module->named_parameters())
      state_dict.insert(m.name + "." + p.key(), p.value().detach().cpu().contiguous());
    for (const auto& b : m.module->named_buffers())
      state_dict.insert(m.name + "." + b.key(), b.value().detach().cpu().contiguous());
  }
  c10::Dict<std::string, torch::Tensor> optim_states;
  for (const auto& o : optimizers) {
    torch::serialize::OutputArchive archive;
    o.optimizer->save(archive);
    std::ostringstream os;
    archive.save_to(os);
    optim_states.insert(o.name, bytes_tensor(os.str()));
  }
  c10::Dict<std::string, torch::Tensor> rng;
  if (rng_states.empty()) {
    rng.insert("torch_cpu", generator_state(torch::kCPU));
  } else {
    for (size_t r = 0; r < rng_states.size(); ++r)
      rng.insert(r ? "torch_cpu_rank" + std::to_string(r) : std::string("torch_cpu"), rng_states[r]);
  }
  for (size_t r = 0; r < cuda_rng_states.size(); ++r)
    rng.insert(r ? "torch_cuda_rank" + std::to_string(r) : std::string("torch_cuda"), cuda_rng_states[r].cpu());
  GenericDict top(c10::StringType::get(), c10::AnyType::get());
  top.insert("format_version", kFormatVersion);
  top.insert("gantry_version", std::string(GANTRY_VERSION));
  top.insert("plugin", meta.plugin);
  top.insert("plugin_version", meta.plugin_version);
  top.insert("global_step", state.global_step);
  top.insert("epoch", state.epoch);
  top.insert("batch_in_epoch", state.batch_in_epoch);
  top.insert("world_size", static_cast<int64_t>(std::max<size_t>(1, rng_states.size())));
  top.insert("config", meta.config_yaml);
  top.insert("state_dict", state_dict);
  top.insert("optimizer_states", optim_states);
  top.insert("rng_states", rng);
  c10::Dict<std::string, torch::Tensor> trainer_state;
  for (const auto& [key, t] : state.extra) trainer_state.insert(key, t.detach().cpu().contiguous());
  top.insert("trainer_state", trainer_state);
  // Lightning's own keys: the layout above is Lightning 2.0's (no migration
  // applies to it), and the module's constructor arguments.
  top.insert("pytorch-lightning_version", std::string("2.0.0"));
  top.insert("hyper_parameters", hyper_parameters(meta.config_yaml));
  top.insert("checksum", crc_text(content_crc(top)));
  const std::vector<char> bytes = torch::pickle_save(top);
  try {
    write_file_atomic(path, std::string(bytes.begin(), bytes.end()));
  } catch (const Error& e) {
    throw CheckpointError(e.what());
  }
}

void fork_checkpoint(const std::string& from, const std::string& to, uint64_t seed) {
  GenericDict d = read_dict(from);
  const auto was = d.at("rng_states").toGenericDict();
  c10::Dict<std::string, torch::Tensor> rng;
  for (const auto& e : was) {
    const std::string key = e.key().toStringRef();
    if (key.rfind("torch_cpu", 0) != 0) continue;  // CUDA states: dropped (seeded by trainer.seed on load)
    const uint64_t rank = key == "torch_cpu" ? 0 : std::stoull(key.substr(std::string("torch_cpu_rank").size()));
    auto gen = at::detail::createCPUGenerator(seed + rank);
    std::lock_guard<std::mutex> lock(gen.mutex());
    rng.insert(key, gen.get_state());
  }
  d.insert_or_assign("rng_states", rng);
  d.insert_or_assign("checksum", crc_text(content_crc(d)));
  const std::vector<char> bytes = torch::pickle_save(d);
  try {
    write_file_atomic(to, std::string(bytes.begin(), bytes.end()));
  } catch (const Error& e) {
    throw CheckpointError(e.what());
  }
}

CheckpointFile::CheckpointFile(std::string path, GenericDict dict) : path_(std::move(path)), dict_(std::move(dict)) {
  meta_ = {get_string(dict_, "plugin"), get_string(dict_, "plugin_version"), get_string(dict_, "config"),
           get_int(dict_, "global_step", path_),
           dict_.contains("world_size") ? get_int(dict_, "world_size", path_) : 0};
}

std::shared_ptr<const CheckpointFile> CheckpointFile::read(const std::string& path) {
  return std::make_shared<const CheckpointFile>(path, read_dict(path));
}

CheckpointMeta read_checkpoint_meta(const std::string& path) { return CheckpointFile::read(path)->meta(); }

TrainState load_checkpoint(const std::string& path, const std::string& plugin, const std::vector<NamedModule>& modules,
                           const std::vector<NamedOptimizer>& optimizers, bool restore_rng, int rank,
                           torch::Device device, CheckpointMeta* meta) {
  const auto file = CheckpointFile::read(path);
  if (meta) *meta = file->meta();
  return file->load(plugin, modules, optimizers, restore_rng, rank, device);
}

TrainState CheckpointFile::train_state() const {
  const GenericDict& d = dict_;
  const std::string& path = path_;
  TrainState s;
  s.global_step = get_int(d, "global_step", path);
  s.epoch = get_int(d, "epoch", path);
  s.batch_in_epoch = get_int(d, "batch_in_epoch", path);
  if (d.contains("trainer_state") && d.at("trainer_state").isGenericDict())
    for (const auto& e : d.at("trainer_state").toGenericDict()) s.extra[e.key().toStringRef()] = e.value().toTensor();
  return s;
}

TrainState CheckpointFile::load(const std::string& plugin, const std::vector<NamedModule>& modules,
                                const std::vector<NamedOptimizer>& optimizers, bool restore_rng, int rank,
                                torch::Device device) const {
  const GenericDict& d = dict_;
  const std::string& path = path_;
  const std::string& file_plugin = meta_.plugin;
  if (file_plugin != plugin)
    throw CheckpointError("checkpoint " + path + " was written by plugin '" + file_plugin +
                          "', this run uses plugin '" + plugin + "'");
  const auto sd = d.at("state_dict").toGenericDict();
  torch::NoGradGuard no_grad;
  // Check everything before changing anything: a mismatch leaves the model as it was.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;
  size_t expected = 0;
  for (const auto& m : modules) {
    auto check = [&](const std::string& key, const torch::Tensor& dst) {
      ++expected;
      if (!sd.contains(key))
        throw CheckpointError("checkpoint " + path + " has no '" + key + "': it was written for another model");
      const torch::Tensor src = sd.at(key).toTensor();
      if (!src.sizes().equals(dst.sizes()))
        throw CheckpointError("checkpoint " + path + ": '" + key + "' has shape " + shape_str(src) +
                              ", the model has " + shape_str(dst));
      copies.emplace_back(dst, src);
    };
    for (const auto& p : m.module->named_parameters()) check(m.name + "." + p.key(), p.value());
    for (const auto& b : m.module->named_buffers()) check(m.name + "." + b.key(), b.value());
  }
  if (sd.size() != expected) {
    for (const auto& entry : sd) {
      const std::string key = entry.key().toStringRef();
      bool known = false;
      for (const auto& m : modules) {
        for (const auto& p : m.module->named_parameters()) known |= (m.name + "." + p.key()) == key;
        for (const auto& b : m.module->named_buffers()) known |= (m.name + "." + b.key()) == key;
      }
      if (!known)
        throw CheckpointError("checkpoint " + path + " has '" + key +
                              "', which the model does not: it was written for another model");
    }
  }
  for (auto& [dst, src] : copies) dst.copy_(src);

  const auto opt_states = d.at("optimizer_states").toGenericDict();
  for (const auto& o : optimizers) {
    if (!opt_states.contains(o.name))
      throw CheckpointError("checkpoint " + path + " has no state for optimizer '" + o.name + "'");
    const std::string bytes = tensor_bytes(opt_states.at(o.name).toTensor());
    try {
      torch::serialize::InputArchive archive;
      archive.load_from(bytes.data(), bytes.size(), device);
      o.optimizer->load(archive);
    } catch (const c10::Error& e) {
      throw CheckpointError("checkpoint " + path + ": optimizer '" + o.name +
                            "' state does not fit: " + e.what_without_backtrace());
    }
  }
  if (restore_rng) {
    const auto rng = d.at("rng_states").toGenericDict();
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    const std::string mine = rank ? "torch_cpu_rank" + std::to_string(rank) : std::string("torch_cpu");
    // A checkpoint from a smaller world has no state for this rank: derive one.
    gen.set_state(rng.contains(mine) ? rng.at(mine).toTensor() : rng.at("torch_cpu").toTensor());
    if (!rng.contains(mine)) gen.set_current_seed(gen.current_seed() + static_cast<uint64_t>(rank));
    const std::string mine_cuda = rank ? "torch_cuda_rank" + std::to_string(rank) : std::string("torch_cuda");
    if (device.is_cuda() && rng.contains(mine_cuda)) set_generator_state(device, rng.at(mine_cuda).toTensor());
  }
  return train_state();
}

}  // namespace gantry
