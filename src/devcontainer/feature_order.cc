#include "devcontainer/feature_order.h"

#include <algorithm>
#include <deque>
#include <set>
#include <tuple>

#include "base/strings.h"

namespace cloister::devcontainer {
namespace {

// An installsAfter or overrideFeatureInstallOrder entry, without a tag or digest.
std::string Unversioned(const std::string& id) {
  std::string s = NormalizeResource(id);
  if (StartsWith(s, "./") || StartsWith(s, "../")) return s;
  if (size_t at = s.find('@'); at != std::string::npos) s.resize(at);
  size_t slash = s.rfind('/');
  if (size_t colon = s.rfind(':'); colon != std::string::npos && (slash == std::string::npos || colon > slash)) {
    s.resize(colon);
  }
  return s;
}

// Whether `entry` (unversioned) names `node`: its resource, or its resource under a legacy id.
bool Names(const std::string& entry, const FeatureNode& node) {
  if (entry == node.ref.Resource()) return true;
  if (node.ref.local()) return false;
  std::string prefix = node.ref.registry + "/" + node.ref.repository;
  prefix.resize(prefix.rfind('/') + 1);
  for (const std::string& legacy : node.resolved.metadata.legacy_ids) {
    if (entry == prefix + legacy) return true;
  }
  return false;
}

// Tags oldest first: numeric versions (by component), then other tags, then `latest`, then none.
std::tuple<int, std::vector<long>, std::string> TagKey(const FeatureRef& r) {
  if (r.local()) return {0, {}, ""};
  if (r.tag.empty()) return {3, {}, ""};
  if (r.tag == "latest") return {2, {}, ""};
  std::vector<long> parts;
  for (const std::string& p : Split(r.tag, '.')) {
    if (p.empty() || p.size() > 9 || p.find_first_not_of("0123456789") != std::string::npos) {
      return {1, {}, r.tag};
    }
    parts.push_back(std::stol(p));
  }
  return {0, parts, ""};
}

// The spec's "Round Stable Sort": true when a installs before b.
bool RoundBefore(const FeatureNode& a, const FeatureNode& b) {
  if (a.ref.Resource() != b.ref.Resource()) return a.ref.Resource() < b.ref.Resource();
  auto ta = TagKey(a.ref), tb = TagKey(b.ref);
  if (ta != tb) return ta < tb;
  if (a.options.size() != b.options.size()) return a.options.size() > b.options.size();
  std::vector<std::string> ka, kb, va, vb;
  for (const auto& [k, v] : a.options) {
    ka.push_back(k);
    va.push_back(v);
  }
  for (const auto& [k, v] : b.options) {
    kb.push_back(k);
    vb.push_back(v);
  }
  if (ka != kb) return ka < kb;
  if (va != vb) return va < vb;
  return a.resolved.canonical < b.resolved.canonical;
}

std::string DescribeNode(const FeatureNode& n) { return n.ref.written; }

}  // namespace

Result<std::vector<FeatureNode>> ResolveFeatureGraph(
    const std::vector<std::pair<FeatureRef, FeatureOptions>>& user, const FeatureResolver& resolve) {
  std::vector<FeatureNode> nodes;
  struct Work {
    FeatureRef ref;
    FeatureOptions options;
    bool from_user;
    size_t needed_by;  // node index, or SIZE_MAX
  };
  std::deque<Work> work;
  for (const auto& [ref, options] : user) work.push_back({ref, options, true, SIZE_MAX});
  while (!work.empty()) {
    Work w = std::move(work.front());
    work.pop_front();
    if (!w.from_user && w.ref.local()) {
      return Error(ErrorCode::kInvalidArgument,
                   "Feature \"" + DescribeNode(nodes[w.needed_by]) + "\" depends on the local Feature \"" +
                       w.ref.written + "\"",
                   "a Feature's dependsOn names published Features (REGISTRY/NAMESPACE/NAME)");
    }
    auto resolved = resolve(w.ref);
    if (!resolved.ok()) {
      return w.from_user ? resolved.error()
                         : resolved.error().WithContext("dependency of \"" +
                                                        DescribeNode(nodes[w.needed_by]) + "\"");
    }
    size_t index = nodes.size();
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!w.ref.local() && !nodes[i].ref.local() &&
          nodes[i].resolved.canonical == resolved->canonical && nodes[i].options == w.options) {
        index = i;  // an equal Feature is in the set already
        break;
      }
    }
    if (index == nodes.size()) {
      if (nodes.size() >= kMaxFeatures) {
        return Error(ErrorCode::kInvalidArgument,
                     "more than " + std::to_string(kMaxFeatures) + " Features with their dependencies");
      }
      FeatureNode n;
      n.ref = w.ref;
      n.options = w.options;
      n.resolved = std::move(*resolved);
      n.from_user = w.from_user;
      for (const auto& [dep, opts] : n.resolved.metadata.depends_on) {
        auto ref = ParseFeatureRef(dep);
        if (!ref.ok()) return ref.error().WithContext("dependency of \"" + n.ref.written + "\"");
        work.push_back({*ref, opts, false, index});
      }
      nodes.push_back(std::move(n));
    } else {
      nodes[index].from_user |= w.from_user;
    }
    if (w.needed_by != SIZE_MAX) {
      auto& deps = nodes[w.needed_by].depends_on;
      if (std::find(deps.begin(), deps.end(), index) == deps.end()) deps.push_back(index);
    }
  }
  return nodes;
}

Result<std::vector<size_t>> InstallOrder(const std::vector<FeatureNode>& nodes,
                                         const std::vector<std::string>& override_order) {
  const size_t n = nodes.size();
  // Every edge: dependsOn, and installsAfter entries that name a Feature of the set.
  std::vector<std::set<size_t>> needs(n);
  for (size_t i = 0; i < n; ++i) {
    for (size_t d : nodes[i].depends_on) {
      if (d != i) needs[i].insert(d);
      else return Error(ErrorCode::kInvalidArgument, "Feature \"" + DescribeNode(nodes[i]) + "\" depends on itself");
    }
    for (const std::string& after : nodes[i].resolved.metadata.installs_after) {
      std::string entry = Unversioned(after);
      for (size_t j = 0; j < n; ++j) {
        if (j != i && Names(entry, nodes[j])) needs[i].insert(j);
      }
    }
  }
  std::vector<size_t> priority(n, 0);
  for (size_t k = 0; k < override_order.size(); ++k) {
    std::string entry = Unversioned(override_order[k]);
    bool found = false;
    for (size_t i = 0; i < n; ++i) {
      if (Names(entry, nodes[i])) {
        priority[i] = std::max(priority[i], override_order.size() - k);
        found = true;
      }
    }
    if (!found) {
      return Error(ErrorCode::kInvalidArgument,
                   "overrideFeatureInstallOrder names \"" + override_order[k] +
                       "\", which is not a Feature of this devcontainer",
                   "list Features of \"features\" (or their dependencies), without a version");
    }
  }
  std::vector<size_t> order;
  std::vector<bool> installed(n, false);
  std::vector<size_t> left(n);
  for (size_t i = 0; i < n; ++i) left[i] = i;
  while (!left.empty()) {
    std::vector<size_t> round;
    for (size_t i : left) {
      bool ready = true;
      for (size_t d : needs[i]) ready &= installed[d];
      if (ready) round.push_back(i);
    }
    if (round.empty()) {
      std::string names;
      for (size_t i : left) names += (names.empty() ? "" : ", ") + DescribeNode(nodes[i]);
      return Error(ErrorCode::kInvalidArgument,
                   "the Features' dependsOn and installsAfter form a cycle among: " + names,
                   "remove one of the dependencies, or the Feature that closes the cycle");
    }
    size_t top = 0;
    for (size_t i : round) top = std::max(top, priority[i]);
    std::vector<size_t> commit;
    for (size_t i : round) {
      if (priority[i] == top) commit.push_back(i);
    }
    std::stable_sort(commit.begin(), commit.end(),
                     [&](size_t a, size_t b) { return RoundBefore(nodes[a], nodes[b]); });
    for (size_t i : commit) {
      installed[i] = true;
      order.push_back(i);
    }
    left.erase(std::remove_if(left.begin(), left.end(), [&](size_t i) { return installed[i]; }),
               left.end());
  }
  return order;
}

}  // namespace cloister::devcontainer
