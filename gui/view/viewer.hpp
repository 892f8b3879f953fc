// gantry-view's one window, drawn with Dear ImGui: the loss curves (ImGui
// draw lists, painting gantry::client's chart model), the newest
// image grid as a texture with a step slider, the run's status, per-rank rows
// and the events. All data comes from a client::RunState; this only draws.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chart.hpp"
#include "ranks_model.hpp"
#include "run_state.hpp"
#include "search.hpp"
#include "series.hpp"
#include "source.hpp"

namespace gantry::view {

/// One run the viewer shows: where its messages come from and what they built.
struct ViewRun {
  std::string name;  ///< legend and runs-table label
  std::unique_ptr<client::Source> source;
  client::RunState state;
  bool visible = true;  ///< its lines are drawn (the runs table's checkbox)
};

class Viewer {
 public:
  Viewer() = default;
  ~Viewer();
  Viewer(const Viewer&) = delete;
  Viewer& operator=(const Viewer&) = delete;

  /// Draws one frame's ImGui widgets filling the display (between NewFrame
  /// and Render). One run: its charts, grid, ranks and events. Several: their
  /// lines overlaid (a colour per run), the runs table (visible toggles,
  /// status, step, final values, the config keys that differ) in place of
  /// the ranks; grid, status, ranks' and events of the run selected in it.
  /// `search`: the trials among the runs (their status, rung and score).
  void draw(std::vector<ViewRun>& runs, const client::SearchFollower* search = nullptr);

 private:
  void draw_runs(std::vector<ViewRun>& runs, const std::vector<client::ChartRun>& chart_runs,
                 const client::SearchFollower* search);
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
  bool slowest_first_ = false;  // the ranks: the slowest node and rank first
  int image_ = -1;              // index of the grid shown
  int texture_image_ = -1;      // index of the grid in the texture
  int texture_run_ = -1;        // the run whose grid is in the texture
  int selected_ = 0;            // the run whose grid, status and events are shown
  uint64_t texture_key_ = 0;    // (state's images count) when uploaded: a resume may replace grids
  unsigned texture_ = 0;
  int tex_w_ = 0, tex_h_ = 0;
  client::RunsTableModel table_;  // the runs table's metric and config-key columns
  client::ChartModel charts_;     // ranges, ticks, decimated lines, read-out (gui/client/chart.hpp)
};

}  // namespace gantry::view
