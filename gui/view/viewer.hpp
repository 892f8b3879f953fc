// gantry-view's one window, drawn with Dear ImGui: the loss curves (ImGui
// draw lists, painting gantry::client's chart model), the newest
// image grid as a texture with a step slider, the run's status, per-rank rows
// and the events. All data comes from a client::RunState; this only draws.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "chart.hpp"
#include "run_state.hpp"
#include "series.hpp"
#include "source.hpp"

namespace gantry::view {

class Viewer {
 public:
  Viewer() = default;
  ~Viewer();
  Viewer(const Viewer&) = delete;
  Viewer& operator=(const Viewer&) = delete;

  /// Draws one frame's ImGui widgets filling the display (between NewFrame and Render).
  void draw(const client::RunState& state, const client::SourceStatus& source);

 private:
  void draw_status(const client::RunState& state, const client::SourceStatus& source);
  void draw_chart(const std::vector<client::ChartRun>& runs, const std::string& group, float height);
  void draw_image(const client::RunState& state);
  void draw_ranks(const client::RunState& state);
  void draw_events(const client::RunState& state);
  /// Uploads image `i` of the state as the texture (when it is not the one shown).
  void upload(const client::RunState& state, int i);

  float smoothing_ = 0.6f;
  bool log_y_ = false;
  bool follow_ = true;
  int image_ = -1;            // index of the grid shown
  int texture_image_ = -1;    // index of the grid in the texture
  uint64_t texture_key_ = 0;  // (state's images count) when uploaded: a resume may replace grids
  unsigned texture_ = 0;
  int tex_w_ = 0, tex_h_ = 0;
  client::ChartModel charts_;  // ranges, ticks, decimated lines, read-out (gui/client/chart.hpp)
};

}  // namespace gantry::view
