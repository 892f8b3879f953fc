#include "config/lightning_names.hpp"

#include <vector>

namespace gantry {

namespace {

struct Name {
  const char* lightning;  // the key as a Lightning user writes it in gantry's sections
  const char* gantry;     // gantry's key
  const char* note;       // how it differs ("" if it does not)
};

// Lightning 2.x's Trainer arguments (under trainer.) and callback arguments
// (ModelCheckpoint's under checkpoint., EarlyStopping's under
// early_stopping.) whose gantry key has another name. The ones of the same
// name (max_epochs, max_time, gradient_clip_val, accumulate_grad_batches,
// save_top_k, patience, ...) are gantry keys already.
const std::vector<Name> kNames = {
    {"trainer.check_val_every_n_epoch", "trainer.val_every_n_epochs", ""},
    {"trainer.val_check_interval", "trainer.val_every_n_steps",
     "an integer count of batches; Lightning's fraction of an epoch has no counterpart"},
    {"trainer.default_root_dir", "trainer.out_dir", "each run is a directory <out_dir>/<name>/<time>"},
    {"trainer.enable_progress_bar", "trainer.progress", "trainer.progress=none turns it off"},
    {"trainer.enable_checkpointing", "checkpoint.save_last",
     "checkpoint.save_last=false with checkpoint.every_n_epochs=0 writes none"},
    {"trainer.strategy", "trainer.devices", "every multi-rank run is DDP: trainer.devices, trainer.num_nodes"},
    {"trainer.detect_anomaly", "early_stopping.check_finite", "a NaN/Inf metric stops every rank"},
    {"trainer.limit_test_batches", "trainer.limit_val_batches", "gantry has one held-out split"},
    {"checkpoint.every_n_train_steps", "checkpoint.every_n_steps", ""},
    {"checkpoint.train_time_interval", "checkpoint.every_n_minutes", "in minutes"},
    {"checkpoint.dirpath", "trainer.out_dir", "checkpoints go into each run's checkpoints/"},
    {"checkpoint.save_weights_only", "checkpoint.save_last",
     "gantry's checkpoints always hold the optimizers, for an exact resume"},
    {"early_stopping.check_on_train_epoch_end", "early_stopping.monitor",
     "a monitored metric is checked whenever it gets a new value"},
};

// LightningCLI's and people's spellings of the callback sections.
const std::vector<std::pair<const char*, const char*>> kSections = {
    {"ModelCheckpoint.", "checkpoint."},
    {"model_checkpoint.", "checkpoint."},
    {"callbacks.ModelCheckpoint.", "checkpoint."},
    {"EarlyStopping.", "early_stopping."},
    {"callbacks.EarlyStopping.", "early_stopping."},
};

}  // namespace

std::string lightning_name_hint(const std::string& key) {
  std::string k = key;
  std::string section;
  for (const auto& [from, to] : kSections)
    if (k.rfind(from, 0) == 0) {
      section = to;
      k = to + k.substr(std::string(from).size());
      break;
    }
  for (const Name& n : kNames)
    if (k == n.lightning)
      return std::string("; that is Lightning's name: gantry's key is '") + n.gantry + "'" +
             (*n.note ? std::string(" (") + n.note + ")" : std::string());
  if (!section.empty())  // a Lightning callback section: gantry's keys of the same name are in another section
    return "; Lightning's callback arguments are gantry keys under " + section.substr(0, section.size() - 1) +
           " (try '" + k + "')";
  return "";
}

}  // namespace gantry
