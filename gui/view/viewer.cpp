#include "viewer.hpp"

#include <GL/gl.h>
#include <imgui.h>
#include <stb/stb_image.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace gantry::view {

namespace {

ImU32 color(uint32_t rgb, int alpha) { return IM_COL32((rgb >> 16) & 0xff, (rgb >> 8) & 0xff, rgb & 0xff, alpha); }

double now_unix() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

std::string hms(double unix_s) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

}  // namespace

Viewer::~Viewer() {
  if (texture_) glDeleteTextures(1, &texture_);
}

void Viewer::draw(std::vector<ViewRun>& runs, const client::SearchFollower* search) {
  if (selected_ < 0 || selected_ >= static_cast<int>(runs.size())) selected_ = 0;
  const client::RunState& state = runs[static_cast<size_t>(selected_)].state;
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(vp->WorkPos);
  ImGui::SetNextWindowSize(vp->WorkSize);
  ImGui::Begin("gantry-view", nullptr,
               ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoSavedSettings |
                   ImGuiWindowFlags_NoBringToFrontOnFocus);
  draw_status(state, runs[static_cast<size_t>(selected_)].source->status());
  const bool several = runs.size() > 1;
  // runs, or ranks (a strip and a table: taller for many ranks); events
  const float bottom = several ? 190 : state.ranks().size() > 8 ? 320 : 170;
  const float avail_h = ImGui::GetContentRegionAvail().y - bottom;
  const float left_w = ImGui::GetContentRegionAvail().x * 0.6f;

  ImGui::BeginChild("charts", ImVec2(left_w, avail_h));
  ImGui::SetNextItemWidth(160);
  ImGui::SliderFloat("smoothing", &smoothing_, 0.0f, 0.999f, "%.3f");
  ImGui::SameLine();
  ImGui::Checkbox("log y", &log_y_);
  std::vector<client::ChartRun> chart_runs;
  for (const auto& r : runs) chart_runs.push_back({r.name, &r.state.series(), r.visible});
  const std::vector<std::string> groups = client::chart_groups(chart_runs);
  if (groups.empty()) ImGui::TextDisabled("no scalars yet");
  const float chart_h =
      groups.empty()
          ? 0
          : std::max(120.0f, (ImGui::GetContentRegionAvail().y - ImGui::GetStyle().ItemSpacing.y * groups.size()) /
                                 static_cast<float>(groups.size()));
  for (const auto& g : groups) draw_chart(chart_runs, g, chart_h);
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("image", ImVec2(0, avail_h));
  draw_image(state);
  ImGui::EndChild();

  ImGui::BeginChild("ranks", ImVec2(left_w, 0), true);
  if (several)
    draw_runs(runs, chart_runs, search);
  else
    draw_ranks(state);
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("events", ImVec2(0, 0), true);
  draw_events(runs[static_cast<size_t>(selected_)].state);
  ImGui::EndChild();
  ImGui::End();
}

void Viewer::draw_runs(std::vector<ViewRun>& runs, const std::vector<client::ChartRun>& chart_runs,
                       const client::SearchFollower* search) {
  std::vector<std::string> configs;
  for (const auto& r : runs) configs.push_back(r.state.info() ? r.state.info()->config_yaml : "");
  const client::RunsTable& t = table_.update(chart_runs, configs);
  const std::vector<std::string>& metrics = t.metrics;
  const std::vector<std::string>& keys = t.keys;
  const bool trials = search && search->any();  // a search's: its rung and score columns
  const std::string score_title = trials ? "score (" + search->metric() + ")" : "";
  const int columns = (trials ? 6 : 4) + static_cast<int>(metrics.size() + keys.size());
  if (!ImGui::BeginTable(
          "runs", columns,
          ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_ScrollY | ImGuiTableFlags_ScrollX))
    return;
  ImGui::TableSetupColumn("show", ImGuiTableColumnFlags_WidthFixed);
  ImGui::TableSetupColumn("run");
  ImGui::TableSetupColumn("status", ImGuiTableColumnFlags_WidthFixed);
  ImGui::TableSetupColumn("step", ImGuiTableColumnFlags_WidthFixed);
  if (trials) {
    ImGui::TableSetupColumn("rung", ImGuiTableColumnFlags_WidthFixed);
    ImGui::TableSetupColumn(score_title.c_str(), ImGuiTableColumnFlags_WidthFixed);
  }
  for (const auto& m : metrics) ImGui::TableSetupColumn(m.c_str());
  for (const auto& k : keys) ImGui::TableSetupColumn(k.c_str());
  ImGui::TableSetupScrollFreeze(2, 1);
  ImGui::TableHeadersRow();
  for (size_t i = 0; i < runs.size(); ++i) {
    ViewRun& r = runs[i];
    ImGui::PushID(static_cast<int>(i));
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    const uint32_t rgb = client::series_color(i);  // the run's colour in every chart
    ImGui::PushStyleColor(ImGuiCol_CheckMark, ImGui::ColorConvertU32ToFloat4(color(rgb, 255)));
    ImGui::PushStyleColor(ImGuiCol_FrameBg, ImGui::ColorConvertU32ToFloat4(color(rgb, 90)));
    ImGui::Checkbox("##show", &r.visible);
    ImGui::PopStyleColor(2);
    ImGui::TableNextColumn();
    if (ImGui::Selectable(r.name.c_str(), selected_ == static_cast<int>(i),
                          ImGuiSelectableFlags_SpanAllColumns | ImGuiSelectableFlags_AllowItemOverlap))
      selected_ = static_cast<int>(i);
    const std::optional<client::TrialRow> trial = trials ? search->row(i) : std::nullopt;
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(trial ? trial->status.c_str() : client::to_string(r.state.status()));
    if (trial && !trial->note.empty() && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", trial->note.c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%lld", static_cast<long long>(r.state.latest_step()));
    if (trials) {
      ImGui::TableNextColumn();
      if (trial) ImGui::TextUnformatted(trial->rung.c_str());
      ImGui::TableNextColumn();
      if (trial) ImGui::TextUnformatted(trial->score.c_str());
    }
    for (const auto& m : metrics) {
      ImGui::TableNextColumn();
      const auto it = r.state.series().find(m);
      if (it != r.state.series().end() && it->second.size()) ImGui::Text("%.4g", it->second.values.back());
    }
    for (const auto& k : keys) {
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(t.values.at(k)[i].c_str());
    }
    ImGui::PopID();
  }
  ImGui::EndTable();
}

void Viewer::draw_status(const client::RunState& state, const client::SourceStatus& source) {
  const auto& info = state.info();
  ImGui::Text("%s", info ? (info->name + "  (" + info->plugin + " " + info->plugin_version + ")").c_str()
                         : "waiting for the run");
  ImGui::SameLine();
  const client::RunStatus st = state.status();
  const ImVec4 status_color = st == client::RunStatus::kFailed    ? ImVec4(1, 0.3f, 0.3f, 1)
                              : st == client::RunStatus::kRunning ? ImVec4(0.4f, 0.9f, 0.4f, 1)
                              : st == client::RunStatus::kLost    ? ImVec4(1, 0.65f, 0.1f, 1)
                                                                  : ImVec4(0.8f, 0.8f, 0.8f, 1);
  ImGui::TextColored(status_color, "[%s]", client::to_string(st));
  ImGui::SameLine();
  if (info && info->total_steps > 0)
    ImGui::Text("step %lld / %lld", static_cast<long long>(state.latest_step()),
                static_cast<long long>(info->total_steps));
  else
    ImGui::Text("step %lld", static_cast<long long>(state.latest_step()));
  if (info) {
    ImGui::SameLine();
    const bool running = st == client::RunStatus::kRunning;
    const double end = running ? std::max(state.latest_wall_time(), now_unix()) : state.latest_wall_time();
    const double sps = state.seconds_per_step();
    ImGui::Text("| %u rank%s, %u node%s | elapsed %s | %s | ETA %s", info->world_size, info->world_size == 1 ? "" : "s",
                info->num_nodes, info->num_nodes == 1 ? "" : "s", client::duration_text(end - info->start_time).c_str(),
                sps > 0 ? (std::to_string(static_cast<int>(1.0 / sps + 0.5)) + " steps/s").c_str() : "- steps/s",
                running ? client::duration_text(state.eta_seconds()).c_str() : "-");
  }
  if (st == client::RunStatus::kLost) ImGui::TextColored(ImVec4(1, 0.65f, 0.1f, 1), "%s", state.lost_text().c_str());
  ImGui::TextDisabled("%s: %s", client::to_string(source.state), source.text.c_str());
  if (const wire::Event* alert = state.current_alert()) {
    const wire::Event& e = *alert;
    ImGui::PushStyleColor(ImGuiCol_ChildBg, IM_COL32(198, 40, 40, 255));
    ImGui::BeginChild("alert", ImVec2(0, ImGui::GetTextLineHeightWithSpacing() + 8), false);
    ImGui::SetCursorPos(ImVec2(6, 4));
    if (e.kind == "nan")
      ImGui::Text("NaN or Inf in %s at step %lld", e.text.c_str(), static_cast<long long>(e.step));
    else
      ImGui::Text("Run failed at step %lld: %s", static_cast<long long>(e.step), e.text.c_str());
    ImGui::EndChild();
    ImGui::PopStyleColor();
  }
}

void Viewer::draw_chart(const std::vector<client::ChartRun>& runs, const std::string& group, float height) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  const ImVec2 size(ImGui::GetContentRegionAvail().x, height);
  ImGui::InvisibleButton(group.c_str(), size);
  const bool hovered = ImGui::IsItemHovered();
  const ImVec2 p1(p0.x + size.x, p0.y + size.y);
  dl->AddRectFilled(p0, p1, IM_COL32(24, 24, 28, 255));
  const float left = 56, right = 10, top = 22, below = 20;
  const ImVec2 a(p0.x + left, p0.y + top), b(p1.x - right, p1.y - below);
  if (b.x - a.x < 20 || b.y - a.y < 20) return;
  dl->AddText(ImVec2(p0.x + 6, p0.y + 4), IM_COL32(230, 230, 230, 255), group.c_str());

  client::ChartOptions opt;
  opt.smoothing = smoothing_;
  opt.log_y = log_y_;
  opt.columns = static_cast<int>(b.x - a.x);
  const client::Chart chart = charts_.build(runs, group, opt);
  if (chart.lines.empty()) return;
  const double x0 = chart.x.lo, x1 = chart.x.hi, y0 = chart.y.lo, y1 = chart.y.hi;
  auto px = [&](double x) { return static_cast<float>(a.x + (x - x0) / (x1 - x0) * (b.x - a.x)); };
  auto py = [&](double axis_y) { return static_cast<float>(b.y - (axis_y - y0) / (y1 - y0) * (b.y - a.y)); };

  // Grid and tick labels at round values.
  const ImU32 grid = IM_COL32(70, 70, 78, 255), label = IM_COL32(170, 170, 170, 255);
  char buf[64];
  for (double t : chart.y.ticks) {
    dl->AddLine(ImVec2(a.x, py(t)), ImVec2(b.x, py(t)), grid);
    dl->AddText(ImVec2(p0.x + 4, py(t) - 7), label, chart.y_label(t).c_str());
  }
  for (double t : chart.x.ticks) {
    dl->AddLine(ImVec2(px(t), a.y), ImVec2(px(t), b.y), grid);
    std::snprintf(buf, sizeof buf, "%.6g", t);
    // Centred on its tick, but inside the chart: the last one ("1000") was cut to "100" at the right edge.
    const float w = ImGui::CalcTextSize(buf).x;
    dl->AddText(ImVec2(std::clamp(px(t) - w / 2, p0.x + 2, p1.x - w - 2), b.y + 3), label, buf);
  }
  dl->PushClipRect(a, b, true);
  std::vector<ImVec2> pts;
  auto polyline = [&](const std::vector<double>& x, const std::vector<double>& y, ImU32 col, float thick) {
    pts.clear();
    for (size_t i = 0; i < x.size(); ++i) pts.emplace_back(px(x[i]), py(chart.to_axis(y[i])));
    if (pts.size() >= 2) dl->AddPolyline(pts.data(), static_cast<int>(pts.size()), col, 0, thick);
  };
  for (const auto& line : chart.lines) {
    polyline(line.x, line.y, color(line.color, smoothing_ > 0 ? 80 : 255), 1.0f);
    if (line.markers)
      for (size_t i = 0; i < line.x.size(); ++i)
        dl->AddCircleFilled(ImVec2(px(line.x[i]), py(chart.to_axis(line.y[i]))), 3.0f, color(line.color, 255));
    polyline(line.sx, line.sy, color(line.color, 255), 2.0f);
  }
  dl->PopClipRect();
  // Legend, then the hover read-out.
  float lx = p0.x + 12 + ImGui::CalcTextSize(group.c_str()).x;
  for (const auto& line : chart.lines) {
    dl->AddRectFilled(ImVec2(lx + 6, p0.y + 8), ImVec2(lx + 14, p0.y + 16), color(line.color, 255));
    dl->AddText(ImVec2(lx + 18, p0.y + 4), label, line.label.c_str());
    lx += 28 + ImGui::CalcTextSize(line.label.c_str()).x;
  }
  if (hovered) {
    const double at = x0 + (ImGui::GetIO().MousePos.x - a.x) / (b.x - a.x) * (x1 - x0);
    const std::string text = charts_.readout(runs, chart, at);
    if (!text.empty()) ImGui::SetTooltip("%s", text.c_str());
  }
}

void Viewer::upload(const client::RunState& state, int i) {
  const uint64_t key = state.images().size();
  if (i == texture_image_ && key == texture_key_ && selected_ == texture_run_) return;
  texture_run_ = selected_;
  const std::string& png = state.images()[static_cast<size_t>(i)].png;
  int w = 0, h = 0, n = 0;
  unsigned char* rgba = stbi_load_from_memory(reinterpret_cast<const unsigned char*>(png.data()),
                                              static_cast<int>(png.size()), &w, &h, &n, 4);
  texture_image_ = i;
  texture_key_ = key;
  if (!rgba) {
    tex_w_ = tex_h_ = 0;
    return;
  }
  if (!texture_) glGenTextures(1, &texture_);
  glBindTexture(GL_TEXTURE_2D, texture_);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
  glPixelStorei(GL_UNPACK_ALIGNMENT, 1);
  glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA, w, h, 0, GL_RGBA, GL_UNSIGNED_BYTE, rgba);
  stbi_image_free(rgba);
  tex_w_ = w, tex_h_ = h;
}

void Viewer::draw_image(const client::RunState& state) {
  const int n = static_cast<int>(state.images().size());
  if (n == 0) {
    ImGui::TextDisabled("no image yet");
    return;
  }
  if (follow_ || image_ < 0 || image_ >= n) image_ = n - 1;
  upload(state, image_);
  const wire::Image& img = state.images()[static_cast<size_t>(image_)];
  ImGui::Text("%s at step %lld  (%d of %d)", img.tag.c_str(), static_cast<long long>(img.step), image_ + 1, n);
  const ImVec2 room(ImGui::GetContentRegionAvail().x,
                    ImGui::GetContentRegionAvail().y - 2 * ImGui::GetFrameHeightWithSpacing());
  if (tex_w_ > 0 && room.x > 0 && room.y > 0) {
    // Whole-pixel scale when it fits (crisp), else shrink to fit.
    float k = std::min(room.x / tex_w_, room.y / tex_h_);
    if (k >= 1) k = std::floor(k);
    ImGui::SetCursorPosX(ImGui::GetCursorPosX() + std::floor((room.x - tex_w_ * k) / 2));  // whole pixels
    ImGui::Image(reinterpret_cast<ImTextureID>(static_cast<intptr_t>(texture_)), ImVec2(tex_w_ * k, tex_h_ * k));
  } else if (tex_w_ == 0) {
    ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "this grid's PNG does not decode");
  }
  ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.7f);
  int pick = image_;
  if (ImGui::SliderInt("##step", &pick, 0, n - 1, "grid %d") && pick != image_) {
    image_ = pick;
    follow_ = image_ == n - 1;
  }
  ImGui::SameLine();
  ImGui::Checkbox("follow latest", &follow_);
}

namespace {

// The strip: per node its name and a cell per rank (heat: busy time against
// the job's median; under it the step's parts; a red frame: a straggler),
// each with its tooltip.
void draw_rank_strip(const client::RanksSummary& summary) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float width = ImGui::GetContentRegionAvail().x;
  constexpr float kCellW = 12, kCellH = 17, kHeat = 11, kGap = 2, kLine = 21;
  float label_w = 0;
  for (const auto& n : summary.nodes) label_w = std::max(label_w, ImGui::CalcTextSize(n.host.c_str()).x);
  label_w = std::min(label_w, 110.0f) + 6;
  float x = 0, y = 0;
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  const client::RankCell* hovered = nullptr;
  const client::NodeGroup* hovered_node = nullptr;
  for (const auto& n : summary.nodes) {
    const float block = label_w + static_cast<float>(n.ranks.size()) * (kCellW + kGap) + 10;
    if (x > 0 && x + block > width) {
      x = 0;
      y += kLine;
    }
    const ImVec2 label(origin.x + x, origin.y + y);
    dl->AddText(label, n.stragglers ? IM_COL32(255, 90, 90, 255) : IM_COL32(220, 220, 220, 255), n.host.c_str());
    if (mouse.x >= label.x && mouse.x < label.x + label_w && mouse.y >= label.y && mouse.y < label.y + kCellH)
      hovered_node = &n;
    float cx = x + label_w;
    for (const auto& c : n.ranks) {
      if (cx + kCellW > width) {
        cx = x + label_w;
        y += kLine;
      }
      const ImVec2 a(origin.x + cx, origin.y + y), b(a.x + kCellW, a.y + kHeat);
      dl->AddRectFilled(a, b, c.stale ? IM_COL32(120, 120, 120, 255) : color(client::heat_rgb(c.heat), 255));
      const auto parts = client::step_parts(c.status);
      double total = 0;
      for (const auto& p : parts) total += std::max(0.0, p.ms);
      float px = a.x;
      for (const auto& p : parts) {
        const float w = total > 0 ? kCellW * static_cast<float>(std::max(0.0, p.ms) / total) : 0;
        dl->AddRectFilled(ImVec2(px, a.y + kHeat + 1), ImVec2(px + w, a.y + kCellH), color(p.rgb, 255));
        px += w;
      }
      if (c.straggler)
        dl->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(b.x + 1, a.y + kCellH + 1), IM_COL32(255, 0, 0, 255), 0, 0, 2);
      if (mouse.x >= a.x && mouse.x < b.x + kGap && mouse.y >= a.y && mouse.y < a.y + kCellH) hovered = &c;
      cx += kCellW + kGap;
    }
    x = cx + 10;
  }
  ImGui::Dummy(ImVec2(width, y + kLine));
  if (hovered && ImGui::IsWindowHovered()) ImGui::SetTooltip("%s", client::rank_detail(*hovered).c_str());
  if (hovered_node && ImGui::IsWindowHovered())
    ImGui::SetTooltip("%s: %zu ranks, busy median %.2f ms, max %.2f ms, %d straggler(s), %d stopped reporting",
                      hovered_node->host.c_str(), hovered_node->ranks.size(), hovered_node->busy_median,
                      hovered_node->busy_max, hovered_node->stragglers, hovered_node->stale);
}

// The table: a row per rank (grouped by node across nodes, a node's own row first).
void draw_rank_table(const client::RanksSummary& summary, bool live, double now) {
  const char* heads[] = {"rank", "host",   "step",  "samples/s", "step ms", "busy ms", "data",     "compute",
                         "comm", "optim.", "other", "CPU %",     "RSS MiB", "GPU",     "last seen"};
  constexpr int kColumns = static_cast<int>(sizeof heads / sizeof heads[0]);
  if (!ImGui::BeginTable(
          "ranks", kColumns,
          ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_ScrollY | ImGuiTableFlags_ScrollX))
    return;
  for (const char* h : heads) ImGui::TableSetupColumn(h);
  ImGui::TableSetupScrollFreeze(1, 1);
  ImGui::TableHeadersRow();
  auto cell_ms = [](double v) {
    ImGui::TableNextColumn();
    if (v < 0)
      ImGui::TextDisabled("-");
    else
      ImGui::Text(v < 10 ? "%.2f" : "%.1f", v);
  };
  const bool grouped = summary.nodes.size() > 1;
  for (const auto& n : summary.nodes) {
    if (grouped) {  // the node's row
      ImGui::TableNextRow();
      ImGui::TableSetBgColor(ImGuiTableBgTarget_RowBg0,
                             n.stragglers ? IM_COL32(110, 40, 40, 255) : IM_COL32(60, 60, 70, 255));
      ImGui::TableNextColumn();
      ImGui::Text("%zu ranks", n.ranks.size());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(n.host.c_str());
      ImGui::TableNextColumn();
      ImGui::TableNextColumn();
      ImGui::Text("%.1f", n.samples_per_s);
      ImGui::TableNextColumn();
      cell_ms(n.busy_median);
      for (int c = 6; c < kColumns - 1; ++c) ImGui::TableNextColumn();
      ImGui::TableNextColumn();
      if (n.stragglers)
        ImGui::Text("%d straggler(s)", n.stragglers);
      else if (n.max_ratio >= 0)
        ImGui::Text("slowest %.1fx the median", n.max_ratio);
    }
    for (const auto& c : n.ranks) {
      const wire::RankStatus& r = c.status;
      ImGui::TableNextRow();
      if (c.stale)
        ImGui::TableSetBgColor(ImGuiTableBgTarget_RowBg0, IM_COL32(150, 40, 40, 255));
      else if (c.straggler)
        ImGui::TableSetBgColor(ImGuiTableBgTarget_RowBg0, IM_COL32(140, 100, 20, 255));
      ImGui::TableNextColumn();
      ImGui::Text("%u", r.rank);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(r.host.c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%lld", static_cast<long long>(r.step));
      ImGui::TableNextColumn();
      ImGui::Text("%.1f", r.samples_per_s);
      cell_ms(r.step_ms);
      ImGui::TableNextColumn();
      if (r.busy_ms() < 0)
        ImGui::TextDisabled("-");
      else if (c.ratio >= 0)
        ImGui::Text("%.2f (%.1fx)", r.busy_ms(), c.ratio);
      else
        ImGui::Text("%.2f", r.busy_ms());
      cell_ms(r.data_ms);
      cell_ms(r.compute_ms);
      cell_ms(r.comm_ms);
      cell_ms(r.optimizer_ms);
      cell_ms(r.other_ms);
      ImGui::TableNextColumn();
      if (r.cpu_pct < 0)
        ImGui::TextDisabled("-");
      else
        ImGui::Text("%.0f", r.cpu_pct);
      ImGui::TableNextColumn();
      ImGui::Text("%.0f", r.rss_mib);
      ImGui::TableNextColumn();
      if (r.gpu_util_pct < 0 && r.gpu_mem_mib < 0)
        ImGui::TextDisabled("-");
      else
        ImGui::Text("%.0f%% %.0f MiB %.0f W", r.gpu_util_pct, r.gpu_mem_mib, r.gpu_power_w);
      ImGui::TableNextColumn();
      if (live)
        ImGui::Text("%s ago%s", client::duration_text(std::max(0.0, now - r.wall_time)).c_str(),
                    c.stale       ? " (stopped reporting)"
                    : c.straggler ? " (straggler)"
                                  : "");
      else
        ImGui::TextDisabled("%s%s", hms(r.wall_time).c_str(), c.straggler ? " (straggler)" : "");
    }
  }
  ImGui::EndTable();
}

}  // namespace

void Viewer::draw_ranks(const client::RunState& state) {
  const bool live = state.status() == client::RunStatus::kRunning;
  const double now = now_unix();
  const client::RanksSummary summary = client::summarize_ranks(state, now, slowest_first_);
  ImGui::TextUnformatted(summary.headline().c_str());
  ImGui::SameLine();
  ImGui::Checkbox("slowest first", &slowest_first_);
  draw_rank_strip(summary);
  draw_rank_table(summary, live, now);
}

void Viewer::draw_events(const client::RunState& state) {
  for (const auto& e : state.events()) {
    const bool bad = e.kind == "nan" || e.kind == "failed";
    ImGui::TextColored(bad ? ImVec4(1, 0.4f, 0.4f, 1) : ImVec4(0.75f, 0.75f, 0.75f, 1), "%6lld  %-10s %s",
                       static_cast<long long>(e.step), e.kind.c_str(), e.text.c_str());
  }
  if (ImGui::GetScrollY() >= ImGui::GetScrollMaxY() - 1) ImGui::SetScrollHereY(1.0f);
}

}  // namespace gantry::view
