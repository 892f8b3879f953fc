// The sample-quality score (docs/quality.md): a frozen classifier's features
// of generated samples against those of the real validation split. FID's
// recipe with a classifier gantry trains itself instead of Inception (whose
// weights cannot be fetched on an offline cluster):
//   Frechet distance  |mu_g - mu_r|^2 + tr(S_g + S_r - 2 (S_g S_r)^1/2)
//                     of the features' means and covariances (0: the same
//                     Gaussian; grows with any difference)
//   class entropy     of the classifier's predicted classes of the samples,
//                     in nats: ln(classes) when every class is generated
//                     equally often, 0 when all samples are one class
//   precision, recall Kynkaanniemi et al. 2019 with k = 3, on the first M
//                     samples' and real images' features: the share of
//                     samples inside some real image's 3-NN ball (bad samples
//                     lower it), and of real images inside some sample's
//                     (mode collapse lowers it)
//   KID               the unbiased squared MMD with the kernel (x.y/D + 1)^3
//                     (Binkowski et al. 2018), on the same M
#pragma once

#include <cstdint>
#include <string>

#include "gantry/core_export.hpp"
#include "gantry/system.hpp"
#include "train/experiment.hpp"

namespace gantry {

class Accelerator;

/// Sums over samples of the features x (float64, on the CPU): the count, sum
/// x, sum x x^T and the histogram of predicted classes. Sums add across
/// ranks and chunks, so a sharded score is one all-reduce.
struct GANTRY_CORE_EXPORT FeatureStats {
  int64_t count = 0;
  torch::Tensor sum;      ///< [D]
  torch::Tensor outer;    ///< [D, D]
  torch::Tensor classes;  ///< [C] samples per predicted class
  /// The features of the first `keep` samples by index (precision, recall,
  /// KID): row i is sample i's, zeros until it is added, so the rows of
  /// samples embedded on several ranks add up in allreduce().
  int64_t keep = 0;
  torch::Tensor kept;  ///< [keep, D] float64

  /// features [N, D], logits [N, C] of the same N samples; `first`: the
  /// index of the first of them among all samples (-1: the count so far).
  void add(const torch::Tensor& features, const torch::Tensor& logits, int64_t first = -1);
  /// The kept rows that hold a sample: the first min(keep, count).
  torch::Tensor kept_features() const;
  torch::Tensor mean() const;
  torch::Tensor covariance() const;  ///< unbiased (count - 1)
  double class_entropy() const;
  /// Every rank's sums added (a collective; a no-op in a world of one).
  /// Every rank must have added features of the same width.
  void allreduce(const Accelerator& accel);
  /// As a dictionary of tensors (the cache file) and back.
  c10::Dict<std::string, torch::Tensor> to_dict() const;
  static FeatureStats from_dict(const c10::Dict<std::string, torch::Tensor>& d);
};

/// The Frechet distance between the Gaussians of two feature statistics
/// (float64; eigen-decompositions instead of scipy's sqrtm), >= 0.
GANTRY_CORE_EXPORT double frechet_distance(const FeatureStats& a, const FeatureStats& b);

/// Improved precision and recall (Kynkaanniemi et al. 2019) of `fake`
/// against `real` features [N, D]: each point's ball reaches its k-th nearest
/// neighbour of its own set.
struct PrecisionRecall {
  double precision = 0, recall = 0;
};
GANTRY_CORE_EXPORT PrecisionRecall precision_recall(const torch::Tensor& real, const torch::Tensor& fake,
                                                    int64_t k = 3);
/// KID: the unbiased squared MMD between `real` and `fake` features [N, D]
/// with the polynomial kernel (x.y / D + 1)^3; ~0 for one distribution.
GANTRY_CORE_EXPORT double kernel_distance(const torch::Tensor& real, const torch::Tensor& fake);

/// A trained classifier plugin (SDK 1.2 features()) loaded from its
/// checkpoint, frozen, in eval mode on `device`.
class GANTRY_CORE_EXPORT FeatureModel {
 public:
  /// `where`: a checkpoint file, a run directory or an experiment directory
  /// (its best.ckpt, else its newest valid checkpoint: checkpoint/resolve.hpp). Leaves the global generators as they
  /// were. Throws Error / PluginError naming `key` and the culprit.
  FeatureModel(const std::string& where, torch::Device device, const std::string& key);

  const std::string& checkpoint() const { return checkpoint_; }
  const std::string& plugin_name() const { return exp_.system->name(); }
  const DataSpec& spec() const { return spec_; }

  /// Throws ConfigError (naming the key) when a generator's sample shape
  /// (its DataSpec's; empty: unknown, not checked) is not what this embeds.
  void check_shape(const std::string& generator_plugin, const std::vector<int64_t>& shape) const;
  /// Embeds images [N, C, H, W] whose pixels span [low, high] (mapped to the
  /// classifier's range), `batch_size` at a time, into `stats`.
  /// `first`: the index of the first image among all samples (FeatureStats::add).
  void add(const torch::Tensor& images, double low, double high, FeatureStats& stats, int64_t batch_size,
           int64_t first = -1);
  /// uint8 images [N, C, H, W] (a dataset's) into `stats`.
  void add_pixels(const torch::Tensor& pixels, FeatureStats& stats, int64_t batch_size);
  /// The classifier's own validation split (its config's data.*), embedded
  /// once and cached beside its checkpoint (<checkpoint>.real_stats; rebuilt
  /// when the split's files change). `note`: how they were obtained.
  /// `keep`: the first images' features kept (FeatureStats::keep).
  FeatureStats real_stats(int64_t batch_size, std::string* note, int64_t keep = 0);

 private:
  void embed(const torch::Tensor& x, FeatureStats& stats, int64_t first);

  std::string key_;
  std::string checkpoint_;
  Experiment exp_;
  DataSpec spec_;
  torch::Device device_;
};

}  // namespace gantry
