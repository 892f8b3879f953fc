// Experiment config loading and validation (the schema, every key bound
// to its struct member, is config/schema.cpp's). Sections:
//   2. overrides: "a.b=value" applied to the YAML tree
//   3. load/parse: walk the tree, reject unknown keys, convert types
//   4. validate: ranges and choices, in one place
//   5. SystemParams: the plugin's typed view of `system:`
#include "config/config.hpp"

#include "config/fields.hpp"
#include "config/lightning_names.hpp"

#include "files/files.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>

#include "gantry/errors.hpp"

namespace gantry {

int64_t BatchCount::of(int64_t total) const {
  if (!is_fraction()) return std::min(count, total);
  if (fraction <= 0) return 0;
  return std::max<int64_t>(1, std::min(total, static_cast<int64_t>(std::floor(fraction * double(total)))));
}

std::string BatchCount::text() const {
  if (from_bool) return count ? "true" : "false";
  if (!is_fraction()) return std::to_string(count);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", fraction);
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";  // still a fraction when read back
  return s;
}

using namespace config_schema;

namespace {

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

std::string file_line(const std::string& source, const YAML::Node& n) {
  const auto m = n.Mark();
  if (m.is_null() || source.empty()) return source.empty() ? "<config>" : source;
  return source + ":" + std::to_string(m.line + 1);
}

// The top-level sections: `trainer: {}` is an empty section, but
// `trainer.max_steps: {}` is a map where a value belongs (a type error).
bool is_section(const std::string& key) {
  for (const auto& f : schema())
    if (f.key.size() > key.size() && f.key.compare(0, key.size(), key) == 0 && f.key[key.size()] == '.') return true;
  return key == "system" || key == "optimizers" || key == "search" ||
         (key.rfind("optimizers.", 0) == 0 && key.find('.', 11) == std::string::npos);
}

void flatten(const YAML::Node& node, const std::string& prefix, std::vector<std::pair<std::string, YAML::Node>>& out) {
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
    throw ConfigError(file_line(source, node) + ": the YAML nests deeper than " + std::to_string(kMaxConfigDepth) +
                      " levels");
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
    throw ConfigError(
        cfg.where(key) + ": '" + key + "' is not optimizers.<optimizer>.<key>" +
        (near.empty() ? ""
                      : " (is '" + parts[1] + "' meant as a key? give the optimizer: optimizers.<name>." + near + ")"));
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

// One line for a key no section has: the gantry key a Lightning name means,
// else the nearest key.
[[noreturn]] void unknown_key(const ExperimentConfig& cfg, const std::string& key) {
  const std::string lightning = lightning_name_hint(key);
  const std::string near = lightning.empty() ? nearest_key(key, schema_keys()) : "";
  throw ConfigError(cfg.where(key) + ": unknown key '" + key + "'" +
                    (!lightning.empty() ? lightning
                     : near.empty()     ? ""
                                        : "; did you mean '" + near + "'?"));
}

ExperimentConfig from_tree(const YAML::Node& root, const std::string& source,
                           const std::vector<std::string>& overrides) {
  ExperimentConfig cfg;
  cfg.source = source;
  if (!root.IsMap() && !root.IsNull())
    throw ConfigError(source +
                      ": an experiment config is a YAML mapping of sections "
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
  std::map<std::string, const ConfigField*> by_key;
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
    if (key.rfind("search.", 0) == 0) {  // gantry search's space: key: distribution (the search checks both)
      if (!node.IsScalar() || node.Scalar().empty())
        throw ConfigError(cfg.where(key) + ": " + key + " must be a distribution (uniform(a,b), loguniform(a,b), " +
                          "int(a,b), choice(x,y)), got '" + scalar_text(node) + "'");
      cfg.search_space.emplace_back(key.substr(7), node.Scalar());
      continue;
    }
    const auto f = by_key.find(key);
    if (f == by_key.end()) unknown_key(cfg, key);
    if (!node.IsScalar())
      throw ConfigError(cfg.where(key) + ": " + key + " must be " + f->second->type + ", got '" + scalar_text(node) +
                        "'");
    try {
      f->second->set(cfg, node);
    } catch (const YAML::Exception&) {
      throw ConfigError(cfg.where(key) + ": " + key + " must be " + f->second->type + ", got '" + node.Scalar() + "'");
    }
  }

  // Lightning's rule: a run given only max_steps or max_time is not also cut
  // at the default epoch count.
  if (!cfg.origins.count("trainer.max_epochs") && (cfg.trainer.max_steps > 0 || !cfg.trainer.max_time.empty()))
    cfg.trainer.max_epochs = -1;

  // The split names each data.format uses unless told otherwise.
  if (cfg.data.format == DataFormat::kCifar10) {
    if (!cfg.origins.count("data.train_prefix")) cfg.data.train_prefix = "data_batch";
    if (!cfg.origins.count("data.val_prefix")) cfg.data.val_prefix = "test_batch";
  } else if (cfg.data.format == DataFormat::kImageFolder) {
    if (!cfg.origins.count("data.val_prefix")) cfg.data.val_prefix = "val";
  }

  // ---- 4. validate ----
  // Each key's own check, as declared (config.hpp), in declaration order.
  auto fail = [&](const std::string& key, const std::string& what, const std::string& got) {
    throw ConfigError(cfg.where(key) + ": " + key + " must be " + what + ", got '" + got + "'");
  };
  for (const ConfigField& f : schema())
    if (!f.check(cfg)) fail(f.key, f.expected, scalar_text(f.get(cfg)));
  for (const auto& [name, o] : cfg.optimizers)
    for (const OptimizerField& f : optimizer_schema())
      if (!f.check(o)) fail("optimizers." + name + "." + f.key, f.expected, scalar_text(f.get(o)));
  // What one key alone cannot say.
  const auto& t = cfg.trainer;
  if (t.grad_transport == GradTransport::kShm && t.grad_compression == GradCompression::kFp16)
    fail("trainer.grad_compression", "none with trainer.grad_transport=shm (fp16 compression is a Gloo hook)", "fp16");
  const MetricsOptions& m = cfg.metrics;
  if (m.quality_every_n_steps > 0 && m.quality_classifier.empty())
    fail("metrics.quality_classifier",
         "a classifier checkpoint or run directory when metrics.quality_every_n_steps > 0 (train one with "
         "`gantry train configs/classifier_fashion_mnist.yaml`)",
         "");
  if (!cfg.checkpoint.save_last && cfg.checkpoint.monitor.empty())
    fail("checkpoint.save_last", "true without checkpoint.monitor (else the run would write no checkpoint)", "false");
  if (!cfg.checkpoint.save_last && cfg.checkpoint.save_top_k == 0)
    fail("checkpoint.save_top_k", "not 0 with checkpoint.save_last=false (else the run would write no checkpoint)",
         "0");
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

ExperimentConfig ExperimentConfig::load(const std::string& path, const std::vector<std::string>& overrides) {
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

std::string ExperimentConfig::value_text(const std::string& key) const {
  std::vector<std::pair<std::string, YAML::Node>> flat;
  flatten(YAML::Load(to_yaml()), "", flat);
  for (const auto& [k, v] : flat)
    if (k == key) return v.IsNull() ? "" : scalar_text(v);
  const std::vector<std::string> keys = schema_keys();
  if (std::find(keys.begin(), keys.end(), key) != keys.end()) return "";
  if (key.rfind("optimizers.", 0) == 0) {  // optimizers.<name>.<field>: its value over the trainer's defaults
    const size_t dot = key.find('.', 11);
    if (dot != std::string::npos) {
      for (const OptimizerField& f : optimizer_schema())
        if (f.key == key.substr(dot + 1)) return scalar_text(f.get(optimizer(key.substr(11, dot - 11))));
    }
  }
  std::vector<std::string> candidates = keys;
  for (const auto& [k, v] : flat) candidates.push_back(k);
  const std::string near = nearest_key(key, candidates);
  throw std::invalid_argument("config_value(\"" + key + "\"): no such key" +
                              (near.empty() ? std::string() : " (did you mean " + near + "?)"));
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
  o.accumulate_grad_batches = trainer.accumulate_grad_batches;
  const auto it = optimizers.find(name);
  if (it == optimizers.end()) return o;
  // A section's clip keys override the defaults only where the section set them.
  const OptimizerOptions& own = it->second;
  const bool own_clip = origins.count("optimizers." + name + ".gradient_clip_val") > 0;
  const bool own_algo = origins.count("optimizers." + name + ".gradient_clip_algorithm") > 0;
  const bool own_accumulate = origins.count("optimizers." + name + ".accumulate_grad_batches") > 0;
  OptimizerOptions out = own;
  if (!own_clip) out.gradient_clip_val = o.gradient_clip_val;
  if (!own_algo) out.gradient_clip_algorithm = o.gradient_clip_algorithm;
  if (!own_accumulate) out.accumulate_grad_batches = o.accumulate_grad_batches;
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

std::vector<ConfigChange> config_changes(const ExperimentConfig& before, const ExperimentConfig& after) {
  auto leaves = [](const ExperimentConfig& c) {
    std::vector<std::pair<std::string, YAML::Node>> flat;
    flatten(YAML::Load(c.to_yaml()), "", flat);
    std::map<std::string, std::string> out;
    for (const auto& [k, v] : flat) out[k] = scalar_text(v);
    return out;
  };
  const auto a = leaves(before), b = leaves(after);
  std::vector<ConfigChange> out;
  std::set<std::string> keys;
  for (const auto& [k, v] : a) keys.insert(k);
  for (const auto& [k, v] : b) keys.insert(k);
  for (const auto& k : keys) {
    const auto x = a.find(k), y = b.find(k);
    const std::string before_text = x == a.end() ? "(unset)" : x->second;
    const std::string after_text = y == b.end() ? "(unset)" : y->second;
    if (before_text != after_text) out.push_back({k, before_text, after_text});
  }
  return out;
}

std::vector<KeyDoc> config_keys() {
  const ExperimentConfig defaults;
  std::vector<KeyDoc> out;
  for (const ConfigField& f : schema()) out.push_back({f.key, f.brief, scalar_text(f.get(defaults)), f.doc});
  const OptimizerOptions optimizer_defaults;
  for (const OptimizerField& f : optimizer_schema())
    out.push_back({"optimizers.<name>." + f.key, f.brief, scalar_text(f.get(optimizer_defaults)), f.doc});
  return out;
}

std::string config_keys_markdown() {
  std::string md = "| key | value | default | meaning |\n|---|---|---|---|\n";
  for (const KeyDoc& k : config_keys())
    md += "| `" + k.key + "` | " + k.type + " | " + (k.default_text.empty() ? "(empty)" : "`" + k.default_text + "`") +
          " | " + k.doc + " |\n";
  return md;
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
    throw std::invalid_argument(cfg_.where("system." + key) + ": system." + key + " is required: set it to " +
                                expected);
  return it->second;
}

void SystemParams::type_error(const std::string& key, const char* expected) const {
  throw std::invalid_argument(cfg_.where("system." + key) + ": system." + key + " must be " + expected + ", got '" +
                              scalar_text(values_.at(key)) + "'");
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
    throw ConfigError(cfg_.where("system." + key) + ": unknown key 'system." + key + "' for plugin " + plugin_name +
                      (near.empty() ? "" : "; did you mean '" + near + "'?"));
  }
}

}  // namespace gantry
