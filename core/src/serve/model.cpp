#include "serve/model.hpp"

#include "data/image_grid.hpp"
#include "io/png.hpp"
#include "serve/http_error.hpp"
#include "serve/parse.hpp"

namespace gantry::serve {

namespace {
std::vector<int64_t> dims(c10::IntArrayRef s) { return {s.begin(), s.end()}; }
}  // namespace

ServedModel::ServedModel(const ResolvedCheckpoint& resolved, const std::string& plugin) {
  checkpoint = resolved.path;
  trained = Experiment::load_trained(*resolved.file, torch::kCPU, plugin);
  spec = system().data_spec();
  torch::NoGradGuard no_grad;
  GlobalRngGuard rng(torch::kCPU);
  const torch::Tensor one = system().sample_input(1, -1);
  input_shape = dims(one.sizes().slice(1));
  const torch::Tensor out = system().forward(one, -1);
  output_shape = dims(out.sizes().slice(1));
}

torch::Tensor ServedModel::forward(const torch::Tensor& batch) {
  std::lock_guard lock(forward_m_);
  return system().forward(batch, -1);
}

std::string npy_of(const torch::Tensor& t) {
  const torch::Tensor c = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  return npy_bytes(dims(c.sizes()), c.data_ptr<float>(), size_t(c.numel()));
}

ServedModel::Encoded ServedModel::encode(const torch::Tensor& out, const std::string& format, int64_t rows) {
  if (format == "npy") return {npy_of(out), "application/octet-stream"};
  if (format == "json") {
    const torch::Tensor c = out.to(torch::kFloat32).contiguous();
    return {json_rows(dims(c.sizes()), c.data_ptr<float>(), size_t(c.numel())), "application/json"};
  }
  torch::Tensor shown = out;
  double low = spec.low, high = spec.high;
  if (const torch::Tensor r = system().render_samples(out); r.defined()) {
    shown = r;
    low = 0;
    high = 1;
  }
  if (shown.dim() != 4)
    throw HttpError(400,
                    "the output is " + shape_json(dims(out.sizes())) + ", not images [N, C, H, W]: ask format=npy");
  const int64_t cols = grid_columns(shown.size(0), rows > 0 ? rows : trained.experiment.config.trainer.grid_rows);
  return {encode_png(make_grid(shown, cols, 2, low, high)), "image/png"};
}

}  // namespace gantry::serve
