// Lightning's names for what gantry calls otherwise: a key a Lightning user
// carries over (`trainer.check_val_every_n_epoch`, a ModelCheckpoint
// argument) gets, in its unknown-key error, the gantry key that does it.
#pragma once

#include <string>

namespace gantry {

/// "; Lightning's name: gantry's key is 'trainer.val_every_n_epochs' (...)"
/// for a key Lightning's Trainer, ModelCheckpoint or EarlyStopping spells so;
/// "" for any other key.
std::string lightning_name_hint(const std::string& key);

}  // namespace gantry
