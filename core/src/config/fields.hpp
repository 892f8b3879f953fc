// The schema of an experiment's config (defined in config/schema.cpp) (config.cpp's load, overrides and
// to_yaml read it): every key of config/keys.hpp bound to its struct member,
// with its conversion from and to YAML, its check, the text its error says
// and its doc. Internal to config/.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <vector>

namespace gantry {
struct ExperimentConfig;
struct OptimizerOptions;
}  // namespace gantry

namespace gantry::config_schema {

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

// A key of the experiment: its section's field, reached through ExperimentConfig.
struct ConfigField {
  std::string key;  // full: "trainer.max_steps"
  std::string type, brief;
  std::function<void(ExperimentConfig&, const YAML::Node&)> set;
  std::function<YAML::Node(const ExperimentConfig&)> get;
  std::function<bool(const ExperimentConfig&)> check;
  std::string expected, doc;
};

using OptimizerField = Field<OptimizerOptions>;

/// Every key of the experiment, in config.yaml's order.
const std::vector<ConfigField>& schema();
/// `optimizers.<name>.<key>`: one field per key of OptimizerOptions.
const std::vector<OptimizerField>& optimizer_schema();
/// schema()'s keys.
std::vector<std::string> schema_keys();
/// A scalar's text, or a node in YAML's flow style.
std::string scalar_text(const YAML::Node& n);

}  // namespace gantry::config_schema
