#include "proxy/npm_tree.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/subprocess.h"

namespace cloister::proxy::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string Stamp(const NpmTreeOptions& o) {
  return "npm-tree v1 packages=" + std::to_string(o.packages) + " seed=" + std::to_string(o.seed) +
         " scope=" + o.scope + "\n";
}

// One package's tarball: package/package.json, an index.js, and `bytes` of incompressible data
// (what a real tarball's compressed payload looks like to the transport).
Status Pack(const fs::path& work, const fs::path& out, const json& manifest, size_t bytes,
            std::mt19937& rng) {
  fs::remove_all(work);
  fs::create_directories(work / "package");
  std::ofstream(work / "package" / "package.json") << manifest.dump(2) << "\n";
  std::ofstream(work / "package" / "index.js") << "module.exports = " << manifest["name"].dump()
                                                << ";\n";
  std::string data(bytes, '\0');
  for (char& c : data) c = static_cast<char>(rng() & 0xff);
  std::ofstream(work / "package" / "data.bin", std::ios::binary) << data;
  // Fixed owner and times, sorted entries: the same bytes every time for the same seed.
  auto r = RunProcessChecked({"tar", "--sort=name", "--owner=0", "--group=0", "--numeric-owner",
                              "--mtime=2020-01-01 00:00:00Z", "-czf", out.string(), "-C",
                              work.string(), "package"},
                             RunOptions{.env_set = {{"GZIP", "-n"}}});
  if (!r.ok()) return r.error();
  return OkStatus();
}

}  // namespace

Result<NpmTree> WriteNpmTree(const std::string& dir, const NpmTreeOptions& o) {
  NpmTree tree;
  tree.dir = dir;
  tree.root = o.scope + "/app@1.0.0";
  tree.tarballs = o.packages + 1;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Error(ErrorCode::kIo, "cannot make " + dir + ": " + ec.message());
  const fs::path stamp = fs::path(dir) / "STAMP";
  {
    std::ifstream in(stamp);
    std::string have((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (have == Stamp(o)) return tree;
  }
  fs::remove(stamp, ec);
  std::mt19937 rng(o.seed);
  auto name = [&](size_t i) { return o.scope + "/dep-" + std::to_string(i); };
  // Dependencies point only to higher indices (a DAG): the root takes the first dozen, and every
  // package after them is named by at least one earlier one, so all are reached; a third of the
  // packages also share a dependency with another (npm dedupes them).
  std::vector<std::vector<size_t>> deps(o.packages);
  const size_t direct = std::min<size_t>(12, o.packages);
  for (size_t i = direct; i < o.packages; ++i) {
    size_t parent = rng() % i;
    deps[parent].push_back(i);
  }
  for (size_t i = 0; i + 2 < o.packages; i += 3) {
    size_t j = i + 1 + rng() % (o.packages - i - 1);
    if (std::find(deps[i].begin(), deps[i].end(), j) == deps[i].end()) deps[i].push_back(j);
  }
  const fs::path work = fs::path(dir) / ".work";
  for (size_t i = 0; i < o.packages; ++i) {
    json d = json::object();
    for (size_t j : deps[i]) d[name(j)] = "^1.0.0";
    json m = {{"name", name(i)}, {"version", "1.0.0"}, {"main", "index.js"}, {"dependencies", d}};
    // Sizes like a framework's tree: mostly a few KiB, one in eight 64-512 KiB (past the
    // channel's 256 KiB stream window).
    size_t bytes = (rng() % 8 == 0) ? (64 << 10) + rng() % (448 << 10) : 512 + rng() % (24 << 10);
    std::string file = o.scope.substr(1) + "-dep-" + std::to_string(i) + "-1.0.0.tgz";
    for (char& c : file) {
      if (c == '/') c = '-';
    }
    RETURN_IF_ERROR(Pack(work, fs::path(dir) / file, m, bytes, rng));
  }
  json rd = json::object();
  for (size_t i = 0; i < direct; ++i) rd[name(i)] = "^1.0.0";
  json root = {{"name", o.scope + "/app"}, {"version", "1.0.0"}, {"main", "index.js"},
               {"dependencies", rd}};
  std::string root_file = o.scope.substr(1) + "-app-1.0.0.tgz";
  for (char& c : root_file) {
    if (c == '/') c = '-';
  }
  RETURN_IF_ERROR(Pack(work, fs::path(dir) / root_file, root, 1024, rng));
  fs::remove_all(work, ec);
  std::ofstream(stamp) << Stamp(o);
  return tree;
}

}  // namespace cloister::proxy::testing
