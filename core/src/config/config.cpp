// Experiment config loading and validation. Sections:
//   1. the schema: every option key bound to its struct member
//   2. overrides: "a.b=value" applied to the YAML tree
//   3. load/parse: walk the tree, reject unknown keys, convert types
//   4. validate: ranges and choices, in one place
//   5. SystemParams: the plugin's typed view of `system:`
#include "config/config.hpp"

#include "config/files.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>

#include "config/errors.hpp"

namespace gantry {

// ---- 1. schema --------------------------------------------------------------

namespace {

struct Field {
  std::string key;
  const char* type;  // for messages: "an integer", "a number", ...
  std::function<void(ExperimentConfig&, const YAML::Node&)> set;
  std::function<YAML::Node(const ExperimentConfig&)> get;
};

template <class T>
const char* type_name();
template <>
const char* type_name<int64_t>() { return "an integer"; }
template <>
const char* type_name<double>() { return "a finite number"; }
template <>
const char* type_name<bool>() { return "true or false"; }
template <>
const char* type_name<std::string>() { return "a string (quote yes/no/on/off to mean the text)"; }

// A plain (unquoted) scalar that YAML 1.1 reads as a boolean: `host: Off`
// is a string to yaml-cpp but almost surely not what the user meant.
bool plain_boolean(const YAML::Node& n) {
  bool b = false;
  return n.Tag() == "?" && YAML::convert<bool>::decode(n, b);
}

template <class T>
T convert_option(const YAML::Node& n) {
  if constexpr (std::is_same_v<T, std::string>) {
    if (plain_boolean(n)) throw YAML::TypedBadConversion<std::string>(n.Mark());
  }
  T v = n.as<T>();
  if constexpr (std::is_same_v<T, double>) {
    if (!std::isfinite(v)) throw YAML::TypedBadConversion<double>(n.Mark());
  }
  return v;
}

template <class T, class Section>
Field option_field(std::string key, Section ExperimentConfig::*section, T Section::*member) {
  return Field{std::move(key), type_name<T>(),
               [section, member](ExperimentConfig& c, const YAML::Node& n) {
                 (c.*section).*member = convert_option<T>(n);
               },
               [section, member](const ExperimentConfig& c) {
                 return YAML::Node((c.*section).*member);
               }};
}

const std::vector<Field>& schema() {
  static const std::vector<Field> fields = [] {
    using E = ExperimentConfig;
    std::vector<Field> f;
    f.push_back(Field{"name", "a string",
                      [](E& c, const YAML::Node& n) { c.name = convert_option<std::string>(n); },
                      [](const E& c) { return YAML::Node(c.name); }});
    f.push_back(option_field("system.plugin", &E::system, &SystemOptions::plugin));
    f.push_back(option_field("data.format", &E::data, &DataOptions::format));
    f.push_back(option_field("data.path", &E::data, &DataOptions::path));
    f.push_back(option_field("data.train_prefix", &E::data, &DataOptions::train_prefix));
    f.push_back(option_field("data.val_prefix", &E::data, &DataOptions::val_prefix));
    f.push_back(option_field("data.batch_size", &E::data, &DataOptions::batch_size));
    f.push_back(option_field("data.shuffle", &E::data, &DataOptions::shuffle));
    f.push_back(option_field("data.drop_last", &E::data, &DataOptions::drop_last));
    f.push_back(option_field("data.prefetch", &E::data, &DataOptions::prefetch));
    f.push_back(option_field("trainer.max_epochs", &E::trainer, &TrainerOptions::max_epochs));
    f.push_back(option_field("trainer.max_steps", &E::trainer, &TrainerOptions::max_steps));
    f.push_back(option_field("trainer.max_time", &E::trainer, &TrainerOptions::max_time));
    f.push_back(option_field("trainer.seed", &E::trainer, &TrainerOptions::seed));
    f.push_back(option_field("trainer.log_every_n_steps", &E::trainer, &TrainerOptions::log_every_n_steps));
    f.push_back(
        option_field("trainer.image_every_n_steps", &E::trainer, &TrainerOptions::image_every_n_steps));
    f.push_back(
        option_field("trainer.val_every_n_epochs", &E::trainer, &TrainerOptions::val_every_n_epochs));
    f.push_back(option_field("trainer.accelerator", &E::trainer, &TrainerOptions::accelerator));
    f.push_back(option_field("trainer.devices", &E::trainer, &TrainerOptions::devices));
    f.push_back(option_field("trainer.num_nodes", &E::trainer, &TrainerOptions::num_nodes));
    f.push_back(option_field("trainer.threads", &E::trainer, &TrainerOptions::threads));
    f.push_back(option_field("trainer.out_dir", &E::trainer, &TrainerOptions::out_dir));
    f.push_back(option_field("trainer.progress", &E::trainer, &TrainerOptions::progress));
    f.push_back(option_field("trainer.resume", &E::trainer, &TrainerOptions::resume));
    f.push_back(option_field("trainer.dist_timeout", &E::trainer, &TrainerOptions::dist_timeout));
    f.push_back(option_field("trainer.grad_compression", &E::trainer, &TrainerOptions::grad_compression));
    f.push_back(option_field("trainer.broadcast_buffers", &E::trainer, &TrainerOptions::broadcast_buffers));
    f.push_back(option_field("trainer.fused_adam", &E::trainer, &TrainerOptions::fused_adam));
    f.push_back(option_field("trainer.grad_transport", &E::trainer, &TrainerOptions::grad_transport));
    f.push_back(option_field("trainer.step_in_backward", &E::trainer, &TrainerOptions::step_in_backward));
    f.push_back(option_field("trainer.weight_layout", &E::trainer, &TrainerOptions::weight_layout));
    f.push_back(option_field("trainer.huge_pages", &E::trainer, &TrainerOptions::huge_pages));
    f.push_back(option_field("trainer.gradient_clip_val", &E::trainer, &TrainerOptions::gradient_clip_val));
    f.push_back(
        option_field("trainer.gradient_clip_algorithm", &E::trainer, &TrainerOptions::gradient_clip_algorithm));
    f.push_back(option_field("trainer.precision", &E::trainer, &TrainerOptions::precision));
    f.push_back(option_field("trainer.read_metrics", &E::trainer, &TrainerOptions::read_metrics));
    f.push_back(option_field("trainer.cuda_graphs", &E::trainer, &TrainerOptions::cuda_graphs));
    f.push_back(option_field("ema.decay", &E::ema, &EmaOptions::decay));
    f.push_back(option_field("ema.modules", &E::ema, &EmaOptions::modules));
    f.push_back(option_field("metrics.quality_every_n_steps", &E::metrics, &MetricsOptions::quality_every_n_steps));
    f.push_back(option_field("metrics.quality_classifier", &E::metrics, &MetricsOptions::quality_classifier));
    f.push_back(option_field("metrics.quality_samples", &E::metrics, &MetricsOptions::quality_samples));
    f.push_back(option_field("metrics.quality_batch_size", &E::metrics, &MetricsOptions::quality_batch_size));
    f.push_back(option_field("metrics.quality_seed", &E::metrics, &MetricsOptions::quality_seed));
    f.push_back(option_field("checkpoint.every_n_steps", &E::checkpoint, &CheckpointOptions::every_n_steps));
    f.push_back(option_field("checkpoint.keep_last", &E::checkpoint, &CheckpointOptions::keep_last));
    f.push_back(option_field("monitor.enabled", &E::monitor, &MonitorOptions::enabled));
    f.push_back(option_field("monitor.host", &E::monitor, &MonitorOptions::host));
    f.push_back(option_field("monitor.port", &E::monitor, &MonitorOptions::port));
    f.push_back(option_field("monitor.token", &E::monitor, &MonitorOptions::token));
    f.push_back(option_field("slurm.partition", &E::slurm, &SlurmOptions::partition));
    f.push_back(option_field("slurm.time", &E::slurm, &SlurmOptions::time));
    f.push_back(option_field("slurm.mem", &E::slurm, &SlurmOptions::mem));
    f.push_back(option_field("slurm.cpus_per_task", &E::slurm, &SlurmOptions::cpus_per_task));
    f.push_back(option_field("slurm.account", &E::slurm, &SlurmOptions::account));
    f.push_back(option_field("slurm.signal", &E::slurm, &SlurmOptions::signal));
    f.push_back(option_field("slurm.template", &E::slurm, &SlurmOptions::template_path));
    f.push_back(option_field("slurm.array_parallel", &E::slurm, &SlurmOptions::array_parallel));
    return f;
  }();
  return fields;
}

// `optimizers.<name>.<key>`: one field per key of OptimizerOptions.
struct OptimizerField {
  std::string key;
  std::string type;
  std::function<void(OptimizerOptions&, const YAML::Node&)> set;
  std::function<YAML::Node(const OptimizerOptions&)> get;
};

template <class T>
OptimizerField optimizer_field(std::string key, T OptimizerOptions::*member) {
  return OptimizerField{std::move(key), type_name<T>(),
                        [member](OptimizerOptions& o, const YAML::Node& n) { o.*member = convert_option<T>(n); },
                        [member](const OptimizerOptions& o) { return YAML::Node(o.*member); }};
}

const std::vector<OptimizerField>& optimizer_schema() {
  static const std::vector<OptimizerField> fields = {
      optimizer_field("gradient_clip_val", &OptimizerOptions::gradient_clip_val),
      optimizer_field("gradient_clip_algorithm", &OptimizerOptions::gradient_clip_algorithm),
      optimizer_field("scheduler", &OptimizerOptions::scheduler),
      optimizer_field("interval", &OptimizerOptions::interval),
      optimizer_field("warmup", &OptimizerOptions::warmup),
      optimizer_field("step_size", &OptimizerOptions::step_size),
      optimizer_field("gamma", &OptimizerOptions::gamma),
      optimizer_field("min_lr", &OptimizerOptions::min_lr),
  };
  return fields;
}

std::vector<std::string> schema_keys() {
  std::vector<std::string> keys;
  for (const auto& f : schema()) keys.push_back(f.key);
  return keys;
}

std::string scalar_text(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

// ---- 2. overrides -----------------------------------------------------------

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream ss(key);
  std::string part;
  while (std::getline(ss, part, '.')) parts.push_back(part);
  return parts;
}

void check_tree(const YAML::Node& root, const std::string& source);

void apply_override(YAML::Node root, const std::string& text, ExperimentConfig& cfg) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("command line override '" + text + "': expected key=value, e.g. trainer.max_steps=100");
  const std::string key = text.substr(0, eq);
  const std::string value_text = text.substr(eq + 1);
  const auto parts = split_key(key);
  if (std::any_of(parts.begin(), parts.end(), [](const std::string& p) { return p.empty(); }))
    throw ConfigError("command line override '" + text + "': '" + key + "' is not a valid key");
  YAML::Node value;
  try {
    value = value_text.empty() ? YAML::Node(std::string()) : YAML::Load(value_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError("command line override '" + text + "': cannot parse the value: " + e.msg);
  }
  check_tree(value, "command line override '" + key + "=...'");
  // Walk down with fresh Node handles: operator= on a yaml-cpp Node that
  // aliases another rebinds it, so use reset() to move along the path.
  YAML::Node node;
  node.reset(root);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node child = node[parts[i]];
    if (child.IsDefined() && !child.IsMap() && !child.IsNull())
      throw ConfigError("command line override '" + text + "': '" + parts[i] + "' is not a section");
    if (!child.IsDefined() || child.IsNull()) node[parts[i]] = YAML::Node(YAML::NodeType::Map);
    YAML::Node next = node[parts[i]];
    node.reset(next);
  }
  node[parts.back()] = value;
  cfg.origins[key] = "command line '" + text + "'";
}

// ---- 3. load / parse --------------------------------------------------------

bool is_ip_address(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 || ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

std::string file_line(const std::string& source, const YAML::Node& n) {
  const auto m = n.Mark();
  if (m.is_null() || source.empty()) return source.empty() ? "<config>" : source;
  return source + ":" + std::to_string(m.line + 1);
}

// The top-level sections: `trainer: {}` is an empty section, but
// `trainer.max_steps: {}` is a map where a value belongs (a type error).
bool is_section(const std::string& key) {
  for (const auto& f : schema())
    if (f.key.size() > key.size() && f.key.compare(0, key.size(), key) == 0 && f.key[key.size()] == '.')
      return true;
  return key == "system" || key == "optimizers" ||
         (key.rfind("optimizers.", 0) == 0 && key.find('.', 11) == std::string::npos);
}

void flatten(const YAML::Node& node, const std::string& prefix,
             std::vector<std::pair<std::string, YAML::Node>>& out) {
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string key = prefix + it->first.as<std::string>();
    if (it->second.IsMap() && (it->second.size() > 0 || is_section(key)))
      flatten(it->second, key + ".", out);
    else
      out.emplace_back(key, it->second);
  }
}

// Before anything walks the tree: a config is small, so bound what it may
// expand to (aliases are shared nodes that every walk visits again: ten
// levels of ten aliases are 10^10 nodes in ~1 KB), its depth, and refuse a
// key given twice in one mapping (yaml-cpp keeps both; the last would win).
constexpr size_t kMaxConfigNodes = 100000;
constexpr int kMaxConfigDepth = 32;

void check_tree(const YAML::Node& node, const std::string& source, int depth, size_t& count) {
  if (++count > kMaxConfigNodes)
    throw ConfigError(source + ": the YAML expands to more than " + std::to_string(kMaxConfigNodes) +
                      " nodes (aliases of aliases?): an experiment config is far smaller");
  if (depth > kMaxConfigDepth)
    throw ConfigError(file_line(source, node) + ": the YAML nests deeper than " +
                      std::to_string(kMaxConfigDepth) + " levels");
  if (node.IsSequence()) {
    for (const auto& e : node) check_tree(e, source, depth + 1, count);
  } else if (node.IsMap()) {
    std::map<std::string, YAML::Mark> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (!it->first.IsScalar())
        throw ConfigError(file_line(source, it->first) + ": a key must be a plain name, got '" +
                          scalar_text(it->first) + "'");
      const auto [at, fresh] = seen.emplace(it->first.Scalar(), it->first.Mark());
      if (!fresh)
        throw ConfigError(file_line(source, it->first) + ": key '" + it->first.Scalar() +
                          "' appears twice in one mapping (first at line " + std::to_string(at->second.line + 1) +
                          "): remove one");
      check_tree(it->second, source, depth + 1, count);
    }
  }
}

void check_tree(const YAML::Node& root, const std::string& source) {
  size_t count = 0;
  check_tree(root, source, 0, count);
}

void set_optimizer_option(ExperimentConfig& cfg, const std::string& key, const YAML::Node& node) {
  const auto parts = split_key(key);
  std::vector<std::string> known;
  for (const auto& f : optimizer_schema()) known.push_back(f.key);
  if (parts.size() != 3) {
    const std::string near = parts.size() == 2 ? nearest_key(parts[1], known) : "";
    throw ConfigError(cfg.where(key) + ": '" + key + "' is not optimizers.<optimizer>.<key>" +
                      (near.empty() ? "" : " (is '" + parts[1] + "' meant as a key? give the optimizer: optimizers.<name>." +
                                               near + ")"));
  }
  const OptimizerField* field = nullptr;
  for (const auto& f : optimizer_schema())
    if (f.key == parts[2]) field = &f;
  if (!field) {
    const std::string near = nearest_key(parts[2], known);
    throw ConfigError(cfg.where(key) + ": unknown key '" + key + "'" +
                      (near.empty() ? "" : "; did you mean 'optimizers." + parts[1] + "." + near + "'?"));
  }
  if (!node.IsScalar())
    throw ConfigError(cfg.where(key) + ": " + key + " must be " + field->type + ", got '" + scalar_text(node) + "'");
  try {
    field->set(cfg.optimizers[parts[1]], node);
  } catch (const YAML::Exception&) {
    throw ConfigError(cfg.where(key) + ": " + key + " must be " + field->type + ", got '" + node.Scalar() + "'");
  }
}

ExperimentConfig from_tree(const YAML::Node& root, const std::string& source,
                           const std::vector<std::string>& overrides) {
  ExperimentConfig cfg;
  cfg.source = source;
  if (!root.IsMap() && !root.IsNull())
    throw ConfigError(source + ": an experiment config is a YAML mapping of sections "
                      "(name, system, data, trainer, checkpoint)");
  YAML::Node tree = root.IsNull() ? YAML::Node(YAML::NodeType::Map) : YAML::Clone(root);
  // Remember where each file key was (Clone drops marks; overrides replace nodes).
  std::vector<std::pair<std::string, YAML::Node>> file_leaves;
  if (root.IsMap()) flatten(root, "", file_leaves);
  for (const auto& [key, node] : file_leaves) cfg.origins[key] = file_line(source, node);
  // A key given twice is an error, as a duplicate key in the YAML file is
  // (not "the last one wins" silently).
  std::map<std::string, std::string> given;
  for (const auto& o : overrides) {
    const std::string key = o.substr(0, o.find('='));
    if (const auto it = given.find(key); it != given.end() && o.find('=') != std::string::npos)
      throw ConfigError("command line: '" + key + "' is given twice ('" + it->second + "', then '" + o +
                        "'): give each key once");
    given.emplace(key, o);
    apply_override(tree, o, cfg);
  }

  std::vector<std::pair<std::string, YAML::Node>> leaves;
  flatten(tree, "", leaves);
  std::map<std::string, const Field*> by_key;
  for (const auto& f : schema()) by_key[f.key] = &f;
  cfg.system_params = YAML::Node(YAML::NodeType::Map);
  for (const auto& [key, node] : leaves) {
    if (key.rfind("system.", 0) == 0 && key != "system.plugin") {
      cfg.system_params[key.substr(7)] = node;  // the plugin checks its own keys
      continue;
    }
    if (key.rfind("optimizers.", 0) == 0) {
      set_optimizer_option(cfg, key, node);
      continue;
    }
    const auto f = by_key.find(key);
    if (f == by_key.end()) {
      const std::string near = nearest_key(key, schema_keys());
      throw ConfigError(cfg.where(key) + ": unknown key '" + key + "'" +
                        (near.empty() ? "" : "; did you mean '" + near + "'?"));
    }
    if (!node.IsScalar())
      throw ConfigError(cfg.where(key) + ": " + key + " must be " + f->second->type + ", got '" +
                        scalar_text(node) + "'");
    try {
      f->second->set(cfg, node);
    } catch (const YAML::Exception&) {
      throw ConfigError(cfg.where(key) + ": " + key + " must be " + f->second->type + ", got '" +
                        node.Scalar() + "'");
    }
  }

  // Lightning's rule: a run given only max_steps or max_time is not also cut
  // at the default epoch count.
  if (!cfg.origins.count("trainer.max_epochs") && (cfg.trainer.max_steps > 0 || !cfg.trainer.max_time.empty()))
    cfg.trainer.max_epochs = -1;

  // The split names each data.format uses unless told otherwise.
  if (cfg.data.format == "cifar10") {
    if (!cfg.origins.count("data.train_prefix")) cfg.data.train_prefix = "data_batch";
    if (!cfg.origins.count("data.val_prefix")) cfg.data.val_prefix = "test_batch";
  } else if (cfg.data.format == "image_folder") {
    if (!cfg.origins.count("data.val_prefix")) cfg.data.val_prefix = "val";
  }

  // ---- 4. validate ----
  auto check = [&](bool ok, const std::string& key, const std::string& what) {
    if (!ok) {
      const auto f = by_key.at(key);
      throw ConfigError(cfg.where(key) + ": " + key + " must be " + what + ", got '" +
                        scalar_text(f->get(cfg)) + "'");
    }
  };
  const auto& t = cfg.trainer;
  check(!cfg.name.empty() && cfg.name.size() <= 200 && cfg.name.find('/') == std::string::npos &&
            cfg.name != "." && cfg.name != "..",
        "name", "a directory name: 1 to 200 bytes, no '/'");
  check(!cfg.system.plugin.empty(), "system.plugin", "a plugin name or path");
  check(cfg.data.format == "idx" || cfg.data.format == "image_folder" || cfg.data.format == "cifar10",
        "data.format", "one of idx, image_folder, cifar10");
  check(cfg.data.batch_size > 0, "data.batch_size", "> 0");
  check(cfg.data.prefetch >= 1, "data.prefetch", ">= 1");
  check(t.max_epochs == -1 || t.max_epochs > 0, "trainer.max_epochs", "> 0 or -1 (no limit)");
  check(t.max_steps == -1 || t.max_steps > 0, "trainer.max_steps", "> 0 or -1 (no limit)");
  check(t.log_every_n_steps > 0, "trainer.log_every_n_steps", "> 0");
  check(t.image_every_n_steps >= 0, "trainer.image_every_n_steps", ">= 0");
  check(t.val_every_n_epochs >= 0, "trainer.val_every_n_epochs", ">= 0");
  check(t.accelerator == "cpu" || t.accelerator == "cuda" || t.accelerator == "auto",
        "trainer.accelerator", "one of cpu, cuda, auto");
  check(t.precision == "32" || t.precision == "32-true" || t.precision == "bf16-mixed", "trainer.precision",
        "32 or bf16-mixed (16-mixed, fp16 with loss scaling, is not supported: bf16 needs no scaler)");
  check(t.read_metrics == "auto" || t.read_metrics == "every_step" || t.read_metrics == "on_log",
        "trainer.read_metrics", "one of auto, every_step, on_log");
  check(t.devices > 0, "trainer.devices", "> 0");
  check(t.num_nodes > 0, "trainer.num_nodes", "> 0");
  check(t.threads >= 0, "trainer.threads", ">= 0 (0: the cores available)");
  check(!t.out_dir.empty(), "trainer.out_dir", "a directory");
  check(t.progress == "auto" || t.progress == "bar" || t.progress == "lines" || t.progress == "none",
        "trainer.progress", "one of auto, bar, lines, none");
  check(t.dist_timeout > 0, "trainer.dist_timeout", "> 0 seconds");
  check(t.broadcast_buffers == "on_read" || t.broadcast_buffers == "every_step",
        "trainer.broadcast_buffers", "one of on_read, every_step");
  check(t.grad_transport == "auto" || t.grad_transport == "gloo" || t.grad_transport == "shm",
        "trainer.grad_transport", "auto, gloo or shm");
  check(t.weight_layout == "auto" || t.weight_layout == "as_built", "trainer.weight_layout", "auto or as_built");
  check(!(t.grad_transport == "shm" && t.grad_compression == "fp16"), "trainer.grad_compression",
        "none with trainer.grad_transport=shm (fp16 compression is a Gloo hook)");
  check(t.grad_compression == "none" || t.grad_compression == "fp16", "trainer.grad_compression",
        "one of none, fp16");
  check(cfg.monitor.port >= 0 && cfg.monitor.port <= 65535, "monitor.port", "a TCP port, or 0 for a free one");
  check(is_ip_address(cfg.monitor.host), "monitor.host",
        "an IP address to listen on (127.0.0.1, 0.0.0.0 for every interface, ::1)");
  check(cfg.slurm.cpus_per_task >= 0, "slurm.cpus_per_task", ">= 0");
  check(std::regex_match(cfg.slurm.time, std::regex(R"(([0-9]+-)?[0-9]+(:[0-9]+){0,2}|UNLIMITED|unlimited|infinite)")),
        "slurm.time", "a SLURM time limit: MM, HH:MM:SS, D-HH:MM:SS (e.g. 01:00:00)");
  check(std::regex_match(cfg.slurm.mem, std::regex(R"(([0-9]+[KMGT]?)?)")), "slurm.mem",
        "a SLURM memory size such as 32G or 4000M (empty: the default)");
  check(cfg.slurm.array_parallel >= 0, "slurm.array_parallel", ">= 0 (0: no limit)");
  check(std::regex_match(cfg.slurm.signal, std::regex(R"((B:)?(SIG)?[A-Z0-9]+(@[0-9]+)?)")), "slurm.signal",
        "a SLURM --signal value such as USR1@90");
  check(std::regex_match(cfg.slurm.partition, std::regex(R"([A-Za-z0-9_.,-]*)")), "slurm.partition",
        "partition names (letters, digits, _ . - ,)");
  check(std::regex_match(cfg.slurm.account, std::regex(R"([A-Za-z0-9_.-]*)")), "slurm.account",
        "an account name (letters, digits, _ . -)");
  check(t.gradient_clip_val >= 0, "trainer.gradient_clip_val", ">= 0 (0: no clipping)");
  check(t.gradient_clip_algorithm == "norm" || t.gradient_clip_algorithm == "value", "trainer.gradient_clip_algorithm",
        "norm or value");
  for (const auto& [name, o] : cfg.optimizers) {
    auto check_opt = [&](bool ok, const char* key, const std::string& what, const std::string& got) {
      const std::string full = "optimizers." + name + "." + key;
      if (!ok) throw ConfigError(cfg.where(full) + ": " + full + " must be " + what + ", got '" + got + "'");
    };
    check_opt(o.gradient_clip_val >= 0, "gradient_clip_val", ">= 0 (0: no clipping)", std::to_string(o.gradient_clip_val));
    check_opt(o.gradient_clip_algorithm == "norm" || o.gradient_clip_algorithm == "value", "gradient_clip_algorithm",
              "norm or value", o.gradient_clip_algorithm);
    check_opt(o.scheduler == "none" || o.scheduler == "step" || o.scheduler == "cosine" || o.scheduler == "linear",
              "scheduler", "one of none, step, cosine, linear", o.scheduler);
    check_opt(o.interval == "step" || o.interval == "epoch", "interval", "step or epoch", o.interval);
    check_opt(o.warmup >= 0, "warmup", ">= 0", std::to_string(o.warmup));
    check_opt(o.step_size > 0, "step_size", "> 0", std::to_string(o.step_size));
    check_opt(o.gamma > 0, "gamma", "> 0", std::to_string(o.gamma));
    check_opt(o.min_lr >= 0, "min_lr", ">= 0", std::to_string(o.min_lr));
  }
  check(cfg.ema.decay >= 0 && cfg.ema.decay < 1, "ema.decay", "in [0, 1) (0: no EMA; typical: 0.999)");
  const MetricsOptions& m = cfg.metrics;
  check(m.quality_every_n_steps >= 0, "metrics.quality_every_n_steps", ">= 0 (0: no quality score)");
  check(m.quality_every_n_steps == 0 || !m.quality_classifier.empty(), "metrics.quality_classifier",
        "a classifier checkpoint or run directory when metrics.quality_every_n_steps > 0 (train one with "
        "`gantry train configs/classifier_fashion_mnist.yaml`)");
  check(m.quality_samples >= 2, "metrics.quality_samples", ">= 2 (typical: 10000)");
  check(m.quality_batch_size > 0, "metrics.quality_batch_size", "> 0");
  check(cfg.checkpoint.every_n_steps >= 0, "checkpoint.every_n_steps", ">= 0");
  check(cfg.checkpoint.keep_last >= 0, "checkpoint.keep_last", ">= 0 (0: keep all)");
  try {
    (void)t.max_time_seconds();
  } catch (const std::invalid_argument&) {
    check(false, "trainer.max_time", "DD:HH:MM:SS, HH:MM:SS or a number of seconds");
  }
  if (t.max_epochs == -1 && t.max_steps == -1 && t.max_time.empty())
    throw ConfigError(cfg.where("trainer.max_epochs") +
                      ": the run would never end: set trainer.max_epochs, trainer.max_steps or "
                      "trainer.max_time");
  return cfg;
}

}  // namespace

double TrainerOptions::max_time_seconds() const {
  if (max_time.empty()) return 0;
  std::vector<double> parts;
  std::stringstream ss(max_time);
  std::string p;
  while (std::getline(ss, p, ':')) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(p, &used);
    } catch (const std::exception&) {
      throw std::invalid_argument(max_time);
    }
    if (used != p.size() || v < 0 || !std::isfinite(v)) throw std::invalid_argument(max_time);
    parts.push_back(v);
  }
  static const double kUnit[] = {86400, 3600, 60, 1};
  if (parts.size() == 1) return parts[0];
  if (parts.size() < 3 || parts.size() > 4) throw std::invalid_argument(max_time);
  double s = 0;
  const size_t off = 4 - parts.size();
  for (size_t i = 0; i < parts.size(); ++i) s += parts[i] * kUnit[off + i];
  return s;
}

ExperimentConfig ExperimentConfig::load(const std::string& path,
                                        const std::vector<std::string>& overrides) {
  // A YAML experiment is a few KiB; 16 MiB is a wrong path (/dev/zero, a
  // data file), refused in one line before it fills memory.
  std::string text;
  try {
    text = read_file(path, 16u << 20, "config file");
  } catch (const Error& e) {
    throw ConfigError(e.what());
  }
  return parse(text, path, overrides);
}

ExperimentConfig ExperimentConfig::parse(const std::string& yaml_text, const std::string& source,
                                         const std::vector<std::string>& overrides) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(source + ":" + std::to_string(e.mark.line + 1) + ": invalid YAML: " + e.msg);
  }
  if (docs.size() > 1)
    throw ConfigError(file_line(source, docs[1]) +
                      ": a second YAML document (after '---'): an experiment config is one document");
  const YAML::Node root = docs.empty() ? YAML::Node() : docs[0];
  check_tree(root, source);
  return from_tree(root, source, overrides);
}

std::string ExperimentConfig::where(const std::string& key) const {
  const auto it = origins.find(key);
  if (it != origins.end()) return it->second;
  return source.empty() ? "<config>" : source;
}

OptimizerOptions ExperimentConfig::optimizer(const std::string& name) const {
  OptimizerOptions o;
  o.gradient_clip_val = trainer.gradient_clip_val;
  o.gradient_clip_algorithm = trainer.gradient_clip_algorithm;
  const auto it = optimizers.find(name);
  if (it == optimizers.end()) return o;
  // A section's clip keys override the defaults only where the section set them.
  const OptimizerOptions& own = it->second;
  const bool own_clip = origins.count("optimizers." + name + ".gradient_clip_val") > 0;
  const bool own_algo = origins.count("optimizers." + name + ".gradient_clip_algorithm") > 0;
  OptimizerOptions out = own;
  if (!own_clip) out.gradient_clip_val = o.gradient_clip_val;
  if (!own_algo) out.gradient_clip_algorithm = o.gradient_clip_algorithm;
  return out;
}

std::string ExperimentConfig::to_yaml() const {
  YAML::Node root(YAML::NodeType::Map);
  for (const auto& f : schema()) {
    const auto parts = split_key(f.key);
    if (parts.size() == 1)
      root[parts[0]] = f.get(*this);
    else
      root[parts[0]][parts[1]] = f.get(*this);
  }
  for (auto it = system_params.begin(); it != system_params.end(); ++it) {
    YAML::Node sys = root["system"];
    sys[it->first.as<std::string>()] = it->second;
  }
  for (const auto& [name, own] : optimizers) {  // as in effect (the trainer-wide clip defaults applied)
    const OptimizerOptions o = optimizer(name);
    for (const auto& f : optimizer_schema()) root["optimizers"][name][f.key] = f.get(o);
  }
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

std::string nearest_key(const std::string& word, const std::vector<std::string>& candidates) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  // Compare the last component too, so that "trainer.maxsteps" and
  // "max_steps" (missing section) both find trainer.max_steps.
  auto last = [](const std::string& k) { return k.substr(k.rfind('.') + 1); };
  std::string best;
  size_t best_d = std::string::npos;
  for (const auto& c : candidates) {
    const size_t d = std::min(distance(word, c), distance(last(word), last(c)) + 1);
    if (d < best_d) best_d = d, best = c;
  }
  const size_t limit = std::max<size_t>(2, last(word).size() / 3);
  return best_d <= limit ? best : "";
}

// ---- 5. SystemParams --------------------------------------------------------

SystemParams::SystemParams(const ExperimentConfig& cfg) : cfg_(cfg) {
  std::vector<std::pair<std::string, YAML::Node>> leaves;
  flatten(cfg.system_params, "", leaves);
  for (auto& [k, v] : leaves) values_[k] = v;
}

bool SystemParams::has(const std::string& key) const {
  asked_.insert(key);
  const auto it = values_.find(key);
  return it != values_.end() && !it->second.IsNull();
}

const YAML::Node& SystemParams::require(const std::string& key, const char* expected) const {
  asked_.insert(key);
  const auto it = values_.find(key);
  if (it == values_.end() || it->second.IsNull())
    throw std::invalid_argument(cfg_.where("system." + key) + ": system." + key +
                                " is required: set it to " + expected);
  return it->second;
}

void SystemParams::type_error(const std::string& key, const char* expected) const {
  throw std::invalid_argument(cfg_.where("system." + key) + ": system." + key + " must be " +
                              expected + ", got '" + scalar_text(values_.at(key)) + "'");
}

double SystemParams::get_double(const std::string& key) const {
  const auto& n = require(key, "a number");
  double v = 0;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !std::isfinite(v)) type_error(key, "a finite number");
  return v;
}

int64_t SystemParams::get_int(const std::string& key) const {
  const auto& n = require(key, "an integer");
  int64_t v = 0;
  if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v)) type_error(key, "an integer");
  return v;
}

bool SystemParams::get_bool(const std::string& key) const {
  const auto& n = require(key, "true or false");
  bool v = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) type_error(key, "true or false");
  return v;
}

std::string SystemParams::get_string(const std::string& key) const {
  const auto& n = require(key, "a string");
  if (!n.IsScalar()) type_error(key, "a string");
  return n.Scalar();
}

std::vector<double> SystemParams::get_double_list(const std::string& key) const {
  const auto& n = require(key, "a list of numbers");
  std::vector<double> out;
  if (!n.IsSequence()) type_error(key, "a list of numbers, e.g. [0.5, 0.999]");
  for (const auto& e : n) {
    double v = 0;
    if (!e.IsScalar() || !YAML::convert<double>::decode(e, v) || !std::isfinite(v))
      type_error(key, "a list of finite numbers");
    out.push_back(v);
  }
  return out;
}

std::vector<int64_t> SystemParams::get_int_list(const std::string& key) const {
  const auto& n = require(key, "a list of integers");
  std::vector<int64_t> out;
  if (!n.IsSequence()) type_error(key, "a list of integers, e.g. [128, 256]");
  for (const auto& e : n) {
    int64_t v = 0;
    if (!e.IsScalar() || !YAML::convert<int64_t>::decode(e, v)) type_error(key, "a list of integers");
    out.push_back(v);
  }
  return out;
}

void SystemParams::check_all_used(const std::string& plugin_name) const {
  const std::vector<std::string> known(asked_.begin(), asked_.end());
  for (const auto& [key, node] : values_) {
    if (asked_.count(key)) continue;
    std::vector<std::string> full;
    for (const auto& k : known) full.push_back("system." + k);
    const std::string near = nearest_key("system." + key, full);
    throw ConfigError(cfg_.where("system." + key) + ": unknown key 'system." + key +
                      "' for plugin " + plugin_name +
                      (near.empty() ? "" : "; did you mean '" + near + "'?"));
  }
}

}  // namespace gantry
