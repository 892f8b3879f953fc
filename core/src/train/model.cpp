#include "train/model.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <unordered_set>

#include "optim/fused_adam.hpp"
#include "optim/lr_schedule.hpp"
#include "train/precision.hpp"
#include "train/weight_layout.hpp"
#if GANTRY_WITH_CUDA
#include "distributed/cuda.hpp"
#endif

namespace gantry {

// trainer.cuda_graphs: the step's state between warm-up, capture and replays.
struct Model::Graphed {
  static constexpr int kWarmupSteps = 3;  // eager, on the capture's stream (as PyTorch's docs do)
  int warmups = 0;                        // done so far (more than kWarmupSteps when a short batch came)
  int64_t first_epoch = -1;               // the first warm-up's epoch
#if GANTRY_WITH_CUDA
  cuda::StepGraph graph;
#endif
  bool captured = false;
  bool first_replay = true;          // the capture itself counted this batch's step on the host
  Batch input;                       // the static input: each batch is copied into it
  std::vector<LoggedValue> outputs;  // the captured step's logged values (each replay overwrites them)
  std::vector<LoggedValue> values;   // copies of them, returned
};

Model::Model(Experiment exp, Accelerator& accel) : exp_(std::move(exp)), accel_(accel) {
  // Each rank draws its own noise (model init is rank 0's, broadcast below).
  torch::manual_seed(static_cast<uint64_t>(cfg().trainer.seed + accel_.dist().rank));
  build_modules();
  build_optimizers();
  spec_ = exp_.system->data_spec();
  if (!exp_.own_data) check_data_kind(spec_, plugin_name());  // else the plugin brings its own
  ctx_ = std::make_unique<StepContextImpl>(
      slots_, accel_.device(), accel_.dist().rank, accel_.dist().world_size,
      [this](const std::string& tag, const torch::Tensor& images, double low, double high) {
        if (image_sink_) image_sink_(tag, ctx_->global_step(), images, low, high);
      });
  bf16_ = cfg().trainer.precision == PrecisionMode::kBf16Mixed;
  ctx_->set_bf16(bf16_);
  if (bf16_ && accel_.is_zero())
    std::printf(
        "precision: bf16-mixed (autocast on %s: matmuls in bfloat16; weights, gradients and "
        "optimizer state float32)\n",
        accel_.device().is_cuda() ? "CUDA" : "the CPU");
  for (const auto& o : optimizers_) built_lrs_[o.name] = group_lrs(*o.optimizer);
  if (!cfg().trainer.resume.empty()) {
    // train read it when it resolved trainer.resume: no second read (then the tensors go).
    const std::shared_ptr<const CheckpointFile> file =
        exp_.resume_file ? std::move(exp_.resume_file) : CheckpointFile::read(cfg().trainer.resume);
    exp_.resume_file.reset();
    resumed_meta_ = file->meta();
    resumed_ = file->load(plugin_name(), modules_, optimizers_, true, accel_.dist().rank, accel_.device());
    StateDict state;
    const std::string prefix = kPluginStatePrefix;
    for (const auto& [key, t] : resumed_.extra)
      if (key.rfind(prefix, 0) == 0) state.emplace_back(key.substr(prefix.size()), t);
    exp_.system->load_extra_state(state, resumed_.global_step);
  }
  if (cfg().trainer.cuda_graphs) {
    graphed_ = std::make_unique<Graphed>();
    if (const std::string why = graphs_unavailable(); !why.empty()) graphs_off(why);
  }
  // Every replica starts from rank 0's parameters and buffers.
  std::vector<torch::Tensor> all = parameters();
  for (auto& b : buffers()) all.push_back(b);
  accel_.broadcast(all);
}

void Model::build_modules() {
  modules_ = exp_.system->modules();
  if (modules_.empty()) throw PluginError("plugin " + plugin_name() + ": modules() returned none");
  for (auto& m : modules_) {
    if (!m.module) throw PluginError("plugin " + plugin_name() + ": modules() returned a null '" + m.name + "'");
    m.module->to(accel_.device());
    m.module->train();
  }
  if (cfg().trainer.weight_layout != WeightLayout::kAuto) return;
  std::vector<std::string> moved;
  for (auto& m : modules_)
    for (auto& name : transpose_linear_weights(*m.module, m.name)) moved.push_back(name);
  if (moved.empty() || !accel_.is_zero()) return;
  std::string list;
  for (const auto& n : moved) list += (list.empty() ? "" : ", ") + n;
  std::printf(
      "layout: %zu Linear weight%s stored transposed for faster products (%s; "
      "trainer.weight_layout=as_built keeps them as built)\n",
      moved.size(), moved.size() == 1 ? "" : "s", list.c_str());
}

void Model::build_optimizers() {
  const auto& t = cfg().trainer;
  optimizers_ = exp_.system->configure_optimizers();
  if (optimizers_.empty()) throw PluginError("plugin " + plugin_name() + ": configure_optimizers() returned none");
  for (const auto& o : optimizers_) {
    if (!o.optimizer || o.name.empty())
      throw PluginError("plugin " + plugin_name() + ": configure_optimizers() returned an unnamed or null optimizer");
    OptimizerSlot s;
    s.name = o.name;
    s.optimizer = o.optimizer;
    for (const auto& g : o.optimizer->param_groups())
      for (const auto& p : g.params())
        if (p.requires_grad()) s.params.push_back(p);
    s.sync = accel_.grad_sync(s.params);
    s.fused = t.fused_adam && fused_adam_applies(*o.optimizer);
    // On a GPU: ATen's fused multi-tensor Adam with the step and lr on the
    // device (one launch per group, and a step a CUDA graph can hold).
    if (t.fused_adam && accel_.device().is_cuda() && DeviceAdam::why_not(*o.optimizer).empty())
      s.device_adam = std::make_unique<DeviceAdam>(o.optimizer);
    const OptimizerOptions options = cfg().optimizer(o.name);
    s.clip = options.gradient_clip_val;
    s.clip_by_norm = options.gradient_clip_algorithm == ClipAlgorithm::kNorm;
    s.log_norm = t.log_grad_norm;
    s.accumulate = options.accumulate_grad_batches;
    const bool leaves =
        std::all_of(s.params.begin(), s.params.end(), [](const torch::Tensor& p) { return p.is_leaf(); });
    // Stepping during backward needs the gradients final as they arrive: not
    // when DDP must average them first, nor when clipping or the logged norm
    // needs all of them (or the histograms), nor when later batches add to
    // them (accumulation).
    if (s.fused && !s.sync && s.clip == 0 && !s.log_norm && s.accumulate == 1 && t.log_histograms_every_n_steps == 0 &&
        t.step_in_backward && leaves)
      s.in_backward = std::make_unique<AdamInBackward>(o.optimizer, s.params);
    slots_.push_back(std::move(s));
  }
  check_parameters_owned();
  // An optimizers.<name> section must name an optimizer the plugin has.
  for (const auto& [name, options] : cfg().optimizers) {
    if (std::any_of(optimizers_.begin(), optimizers_.end(), [&](const NamedOptimizer& o) { return o.name == name; }))
      continue;
    std::string names, key;
    for (const auto& o : optimizers_) names += (names.empty() ? "" : ", ") + o.name;
    for (const auto& [k, where] : cfg().origins)
      if (k.rfind("optimizers." + name + ".", 0) == 0) key = k;
    throw ConfigError(cfg().where(key) + ": optimizers." + name + ": plugin " + plugin_name() + " has no optimizer '" +
                      name + "'; configure_optimizers() returned: " + names);
  }
  const auto& d = accel_.dist();
  if (slots_.front().sync && d.rank == 0)
    std::printf("ddp: %d ranks on %d node%s, gradients averaged through %s\n", d.world_size, d.num_nodes,
                d.num_nodes == 1 ? "" : "s", accel_.grad_transport_name(*slots_.front().sync).c_str());
}

// A parameter an optimizer trains but no module of modules() holds would be
// trained, never checkpointed, and come back from a resume (or into `gantry
// sample`) as its random initial value: refused before step 1.
void Model::check_parameters_owned() const {
  std::unordered_set<const void*> owned;
  for (const auto& m : modules_)
    for (const auto& p : m.module->parameters(/*recurse=*/true)) owned.insert(p.unsafeGetTensorImpl());
  for (const auto& o : optimizers_) {
    std::string shapes;
    int64_t count = 0, values = 0;
    for (const auto& g : o.optimizer->param_groups())
      for (const auto& p : g.params()) {
        if (owned.count(p.unsafeGetTensorImpl())) continue;
        ++count;
        values += p.numel();
        if (count <= 4) {
          std::string shape;
          for (const int64_t d : p.sizes()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
          shapes += std::string(shapes.empty() ? "" : ", ") + "[" + shape + "]";
        }
      }
    if (count == 0) continue;
    std::string names;
    for (const auto& m : modules_) names += (names.empty() ? "" : ", ") + m.name;
    throw PluginError("plugin " + plugin_name() + ": optimizer " + o.name + " trains " + std::to_string(count) +
                      " parameter" + (count == 1 ? "" : "s") + " (" + shapes + (count > 4 ? ", ..." : "") + "; " +
                      std::to_string(values) + " values) that no module of modules() holds (it returns: " + names +
                      "): they would be trained but never checkpointed, and a resume or gantry sample would use "
                      "random values; return their module from modules()");
  }
}

void Model::set_profile(Profile* p) { ctx_->set_profile(p); }

std::map<std::string, torch::Tensor> Model::plugin_state(int64_t step) {
  std::map<std::string, torch::Tensor> out;
  const StateDict state = exp_.system->extra_state(step);
  for (const auto& [name, t] : state) {
    if (!t.defined())
      throw PluginError("plugin " + plugin_name() + ": extra_state() returned an undefined tensor '" + name + "'");
    out[kPluginStatePrefix + name] = t.detach().cpu().clone();
  }
  return out;
}

// ---- trainer.accumulate_grad_batches across a checkpoint -----------------------
// An optimizer between steps holds gradients summed over its last micro
// batches: they go into the checkpoint. With more ranks each rank's sum is
// its own; they are averaged first (every rank continues from the average,
// in this run too, so a resumed run continues bit for bit like this one),
// and the k-th batch's all-reduce of (average + the rank's rest) gives the
// same mean as without the checkpoint, up to the order of the sums.
std::map<std::string, torch::Tensor> Model::accumulation_state() {
  std::map<std::string, torch::Tensor> out;
  const int world = accel_.dist().world_size;
  for (auto& s : slots_) {
    if (s.micro == 0 || s.micro >= s.accumulate) continue;
    std::vector<torch::Tensor> grads;
    for (auto& p : s.params) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      grads.push_back(p.grad());
    }
    if (world > 1) {  // every rank has the same slots at the same micro count: the same collectives
      torch::NoGradGuard no_grad;
      std::vector<torch::Tensor> flat_parts;
      for (const auto& g : grads) flat_parts.push_back(g.reshape({-1}));
      torch::Tensor flat = torch::cat(flat_parts);
      accel_.allreduce_sum(flat);
      flat.div_(world);
      int64_t at = 0;
      for (auto& g : grads) {
        g.copy_(flat.slice(0, at, at + g.numel()).view_as(g));
        at += g.numel();
      }
    }
    const std::string prefix = std::string(kAccumulationPrefix) + s.name + ".";
    out[prefix + "micro"] = torch::tensor(s.micro, torch::kInt64);
    for (size_t i = 0; i < grads.size(); ++i) out[prefix + std::to_string(i)] = grads[i].detach().cpu().clone();
  }
  return out;
}

void Model::restore_accumulation(const std::map<std::string, torch::Tensor>& saved) {
  for (auto& s : slots_) {
    const std::string prefix = std::string(kAccumulationPrefix) + s.name + ".";
    const auto micro = saved.find(prefix + "micro");
    if (micro == saved.end()) continue;
    for (size_t i = 0; i < s.params.size(); ++i) {
      const auto g = saved.find(prefix + std::to_string(i));
      if (g == saved.end() || g->second.sizes() != s.params[i].sizes())
        throw CheckpointError(cfg().trainer.resume + ": optimizer " + s.name + "'s accumulated gradient " +
                              std::to_string(i) + " is missing or of another shape");
      s.params[i].mutable_grad() = g->second.to(s.params[i].device(), s.params[i].scalar_type()).clone();
    }
    s.micro = micro->second.item<int64_t>();
  }
}

std::vector<torch::Tensor> Model::parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& m : modules_)
    for (auto& p : m.module->parameters()) out.push_back(p.detach());
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> Model::named_parameters() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& m : modules_)
    for (const auto& p : m.module->named_parameters()) out.emplace_back(m.name + "." + p.key(), p.value().detach());
  return out;
}

void Model::keep_gradients(bool on) {
  for (auto& s : slots_) {
    s.keep_grads = on;
    s.kept.clear();
  }
}

std::vector<std::pair<std::string, torch::Tensor>> Model::kept_gradients() const {
  std::map<const void*, std::string> names;  // the modules' own tensors (a detached copy is another TensorImpl)
  for (const auto& m : modules_)
    for (const auto& p : m.module->named_parameters()) names[p.value().unsafeGetTensorImpl()] = m.name + "." + p.key();
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& s : slots_)
    for (size_t i = 0; i < s.kept.size() && i < s.params.size(); ++i) {
      const auto it = names.find(s.params[i].unsafeGetTensorImpl());
      if (s.kept[i].defined() && it != names.end()) out.emplace_back(it->second, s.kept[i]);
    }
  return out;
}

std::vector<torch::Tensor> Model::buffers() const {
  std::vector<torch::Tensor> out;
  for (const auto& m : modules_)
    for (auto& b : m.module->buffers()) out.push_back(b);
  return out;
}

void Model::set_train(bool train) {
  for (auto& m : modules_) train ? m.module->train() : m.module->eval();
}

Model::~Model() = default;

const std::vector<LoggedValue>& Model::training_step(const Batch& batch, const TrainState& state,
                                                     std::function<std::optional<Batch>()> more) {
  ctx_->begin(state.global_step, state.epoch);
  ctx_->set_batch_source(std::move(more));
  struct Unset {  // the loader's source is for this step only
    StepContextImpl& ctx;
    ~Unset() { ctx.set_batch_source(nullptr); }
  } unset{*ctx_};
  if (graphed_) return graphed_step(batch, state);
  eager_step(batch, state);
  return ctx_->values();
}

void Model::eager_step(const Batch& batch, const TrainState& state) {
  AutocastScope autocast(accel_.device(), bf16_);
  exp_.system->training_step(batch, *ctx_, state.global_step);
}

// ---- trainer.cuda_graphs ------------------------------------------------------
// Three eager steps on the capture's stream, then the fourth batch's step is
// captured (which executes nothing) and replayed; every later batch is
// copied into the capture's input buffers and the graph replayed: one launch
// for the whole G+D step. Host-side bookkeeping a replay skips is done here:
// the optimizers' host step counts (DeviceAdam::replayed) and the lrs a
// schedule set (DeviceAdam::prepare). docs/cuda.md has the rules.

std::string Model::graphs_unavailable() const {
  if (!accel_.device().is_cuda()) return "trainer.cuda_graphs is for trainer.accelerator=cuda; this run is on the CPU";
  if (accel_.dist().world_size > 1)
    return "trainer.cuda_graphs is for one rank for now; this job has " + std::to_string(accel_.dist().world_size) +
           " (DDP's gradient hooks run on the host during backward)";
  for (const auto& s : slots_) {
    if (!s.device_adam)
      return "optimizer '" + s.name + "' cannot be stepped inside a graph: " +
             (cfg().trainer.fused_adam ? DeviceAdam::why_not(*s.optimizer) : "trainer.fused_adam is false");
    if (s.accumulate > 1)
      return "optimizer '" + s.name + "' accumulates gradients over " + std::to_string(s.accumulate) +
             " batches (accumulate_grad_batches), and a graph replays one whole step";
    if (s.clip > 0 && s.clip_by_norm)
      return "optimizer '" + s.name +
             "' clips gradients by norm, and LibTorch's clip_grad_norm_ reads the norm on the host (use "
             "gradient_clip_algorithm=value, or no graphs)";
  }
  return "";
}

void Model::graphs_off(const std::string& why) {
  graphed_.reset();
  // The optimizers' own parameter tensors: parameters() gives detached views,
  // whose gradients are not these (a failed capture's point into its pool).
  for (auto& slot : slots_)
    for (auto& p : slot.params) p.mutable_grad().reset();
  if (accel_.is_zero()) std::printf("cuda graphs: off (%s); the step runs eagerly\n", why.c_str());
}

const std::vector<LoggedValue>& Model::graphed_step(const Batch& batch, const TrainState& state) {
#if GANTRY_WITH_CUDA
  Graphed& g = *graphed_;
  // Only a full batch is captured: a graph of an epoch's short last batch
  // would run every later (full) batch eagerly.
  const int64_t full = cfg().data.batch_size;
  const bool is_full = batch.input.dim() > 0 && batch.input.size(0) == full;
  if (!g.captured && (g.warmups < Graphed::kWarmupSteps || !is_full)) {
    if (g.first_epoch < 0) g.first_epoch = state.epoch;
    if (state.epoch > g.first_epoch + 1) {
      graphs_off("no batch of data.batch_size=" + std::to_string(full) + " rows came in a whole epoch to capture");
      eager_step(batch, state);
      return ctx_->values();
    }
    ctx_->take_host_reads();
    cuda::run_on_side_stream([&] { eager_step(batch, state); });
    ++g.warmups;
    // What a graph would freeze at its capture-time value: the plugin's step
    // would then differ from the eager one without any error.
    std::string why = ctx_->take_host_reads();
    if (!why.empty()) why = "reads " + why;
    for (const auto& v : ctx_->values())
      if (why.empty() && v.value.device().is_cpu()) why = "logs a host value (\"" + v.name + "\")";
    if (!why.empty())
      graphs_off("plugin " + plugin_name() + "'s training_step " + why + ", which a graph would freeze at capture");
    return ctx_->values();
  }
  std::vector<DeviceAdam*> adams;
  for (auto& s : slots_) adams.push_back(s.device_adam.get());
  if (!g.captured) {
    g.input = batch;
    g.input.input = batch.input.clone();
    if (batch.target.defined()) g.input.target = batch.target.clone();
    for (auto* a : adams) {
      a->prepare();
      a->start_recording();
    }
    try {
      g.graph.capture([&] { eager_step(g.input, state); });
    } catch (const std::exception& e) {
      for (auto* a : adams) a->undo_recorded();
      // One line: the cause's first line (CUDA's errors add advice lines),
      // without call()'s "plugin P: training_step failed at step N: " prefix.
      std::string cause = error_text(e);
      cause = cause.substr(0, cause.find('\n'));
      const std::string prefix =
          "plugin " + plugin_name() + ": training_step failed at step " + std::to_string(state.global_step) + ": ";
      if (cause.rfind(prefix, 0) == 0) cause = cause.substr(prefix.size());
      graphs_off("capturing plugin " + plugin_name() + "'s training_step at step " + std::to_string(state.global_step) +
                 " failed: " + cause);
      ctx_->begin(state.global_step, state.epoch);
      eager_step(batch, state);
      return ctx_->values();
    }
    for (auto* a : adams) a->stop_recording();
    g.outputs = ctx_->values();
    g.captured = true;
    if (accel_.is_zero())
      std::printf(
          "cuda graphs: plugin %s's training_step captured at step %lld on a batch of %s after %d "
          "warm-up steps; replayed for batches of that shape from here on\n",
          plugin_name().c_str(), static_cast<long long>(state.global_step), shape_str(batch.input).c_str(), g.warmups);
  } else if (batch.input.sizes() != g.input.input.sizes() || batch.target.defined() != g.input.target.defined() ||
             (batch.target.defined() && batch.target.sizes() != g.input.target.sizes())) {
    eager_step(batch, state);  // another shape (an epoch's last, smaller batch): eagerly
    return ctx_->values();
  } else {
    g.input.input.copy_(batch.input, /*non_blocking=*/true);
    if (batch.target.defined()) g.input.target.copy_(batch.target, /*non_blocking=*/true);
  }
  for (auto* a : adams) a->prepare();  // a schedule's lr
  g.graph.replay();
  if (!g.first_replay)
    for (auto* a : adams) a->replayed();
  g.first_replay = false;
  g.values = g.outputs;
  for (auto& v : g.values) v.value = v.value.clone();  // the next replay overwrites the outputs
  return g.values;
#else
  (void)batch;
  (void)state;
  throw Error("trainer.cuda_graphs: this gantry is built without CUDA");
#endif
}

const std::vector<LoggedValue>& Model::validation_step(const Batch& batch, const TrainState& state) {
  ctx_->begin(state.global_step, state.epoch);
  AutocastScope autocast(accel_.device(), bf16_);
  exp_.system->validation_step(batch, *ctx_, state.global_step);
  return ctx_->values();
}

const std::vector<LoggedValue>& Model::validation_hook(bool start, const TrainState& state) {
  ctx_->begin(state.global_step, state.epoch);
  AutocastScope autocast(accel_.device(), bf16_);
  if (start)
    exp_.system->on_validation_start(*ctx_, state.global_step);
  else
    exp_.system->on_validation_end(*ctx_, state.global_step);
  return ctx_->values();
}

std::string Model::take_stop_request() { return ctx_->take_stop_request(); }

const std::vector<LoggedValue>& Model::log_samples(const TrainState& state) {
  EvalScope eval(*this);
  ctx_->begin(state.global_step, state.epoch);
  AutocastScope autocast(accel_.device(), bf16_);
  exp_.system->log_samples(*ctx_, state.global_step);
  return ctx_->values();
}

}  // namespace gantry
