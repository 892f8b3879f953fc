// gantry-view: a small Dear ImGui window (GLFW + OpenGL 3) on the same stream
// as gantry-monitor, for a login node over X forwarding or beside a local run.
//   gantry-view 127.0.0.1:5555 --token T      (or the runner's whole 'monitor:' line)
//   gantry-view runs/gan_fashion_mnist/latest
//   gantry-view runs/gan_fashion_mnist         (every run of the experiment, overlaid; a sweep's directory too)
//   gantry-view RUN_DIR RUN_DIR ...            (these runs, overlaid)
//   gantry-view RUN_DIR --screenshot shot.png  (save the window once the run has ended, then exit)
#include <CLI/CLI.hpp>
#include <GL/gl.h>
#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>
#include <stb/stb_image_write.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "chart.hpp"
#include "liveness.hpp"
#include "run_state.hpp"
#include "source.hpp"
#include "viewer.hpp"

namespace {

bool save_screenshot(GLFWwindow* window, const std::string& path) {
  int w = 0, h = 0;
  glfwGetFramebufferSize(window, &w, &h);
  std::vector<unsigned char> rgba(static_cast<size_t>(w) * h * 4);
  glReadBuffer(GL_BACK);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, w, h, GL_RGBA, GL_UNSIGNED_BYTE, rgba.data());
  std::vector<unsigned char> flipped(rgba.size());  // GL's rows go bottom-up
  for (int y = 0; y < h; ++y)
    std::copy_n(&rgba[static_cast<size_t>(h - 1 - y) * w * 4], static_cast<size_t>(w) * 4,
                &flipped[static_cast<size_t>(y) * w * 4]);
  return stbi_write_png(path.c_str(), w, h, 4, flipped.data(), w * 4) != 0;
}

// With --screenshot and several runs: the runs table as shown, one line a run.
void print_runs(const std::vector<gantry::view::ViewRun>& runs, const gantry::client::SearchFollower& search) {
  std::vector<std::string> yamls;
  for (const auto& r : runs) yamls.push_back(r.state.info() ? r.state.info()->config_yaml : "");
  std::map<std::string, std::vector<std::string>> values;
  const std::vector<std::string> keys = gantry::client::differing_keys(yamls, &values);
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto trial = search.row(i);
    std::printf("run %s: %s, step %lld, %s", runs[i].name.c_str(),
                trial ? trial->status.c_str() : gantry::client::to_string(runs[i].state.status()),
                static_cast<long long>(runs[i].state.latest_step()), runs[i].visible ? "shown" : "hidden");
    if (trial) std::printf(", rung %s, %s %s", trial->rung.c_str(), search.metric().c_str(), trial->score.c_str());
    for (const auto& k : keys) std::printf(", %s=%s", k.c_str(), values[k][i].c_str());
    std::printf("\n");
  }
}

// Every run the targets name (directories: an experiment, a sweep, several
// runs; live targets), `hide`'s lines hidden; the search among them followed.
// Throws std::invalid_argument naming a bad target or --hide.
std::vector<gantry::view::ViewRun> open_runs(const std::vector<std::string>& target_words, const std::string& token,
                                             const std::vector<std::string>& hide,
                                             gantry::client::SearchFollower& search) {
  std::vector<gantry::view::ViewRun> runs;
  std::vector<std::string> dirs, names;
  for (auto& named : gantry::client::parse_targets(target_words, token)) {
    dirs.push_back(named.target.is_dir ? named.target.dir : "");
    names.push_back(named.name);
    gantry::view::ViewRun r;
    r.name = named.name;
    r.source = gantry::client::open_source(named.target);
    runs.push_back(std::move(r));
  }
  search.watch(dirs, names);
  for (const auto& h : hide) {
    bool known = false;
    for (auto& r : runs)
      if (r.name == h) r.visible = false, known = true;
    if (!known)
      throw std::invalid_argument("--hide " + h + ": no such run (" + std::to_string(runs.size()) + " found)");
  }
  return runs;
}

// An OpenGL 3 window with Dear ImGui on it; null (after one error line) without a display.
GLFWwindow* open_window(int width, int height, const std::string& title) {
  // GLFW's reason goes into the one error line below rather than a line of its own.
  static std::string glfw_error;
  glfwSetErrorCallback([](int, const char* what) { glfw_error = what; });
  if (!glfwInit()) {
    std::fprintf(stderr, "gantry-view: cannot open a window (%s): set DISPLAY, or use ssh -X\n",
                 glfw_error.empty() ? "no display?" : glfw_error.c_str());
    return nullptr;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 0);
  GLFWwindow* window = glfwCreateWindow(width, height, title.c_str(), nullptr, nullptr);
  if (!window) {
    std::fprintf(stderr, "gantry-view: cannot create an OpenGL 3 window (%s)\n", glfw_error.c_str());
    glfwTerminate();
    return nullptr;
  }
  glfwMakeContextCurrent(window);
  glfwSwapInterval(1);
  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGui::GetIO().IniFilename = nullptr;  // nothing written next to the user's files
  ImGui::StyleColorsDark();
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 130");
  return window;
}

}  // namespace

int main(int argc, char** argv) {
  const auto t_start = std::chrono::steady_clock::now();
  CLI::App app{"gantry-view: watch a gantry run (loss curves, image grids, ranks) in a small ImGui window"};
  std::vector<std::string> target_words;
  std::string token, screenshot, size = "1100x700";
  double timeout_s = 120;
  bool verbose = false;
  app.add_option("target", target_words,
                 "HOST:PORT [--token T] (or the runner's 'monitor:' line) and/or directories (runs, an "
                 "experiment, a sweep): several are overlaid")
      ->required();
  app.add_option("--token", token, "the run's token (printed by the runner, and in RUN_DIR/monitor.txt)");
  app.add_option("--screenshot", screenshot, "save the window as PNG once the run has ended, then exit");
  app.add_option("--timeout", timeout_s, "with --screenshot: give up after this many seconds (exit 1)");
  app.add_option("--size", size, "window size WxH");
  app.add_flag("--verbose", verbose, "print start-up timings");
  std::vector<std::string> hide;
  app.add_option("--hide", hide, "start with these runs' lines hidden (their names in the runs table)");
  CLI11_PARSE(app, argc, argv);

  // Every run named: directories (an experiment, a sweep, several runs) and
  // live targets, overlaid when there are several.
  std::string text;
  for (const auto& w : target_words) text += (text.empty() ? "" : " ") + w;
  std::vector<gantry::view::ViewRun> runs;
  gantry::client::SearchFollower search;  // the trials among them, and those a search starts while shown
  std::string title;
  try {
    runs = open_runs(target_words, token, hide, search);
    title = runs.size() == 1 ? runs[0].name : std::to_string(runs.size()) + " runs: " + text;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "gantry-view: %s\n", e.what());
    return 2;
  }
  int width = 1100, height = 700;
  if (std::sscanf(size.c_str(), "%dx%d", &width, &height) != 2 || width < 200 || height < 150) {
    std::fprintf(stderr, "gantry-view: --size %s: expected WxH, at least 200x150\n", size.c_str());
    return 2;
  }

  GLFWwindow* window = open_window(width, height, "gantry-view: " + title);
  if (!window) return 1;

  int rc = 0;
  {
    gantry::view::Viewer viewer;
    std::vector<gantry::wire::Message> inbox;
    int frames_after_end = -1;
    bool first_frame = true;
    while (!glfwWindowShouldClose(window)) {
      // Sleep until input or 50 ms pass: at most 20 redraws a second when idle.
      glfwWaitEventsTimeout(0.05);
      for (const gantry::client::RunDir& d : search.poll(glfwGetTime())) {
        gantry::view::ViewRun r;
        r.name = d.name;
        gantry::client::Target t;
        t.is_dir = true;
        t.dir = d.dir;
        r.source = gantry::client::open_source(t);
        runs.push_back(std::move(r));
      }
      for (auto& r : runs) {
        inbox.clear();
        r.source->drain(inbox);
        for (const auto& m : inbox) r.state.apply(m);
        gantry::client::check_lost(
            r.state, *r.source,
            std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
      }
      ImGui_ImplOpenGL3_NewFrame();
      ImGui_ImplGlfw_NewFrame();
      ImGui::NewFrame();
      viewer.draw(runs, &search);
      ImGui::Render();
      int fw = 0, fh = 0;
      glfwGetFramebufferSize(window, &fw, &fh);
      glViewport(0, 0, fw, fh);
      glClearColor(0.08f, 0.08f, 0.09f, 1);
      glClear(GL_COLOR_BUFFER_BIT);
      ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
      if (first_frame && verbose) {
        std::fprintf(stderr, "gantry-view: first frame after %.0f ms\n",
                     std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count());
        first_frame = false;
      }
      if (!screenshot.empty()) {
        bool ended = true;  // every run
        for (const auto& r : runs) {
          ended = ended && gantry::client::has_ended(r.state.status());
        }
        const bool late = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count() > timeout_s;
        if ((ended || late) && frames_after_end < 0) frames_after_end = 0;
        if (frames_after_end >= 0 && ++frames_after_end >= 3) {  // a few frames so layout settles
          if (!save_screenshot(window, screenshot)) {
            std::fprintf(stderr, "gantry-view: cannot write %s\n", screenshot.c_str());
            rc = 1;
          } else if (runs.size() > 1) {
            print_runs(runs, search);
          }
          if (rc == 0 && !ended) {
            std::fprintf(stderr, "gantry-view: the run had not ended (%s); screenshot taken anyway\n",
                         runs[0].source->status().text.c_str());
            rc = 1;
          }
          glfwSetWindowShouldClose(window, 1);
        }
      }
      glfwSwapBuffers(window);
    }
  }
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  return rc;
}
