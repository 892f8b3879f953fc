#include "submit.hpp"

#include <sys/wait.h>

#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <regex>

#include "sweep.hpp"

namespace fs = std::filesystem;

namespace gantry {

namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = text.find(from, pos)) != std::string::npos; pos += to.size())
    text.replace(pos, from.size(), to);
  return text;
}

}  // namespace

std::string find_template(const std::string& path, const std::string& gantry_exe) {
  std::vector<fs::path> candidates = {fs::path(path)};
  const fs::path prefix = fs::path(gantry_exe).parent_path().parent_path();
  candidates.push_back(prefix / "share" / "gantry" / path);
#ifdef GANTRY_SOURCE_DIR
  candidates.push_back(fs::path(GANTRY_SOURCE_DIR) / path);
#endif
  for (const auto& c : candidates)
    if (fs::exists(c)) return c.string();
  throw ConfigError("slurm.template: no " + path + " (relative to the working directory, " +
                    (prefix / "share" / "gantry").string() + " or the source tree)");
}

std::string render_sbatch(const engine::JobSettings& job, const std::string& template_text,
                          const std::string& gantry_exe, const std::string& config_path,
                          const std::vector<std::string>& overrides, size_t array_size, const std::string& subcommand,
                          const std::vector<std::string>& tail) {
  const auto& s = job.slurm;
  const auto& t = job;
  const int64_t cpus = s.cpus_per_task > 0 ? s.cpus_per_task : (t.threads > 0 ? t.threads : 1);
  std::string d;
  auto line = [&](const std::string& opt) { d += "#SBATCH " + opt + "\n"; };
  line("--job-name=" + job.name);
  // A search's worker is one task that starts its trials' ranks itself (gantry launch -n devices).
  const bool one_task = array_size > 0 && subcommand == "search";
  line("--nodes=" + std::to_string(t.num_nodes));
  line("--ntasks-per-node=" + std::to_string(one_task ? 1 : t.devices));
  line("--cpus-per-task=" + std::to_string(one_task ? cpus * t.devices : cpus));
  if (t.cuda) line("--gres=gpu:" + std::to_string(t.devices));
  line("--time=" + s.time);
  if (!s.partition.empty()) line("--partition=" + s.partition);
  if (!s.mem.empty()) line("--mem=" + s.mem);
  if (!s.account.empty()) line("--account=" + s.account);
  if (!s.signal.empty()) line("--signal=" + s.signal);
  line("--requeue");
  line("--open-mode=append");
  if (array_size > 0) {  // one task per point; each requeued on its own
    line("--array=0-" + std::to_string(array_size - 1) +
         (s.array_parallel > 0 ? "%" + std::to_string(s.array_parallel) : std::string()));
    line("--output=" + (fs::absolute(t.out_dir) / job.name / "slurm-%A_%a.out").string());
  } else {
    line("--output=" + (fs::absolute(t.out_dir) / job.name / "slurm-%j.out").string());
  }
  d.pop_back();
  std::string cmd = shell_quote(gantry_exe) + " " + (array_size > 0 ? subcommand : std::string("train")) + " " +
                    shell_quote(fs::absolute(config_path).string());
  for (const auto& o : overrides) cmd += " " + shell_quote(o);
  if (array_size > 0)
    for (const auto& t : tail) cmd += " " + shell_quote(t);
  if (template_text.find("{{command}}") == std::string::npos)
    throw ConfigError("slurm.template has no {{command}} placeholder");
  return replace_all(replace_all(template_text, "{{sbatch}}", d), "{{command}}", cmd);
}

int submit(const std::string& config_path, const std::vector<std::string>& overrides, bool dry_run, bool wait,
           const std::string& gantry_exe, bool sweep) {
  // A sweep's grid: every point checked; its fixed overrides make the job's config.
  size_t array_size = 0;
  std::vector<std::string> fixed = overrides;
  if (sweep) {
    array_size = sweep_size(config_path, overrides);
    fixed.erase(std::remove_if(fixed.begin(), fixed.end(),
                               [](const std::string& o) { return o.find(',') != std::string::npos; }),
                fixed.end());
  }
  const engine::JobSettings job = engine::load_job(config_path, fixed);
  const std::string tmpl_path = find_template(job.slurm.template_path, gantry_exe);
  const std::string script =
      render_sbatch(job, engine::read_file(tmpl_path), gantry_exe, config_path, overrides, array_size);
  return submit_script(job, script, dry_run, wait, array_size,
                       array_size > 0 ? ", an array of " + std::to_string(array_size) + " points" : "");
}

int submit_script(const engine::JobSettings& job, const std::string& script, bool dry_run, bool wait, size_t array_size,
                  const std::string& what) {
  if (dry_run) {
    std::fputs(script.c_str(), stdout);
    return 0;
  }
  const fs::path dir = fs::path(job.out_dir) / job.name / "slurm";
  fs::create_directories(dir);
  const fs::path file = fs::absolute(dir / ("submit-" + std::to_string(::time(nullptr)) + ".sbatch"));
  engine::write_file_atomic(file.string(), script);
  const std::string cmd = std::string("sbatch ") + (wait ? "--wait " : "") + shell_quote(file.string()) + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) throw Error("cannot run sbatch");
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) {
    out += buf;
    if (wait) std::fputs(buf, stdout);
  }
  const int status = ::pclose(p);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  std::smatch m;
  if (std::regex_search(out, m, std::regex("Submitted batch job (\\d+)"))) {
    const std::string log = "slurm-" + m[1].str() + (array_size > 0 ? "_<task>.out" : ".out");
    std::printf("submitted job %s%s: %s (log: %s)\n", m[1].str().c_str(), what.c_str(), file.c_str(),
                (fs::absolute(job.out_dir) / job.name / log).c_str());
  } else {
    std::string first = out.substr(0, out.find('\n'));
    throw Error("sbatch " + file.string() + " failed: " + (first.empty() ? "no output" : first));
  }
  if (wait && code != 0) std::fprintf(stderr, "gantry submit: job failed (sbatch --wait exit %d)\n", code);
  return code;
}

}  // namespace gantry
