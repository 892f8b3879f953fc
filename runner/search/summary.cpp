#include "search/summary.hpp"

#include <algorithm>
#include <cstdio>

namespace gantry::search {

std::string summary_text(const SearchState& s, const Plan& p) {
  const bool maximize = p.opt.maximize;
  std::vector<const Trial*> order;
  for (const auto& t : s.trials) order.push_back(&t);
  auto last = [](const Trial* t) { return t->scores.empty() ? nullptr : &t->scores.back(); };
  std::stable_sort(order.begin(), order.end(), [&](const Trial* a, const Trial* b) {
    const Score *sa = last(a), *sb = last(b);
    if (!sa || !sb) return sa && !sb;
    if (sa->step != sb->step) return sa->step > sb->step;
    if (better(sa->value, sb->value, maximize)) return true;
    if (better(sb->value, sa->value, maximize)) return false;
    return sa->order < sb->order;
  });
  std::vector<std::string> keys;
  for (const auto& d : p.space) keys.push_back(d.key);
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf, "\n%-10s  %-11s  %6s  %12s", "trial", "status", "step", p.opt.metric.c_str());
  out += buf;
  for (const auto& k : keys) {
    std::snprintf(buf, sizeof buf, "  %14s", k.substr(k.rfind('.') + 1).c_str());
    out += buf;
  }
  out += "  note\n";
  for (const Trial* t : order) {
    const Score* sc = last(t);
    char score[32] = "-";
    if (sc) std::snprintf(score, sizeof score, "%.6g", sc->value);
    std::snprintf(buf, sizeof buf, "%-10s  %-11s  %6ld  %12s", trial_name(t->id).c_str(),
                  shown_status(*t, p.opt.method == "pbt").c_str(), long(t->reached()), score);
    out += buf;
    for (const auto& k : keys) {
      std::snprintf(buf, sizeof buf, "  %14s", t->value(k).c_str());
      out += buf;
    }
    std::string note = t->note;
    for (const auto& l : t->lineage)
      note += (note.empty() ? "" : " ") + std::string("copied ") + trial_name(l.from) + " at " +
              std::to_string(l.step) + ";";
    if (note.size() > 100) note = note.substr(0, 97) + "...";
    out += "  " + note + "\n";
  }
  const Trial* best = order.empty() || !last(order.front()) || last(order.front())->value != last(order.front())->value
                          ? nullptr
                          : order.front();
  if (best) {
    std::snprintf(buf, sizeof buf, "best: %s, %s %.6g at step %ld:", trial_name(best->id).c_str(), p.opt.metric.c_str(),
                  last(best)->value, long(best->reached()));
    out += buf;
    for (const auto& o : best->overrides) out += " " + o;
    out += "\n  its run: " + (p.trial_dir(best->id) / "latest").string() + " (gantry sample -c " +
           (p.trial_dir(best->id) / "latest").string() + ")\n";
  } else {
    out += "best: none yet (no trial has a score)\n";
  }
  out += "search directory: " + p.dir.string() +
         " (journal; each trial's run under trial_NNNN/, its output in "
         "trial_NNNN.log)\n";
  return out;
}

void print_summary(const SearchState& s, const Plan& p) {
  std::fputs(summary_text(s, p).c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace gantry::search
