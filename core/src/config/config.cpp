// Experiment config loading and validation. Sections:
//   1. the schema: every option key bound to its struct member
//   2. overrides: "a.b=value" applied to the YAML tree
//   3. load/parse: walk the tree, reject unknown keys, convert types
//   4. validate: ranges and choices, in one place
//   5. SystemParams: the plugin's typed view of `system:`
#include "config/config.hpp"

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

// ---- 1. schema --------------------------------------------------------------
// Expanded from the key lists in config.hpp (GANTRY_KEYS_*): each key's
// type, conversion, check, expected text and doc come from its one line there.

namespace {

// The checks the key lists name.
bool valid_run_name(const std::string& v) {
  return !v.empty() && v.size() <= 200 && v.find('/') == std::string::npos && v != "." && v != "..";
}
bool valid_number_or_empty(const std::string& v) {
  if (v.empty()) return true;
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  return end && *end == '\0' && std::isfinite(x);
}
bool valid_max_time(const std::string& v) {
  TrainerOptions t;
  t.max_time = v;
  try {
    (void)t.max_time_seconds();
    return true;
  } catch (const std::invalid_argument&) {
    return false;
  }
}
bool valid_ip_address(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 || ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}
bool valid_slurm_time(const std::string& v) {
  return std::regex_match(v, std::regex(R"(([0-9]+-)?[0-9]+(:[0-9]+){0,2}|UNLIMITED|unlimited|infinite)"));
}
bool valid_slurm_mem(const std::string& v) { return std::regex_match(v, std::regex(R"(([0-9]+[KMGT]?)?)")); }
bool valid_slurm_signal(const std::string& v) {
  return std::regex_match(v, std::regex(R"((B:)?(SIG)?[A-Z0-9]+(@[0-9]+)?)"));
}
bool valid_slurm_partition(const std::string& v) { return std::regex_match(v, std::regex(R"([A-Za-z0-9_.,-]*)")); }
bool valid_slurm_account(const std::string& v) { return std::regex_match(v, std::regex(R"([A-Za-z0-9_.-]*)")); }

// A plain (unquoted) scalar that YAML 1.1 reads as a boolean: `host: Off`
// is a string to yaml-cpp but almost surely not what the user meant.
bool plain_boolean(const YAML::Node& n) {
  bool b = false;
  return n.Tag() == "?" && YAML::convert<bool>::decode(n, b);
}

// How a value of type T is read, written and named in messages.
template <class T, class = void>
struct OptionType;
template <>
struct OptionType<int64_t> {
  static std::string name() { return "an integer"; }
  static std::string brief() { return "integer"; }
  static int64_t read(const YAML::Node& n) { return n.as<int64_t>(); }
  static YAML::Node write(int64_t v) { return YAML::Node(v); }
};
template <>
struct OptionType<double> {
  static std::string name() { return "a finite number"; }
  static std::string brief() { return "number"; }
  static double read(const YAML::Node& n) {
    const double v = n.as<double>();
    if (!std::isfinite(v)) throw YAML::TypedBadConversion<double>(n.Mark());
    return v;
  }
  static YAML::Node write(double v) { return YAML::Node(v); }
};
template <>
struct OptionType<bool> {
  static std::string name() { return "true or false"; }
  static std::string brief() { return "true/false"; }
  static bool read(const YAML::Node& n) { return n.as<bool>(); }
  static YAML::Node write(bool v) { return YAML::Node(v); }
};
template <>
struct OptionType<std::string> {
  static std::string name() { return "a string (quote yes/no/on/off to mean the text)"; }
  static std::string brief() { return "text"; }
  static std::string read(const YAML::Node& n) {
    if (plain_boolean(n)) throw YAML::TypedBadConversion<std::string>(n.Mark());
    return n.as<std::string>();
  }
  static YAML::Node write(const std::string& v) { return YAML::Node(v); }
};
template <>
struct OptionType<BatchCount> {  // a count, a fraction (a number with a point), or true/false
  static std::string name() { return "a count of batches (10) or a fraction of them (0.25)"; }
  static std::string brief() { return "count or fraction"; }
  static BatchCount read(const YAML::Node& n) {
    BatchCount c;
    if (!n.IsScalar()) throw YAML::BadConversion(n.Mark());
    const std::string text = n.Scalar();
    bool b = false;
    if (plain_boolean(n) && YAML::convert<bool>::decode(n, b)) {
      c.count = b ? 1 : 0;
      c.from_bool = true;
    } else if (text.find_first_of(".eE") == std::string::npos) {
      c.count = n.as<int64_t>();
      if (c.count < 0) throw YAML::BadConversion(n.Mark());
    } else {
      c.fraction = n.as<double>();
      if (!std::isfinite(c.fraction) || c.fraction < 0) throw YAML::BadConversion(n.Mark());
    }
    return c;
  }
  static YAML::Node write(const BatchCount& v) {
    if (v.from_bool) return YAML::Node(v.count != 0);
    if (!v.is_fraction()) return YAML::Node(v.count);
    return YAML::Node(v.text());
  }
};
template <class E>
struct OptionType<E, std::enable_if_t<std::is_enum_v<E>>> {  // a choice: one of its names
  static std::string name() {
    std::string s = "one of ";
    for (size_t i = 0; i < ChoiceNames<E>::names.size(); ++i)
      s += (i ? ", " : "") + std::string(ChoiceNames<E>::names[i]);
    return s + ChoiceNames<E>::note;
  }
  static std::string brief() {
    std::string s;
    for (size_t i = 0; i < ChoiceNames<E>::names.size(); ++i)
      s += (i ? ", `" : "`") + std::string(ChoiceNames<E>::names[i]) + "`";
    return s;
  }
  static E read(const YAML::Node& n) {
    const std::string text = n.as<std::string>();
    for (size_t i = 0; i < ChoiceNames<E>::names.size(); ++i)
      if (text == ChoiceNames<E>::names[i]) return static_cast<E>(i);
    throw YAML::BadConversion(n.Mark());
  }
  static YAML::Node write(E v) { return YAML::Node(std::string(choice_name(v))); }
};

// One key of a section type S (ExperimentConfig's sections, or OptimizerOptions).
template <class S>
struct Field {
  std::string key;    // within its section ("max_steps"); the full key adds the section
  std::string type;   // for messages: "an integer", "one of cpu, cuda, auto", ...
  std::string brief;  // for the keys table: "integer", "`cpu`, `cuda`, `auto`"
  std::function<void(S&, const YAML::Node&)> set;
  std::function<YAML::Node(const S&)> get;
  std::function<bool(const S&)> check;  // the key's own check
  std::string expected;                 // what the check says it must be
  std::string doc;
};

template <class S, class T, class Check>
Field<S> make_field(const char* key, T S::*member, Check check, const char* expected, const char* doc) {
  return Field<S>{key,
                  OptionType<T>::name(),
                  OptionType<T>::brief(),
                  [member](S& s, const YAML::Node& n) { s.*member = OptionType<T>::read(n); },
                  [member](const S& s) { return OptionType<T>::write(s.*member); },
                  [member, check](const S& s) { return check(s.*member); },
                  expected,
                  doc};
}

// A key of the experiment: its section's field, reached through ExperimentConfig.
struct ConfigField {
  std::string key;  // full: "trainer.max_steps"
  std::string type, brief;
  std::function<void(ExperimentConfig&, const YAML::Node&)> set;
  std::function<YAML::Node(const ExperimentConfig&)> get;
  std::function<bool(const ExperimentConfig&)> check;
  std::string expected, doc;
};

template <class S>
void add_section(std::vector<ConfigField>& out, const std::string& section, S ExperimentConfig::*member,
                 const std::vector<Field<S>>& fields) {
  for (const Field<S>& f : fields)
    out.push_back(ConfigField{section + "." + f.key, f.type, f.brief,
                              [member, set = f.set](ExperimentConfig& c, const YAML::Node& n) { set(c.*member, n); },
                              [member, get = f.get](const ExperimentConfig& c) { return get(c.*member); },
                              [member, check = f.check](const ExperimentConfig& c) { return check(c.*member); },
                              f.expected, f.doc});
}

#define GANTRY_SECTION_FIELD(S, type, member, key, def, check, expected, doc) \
  make_field<S, type>(                                                        \
      #key, &S::member, [](const type& v) { return static_cast<bool>(check); }, expected, doc),
#define GANTRY_DATA_FIELD(...) GANTRY_SECTION_FIELD(DataOptions, __VA_ARGS__)
#define GANTRY_TRAINER_FIELD(...) GANTRY_SECTION_FIELD(TrainerOptions, __VA_ARGS__)
#define GANTRY_EMA_FIELD(...) GANTRY_SECTION_FIELD(EmaOptions, __VA_ARGS__)
#define GANTRY_METRICS_FIELD(...) GANTRY_SECTION_FIELD(MetricsOptions, __VA_ARGS__)
#define GANTRY_CHECKPOINT_FIELD(...) GANTRY_SECTION_FIELD(CheckpointOptions, __VA_ARGS__)
#define GANTRY_EARLY_STOPPING_FIELD(...) GANTRY_SECTION_FIELD(EarlyStoppingOptions, __VA_ARGS__)
#define GANTRY_MONITOR_FIELD(...) GANTRY_SECTION_FIELD(MonitorOptions, __VA_ARGS__)
#define GANTRY_SLURM_FIELD(...) GANTRY_SECTION_FIELD(SlurmOptions, __VA_ARGS__)
#define GANTRY_SYSTEM_FIELD(...) GANTRY_SECTION_FIELD(SystemOptions, __VA_ARGS__)
#define GANTRY_OPTIMIZER_FIELD(...) GANTRY_SECTION_FIELD(OptimizerOptions, __VA_ARGS__)
#define GANTRY_TOP_FIELD(type, member, key, def, check, expected, doc)                                              \
  out.push_back(ConfigField{#key, OptionType<type>::name(), OptionType<type>::brief(),                              \
                            [](ExperimentConfig& c, const YAML::Node& n) { c.member = OptionType<type>::read(n); }, \
                            [](const ExperimentConfig& c) { return OptionType<type>::write(c.member); },            \
                            [](const ExperimentConfig& c) {                                                         \
                              const type& v = c.member;                                                             \
                              return static_cast<bool>(check);                                                      \
                            },                                                                                      \
                            expected, doc});

const std::vector<ConfigField>& schema() {
  static const std::vector<ConfigField> fields = [] {
    using E = ExperimentConfig;
    std::vector<ConfigField> out;
    GANTRY_KEYS_TOP(GANTRY_TOP_FIELD)
    add_section<SystemOptions>(out, "system", &E::system, {GANTRY_KEYS_SYSTEM(GANTRY_SYSTEM_FIELD)});
    add_section<DataOptions>(out, "data", &E::data, {GANTRY_KEYS_DATA(GANTRY_DATA_FIELD)});
    add_section<TrainerOptions>(out, "trainer", &E::trainer, {GANTRY_KEYS_TRAINER(GANTRY_TRAINER_FIELD)});
    add_section<EmaOptions>(out, "ema", &E::ema, {GANTRY_KEYS_EMA(GANTRY_EMA_FIELD)});
    add_section<MetricsOptions>(out, "metrics", &E::metrics, {GANTRY_KEYS_METRICS(GANTRY_METRICS_FIELD)});
    add_section<CheckpointOptions>(out, "checkpoint", &E::checkpoint,
                                   {GANTRY_KEYS_CHECKPOINT(GANTRY_CHECKPOINT_FIELD)});
    add_section<EarlyStoppingOptions>(out, "early_stopping", &E::early_stopping,
                                      {GANTRY_KEYS_EARLY_STOPPING(GANTRY_EARLY_STOPPING_FIELD)});
    add_section<MonitorOptions>(out, "monitor", &E::monitor, {GANTRY_KEYS_MONITOR(GANTRY_MONITOR_FIELD)});
    add_section<SlurmOptions>(out, "slurm", &E::slurm, {GANTRY_KEYS_SLURM(GANTRY_SLURM_FIELD)});
    return out;
  }();
  return fields;
}

// `optimizers.<name>.<key>`: one field per key of OptimizerOptions.
using OptimizerField = Field<OptimizerOptions>;
const std::vector<OptimizerField>& optimizer_schema() {
  static const std::vector<OptimizerField> fields = {GANTRY_KEYS_OPTIMIZER(GANTRY_OPTIMIZER_FIELD)};
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
    if (f == by_key.end()) {
      const std::string near = nearest_key(key, schema_keys());
      throw ConfigError(cfg.where(key) + ": unknown key '" + key + "'" +
                        (near.empty() ? "" : "; did you mean '" + near + "'?"));
    }
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
