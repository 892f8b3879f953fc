// config/schema.hpp: the schema expanded from the key table
// (config/keys.hpp, GANTRY_KEYS_*): each key's type, conversion, check,
// expected text and doc come from its one row there.
#include "config/config.hpp"
#include "config/fields.hpp"

#include <arpa/inet.h>

#include <cmath>
#include <regex>
#include <type_traits>

namespace gantry::config_schema {

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

}  // namespace

namespace {

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

}  // namespace

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

}  // namespace gantry::config_schema
