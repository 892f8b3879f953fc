#include "quality/quality.hpp"

#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "gantry/errors.hpp"
#include "files/files.hpp"
#include "data/load_images.hpp"
#include "runtime/runtime.hpp"
#include "train/accelerator.hpp"
#include "checkpoint/resolve.hpp"

namespace fs = std::filesystem;

namespace gantry {

// ---- the global generators --------------------------------------------------

// ---- statistics ---------------------------------------------------------------

void FeatureStats::add(const torch::Tensor& features, const torch::Tensor& logits, int64_t first) {
  const torch::Tensor f = features.detach().to(torch::kCPU, torch::kFloat64);
  const torch::Tensor cls = logits.detach().argmax(1).to(torch::kCPU);
  if (!sum.defined()) {
    sum = torch::zeros({f.size(1)}, torch::kFloat64);
    outer = torch::zeros({f.size(1), f.size(1)}, torch::kFloat64);
    classes = torch::zeros({logits.size(1)}, torch::kFloat64);
  }
  if (first < 0) first = count;
  if (keep > 0 && first < keep) {
    if (!kept.defined()) kept = torch::zeros({keep, f.size(1)}, torch::kFloat64);
    const int64_t rows = std::min(f.size(0), keep - first);
    kept.slice(0, first, first + rows).copy_(f.slice(0, 0, rows));
  }
  sum += f.sum(0);
  outer.addmm_(f.t(), f);
  classes.index_add_(0, cls, torch::ones({cls.size(0)}, torch::kFloat64));
  count += f.size(0);
}

torch::Tensor FeatureStats::kept_features() const {
  if (!kept.defined()) return torch::zeros({0, sum.defined() ? sum.size(0) : 0}, torch::kFloat64);
  return kept.slice(0, 0, std::min(keep, count));
}

torch::Tensor FeatureStats::mean() const { return sum / double(count); }

torch::Tensor FeatureStats::covariance() const {
  const torch::Tensor mu = mean();
  return (outer - double(count) * torch::outer(mu, mu)) / double(count - 1);
}

double FeatureStats::class_entropy() const {
  const torch::Tensor p = classes / classes.sum();
  const torch::Tensor nz = p.masked_select(p > 0);
  return 0.0 - (nz * nz.log()).sum().item<double>();  // +0, not -0, for one class
}

void FeatureStats::allreduce(const Accelerator& accel) {
  if (!accel.group()) return;
  const int64_t d = sum.size(0), c = classes.size(0);
  // A rank whose samples all lie past `keep` kept none: zeros of the same shape.
  if (keep > 0 && !kept.defined()) kept = torch::zeros({keep, d}, torch::kFloat64);
  std::vector<torch::Tensor> parts{torch::tensor({double(count)}, torch::kFloat64), sum, outer.flatten(), classes};
  if (keep > 0) parts.push_back(kept.flatten());
  torch::Tensor flat = torch::cat(parts);
  accel.allreduce_sum(flat);
  count = static_cast<int64_t>(flat[0].item<double>());
  sum = flat.slice(0, 1, 1 + d).clone();
  outer = flat.slice(0, 1 + d, 1 + d + d * d).view({d, d}).clone();
  classes = flat.slice(0, 1 + d + d * d, 1 + d + d * d + c).clone();
  if (keep > 0) kept = flat.slice(0, 1 + d + d * d + c).view({keep, d}).clone();
}

c10::Dict<std::string, torch::Tensor> FeatureStats::to_dict() const {
  c10::Dict<std::string, torch::Tensor> d;
  d.insert("count", torch::tensor(count));
  d.insert("sum", sum);
  d.insert("outer", outer);
  d.insert("classes", classes);
  if (kept.defined()) d.insert("kept", kept_features());
  return d;
}

FeatureStats FeatureStats::from_dict(const c10::Dict<std::string, torch::Tensor>& d) {
  FeatureStats s;
  s.count = d.at("count").item<int64_t>();
  s.sum = d.at("sum");
  s.outer = d.at("outer");
  s.classes = d.at("classes");
  if (d.contains("kept")) {
    s.kept = d.at("kept");
    s.keep = s.kept.size(0);
  }
  return s;
}

PrecisionRecall precision_recall(const torch::Tensor& real, const torch::Tensor& fake, int64_t k) {
  TORCH_CHECK(
      real.dim() == 2 && fake.dim() == 2 && real.size(1) == fake.size(1) && real.size(0) > k && fake.size(0) > k,
      "precision/recall needs [N, D] features of one width and more than k = ", k, " points on each side");
  const torch::Tensor r = real.to(torch::kFloat64), f = fake.to(torch::kFloat64);
  // Each point's distance to its k-th nearest neighbour in its own set (the
  // k + 1 smallest distances include the point itself, at 0).
  auto radii = [k](const torch::Tensor& x) {
    return std::get<0>(torch::cdist(x, x).topk(k + 1, 1, /*largest=*/false)).select(1, k);
  };
  const torch::Tensor to_real = torch::cdist(f, r);  // [fake, real]
  PrecisionRecall pr;
  pr.precision = (to_real <= radii(r).unsqueeze(0)).any(1).to(torch::kFloat64).mean().item<double>();
  pr.recall = (to_real.t() <= radii(f).unsqueeze(0)).any(1).to(torch::kFloat64).mean().item<double>();
  return pr;
}

double kernel_distance(const torch::Tensor& real, const torch::Tensor& fake) {
  TORCH_CHECK(
      real.dim() == 2 && fake.dim() == 2 && real.size(1) == fake.size(1) && real.size(0) > 1 && fake.size(0) > 1,
      "KID needs [N, D] features of one width and at least 2 points on each side");
  const torch::Tensor x = real.to(torch::kFloat64), y = fake.to(torch::kFloat64);
  const double dim = double(x.size(1)), m = double(x.size(0)), n = double(y.size(0));
  auto kernel = [dim](const torch::Tensor& a, const torch::Tensor& b) { return (a.mm(b.t()) / dim + 1).pow(3); };
  const torch::Tensor kxx = kernel(x, x), kyy = kernel(y, y);
  const double xx = (kxx.sum() - kxx.diagonal().sum()).item<double>() / (m * (m - 1));
  const double yy = (kyy.sum() - kyy.diagonal().sum()).item<double>() / (n * (n - 1));
  const double xy = kernel(x, y).sum().item<double>() / (m * n);
  return xx + yy - 2 * xy;
}

double frechet_distance(const FeatureStats& a, const FeatureStats& b) {
  TORCH_CHECK(a.sum.defined() && b.sum.defined() && a.sum.size(0) == b.sum.size(0),
              "feature statistics of different widths");
  const torch::Tensor s1 = a.covariance(), s2 = b.covariance();
  // tr (S1 S2)^1/2 = tr (S1^1/2 S2 S1^1/2)^1/2: the square roots of a
  // symmetric positive semi-definite matrix's eigenvalues (clamped at 0
  // against rounding), so no complex sqrtm is needed.
  const auto [l1, v1] = at::linalg_eigh(s1, "L");
  const torch::Tensor root1 = (v1 * l1.clamp_min(0).sqrt().unsqueeze(0)).mm(v1.t());
  torch::Tensor m = root1.mm(s2).mm(root1);
  m = (m + m.t()) / 2;
  const double tr_sqrt = at::linalg_eigvalsh(m, "L").clamp_min(0).sqrt().sum().item<double>();
  const double d2 = (a.mean() - b.mean()).pow(2).sum().item<double>();
  const double fd = d2 + s1.trace().item<double>() + s2.trace().item<double>() - 2 * tr_sqrt;
  return std::isnan(fd) ? fd : std::max(0.0, fd);
}

// ---- the classifier ------------------------------------------------------------

FeatureModel::FeatureModel(const std::string& where, torch::Device device, const std::string& key)
    : key_(key), device_(device) {
  std::error_code ec;
  if (!fs::exists(where, ec))
    throw Error(key + ": " + where +
                " does not exist (train the classifier first: gantry train "
                "configs/classifier_fashion_mnist.yaml; or name a classifier checkpoint, run or experiment directory)");
  // As sample and serve take it: a run's best.ckpt, else its newest valid checkpoint.
  const ResolvedCheckpoint found = resolve_checkpoint(where, CheckpointUse::kInference);
  if (!found.found())
    throw Error(key + ": no valid checkpoint in " + where +
                " (train the classifier first: gantry train configs/classifier_fashion_mnist.yaml)");
  checkpoint_ = found.path;
  exp_ = Experiment::load_trained(*found.file, device).experiment;
  try {
    exp_.system->check_features();
  } catch (const PluginError& e) {
    throw PluginError(key + ": " + e.what() + " (" + checkpoint_ + ")");
  }
  spec_ = exp_.system->data_spec();
}

void FeatureModel::check_shape(const std::string& generator_plugin, const std::vector<int64_t>& shape) const {
  if (shape.empty() || spec_.shape.empty() || shape == spec_.shape) return;
  std::ostringstream s;
  s << key_ << ": plugin " << generator_plugin << " generates " << c10::IntArrayRef(shape) << " samples, plugin "
    << plugin_name() << " (" << checkpoint_ << ") embeds images " << c10::IntArrayRef(spec_.shape);
  throw ConfigError(s.str());
}

void FeatureModel::embed(const torch::Tensor& x, FeatureStats& stats, int64_t first) {
  const torch::Tensor features = exp_.system->features(x);
  if (!features.defined() || features.dim() != 2 || features.size(0) != x.size(0))
    throw PluginError(key_ + ": plugin " + plugin_name() + "'s features() gives no [N, D] embedding");
  const torch::Tensor logits = exp_.system->forward(x);
  if (logits.dim() != 2 || logits.size(0) != x.size(0) || logits.size(1) < 2)
    throw PluginError(key_ + ": plugin " + plugin_name() + "'s forward() gives no class logits [N, classes]");
  stats.add(features, logits, first);
}

void FeatureModel::add(const torch::Tensor& images, double low, double high, FeatureStats& stats, int64_t batch_size,
                       int64_t first) {
  if (!spec_.shape.empty() && (images.dim() != 4 || images.sizes().slice(1).vec() != spec_.shape)) {
    std::ostringstream s;
    s << key_ << ": the samples are " << images.sizes() << ", plugin " << plugin_name() << " (" << checkpoint_
      << ") embeds images " << c10::IntArrayRef(spec_.shape);
    throw Error(s.str());
  }
  torch::NoGradGuard no_grad;
  const double scale = (spec_.high - spec_.low) / (high - low);
  for (int64_t a = 0; a < images.size(0); a += batch_size) {
    torch::Tensor x = images.slice(0, a, std::min(a + batch_size, images.size(0))).to(device_, torch::kFloat32);
    if (low != spec_.low || high != spec_.high) x = (x - low) * scale + spec_.low;
    embed(x, stats, first < 0 ? -1 : first + a);
  }
}

void FeatureModel::add_pixels(const torch::Tensor& pixels, FeatureStats& stats, int64_t batch_size) {
  add(pixels, 0, 255, stats, batch_size);
}

FeatureStats FeatureModel::real_stats(int64_t batch_size, std::string* note, int64_t keep) {
  const DataOptions& data = exp_.config.data;
  ImageDataset real;
  try {
    real = load_split(data, Split::kVal, spec_.shape);
  } catch (const std::exception& e) {
    throw DataError(key_ + ": the classifier's validation split: " + error_text(e));
  }
  // What the cache was made from: the split's files, by content.
  const std::string made_from = std::string(choice_name(data.format)) + " " + data.path + " " + data.val_prefix + " " +
                                std::to_string(real.size()) + " images, checksum " +
                                std::to_string(real.images.to(torch::kInt64).sum().item<int64_t>());
  const std::string cache = checkpoint_ + ".real_stats";
  std::error_code ec;
  if (fs::exists(cache, ec)) {
    try {
      std::ifstream in(cache, std::ios::binary);
      const std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      const auto d = c10::impl::toTypedDict<std::string, torch::Tensor>(torch::pickle_load(bytes).toGenericDict());
      const torch::Tensor from = d.at("made_from");
      if (std::string(static_cast<const char*>(from.data_ptr()), size_t(from.numel())) == made_from) {
        FeatureStats cached = FeatureStats::from_dict(d);
        // A cache made with fewer kept features than asked (an older gantry: none) is made anew.
        if (cached.keep >= std::min(keep, cached.count)) {
          if (note) *note = "cached in " + cache;
          return cached;
        }
      }
    } catch (const std::exception&) {
      // unreadable or of other files: made anew below
    }
  }
  FeatureStats stats;
  stats.keep = keep;
  add_pixels(real.images, stats, batch_size);
  auto d = stats.to_dict();
  d.insert("made_from",
           torch::from_blob(const_cast<char*>(made_from.data()), {int64_t(made_from.size())}, torch::kUInt8).clone());
  try {
    const std::vector<char> bytes = torch::pickle_save(d);
    write_file_atomic(cache, std::string(bytes.begin(), bytes.end()));
    if (note) *note = "embedded now, cached in " + cache;
  } catch (const std::exception& e) {
    if (note) *note = "embedded now; not cached (" + error_text(e) + ")";
  }
  return stats;
}

}  // namespace gantry
