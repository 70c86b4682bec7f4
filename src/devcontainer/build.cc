#include "devcontainer/build.h"

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <optional>

#include "base/file_util.h"
#include "base/strings.h"
#include "catalog/catalog.h"
#include "catalog/sha256.h"
#include "protocol/contract.h"

namespace cloister::devcontainer {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxDevcontainerBytes = 256 * 1024;
constexpr size_t kMaxFeatureJsonBytes = 256 * 1024;

// [a-z0-9._-] of `s`, lower-cased, other characters as '-'.
std::string Slug(const std::string& s) {
  std::string out;
  for (char c : ToLower(s)) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    out += ok ? c : '-';
  }
  while (!out.empty() && (out.front() == '-' || out.front() == '.')) out.erase(out.begin());
  return out;
}

// Reads local Features beneath the repository, and OCI ones through the caller's resolver.
class Resolver {
 public:
  Resolver(const RepoDir& repo, std::string dir, FeatureResolver oci)
      : repo_(repo), dir_(std::move(dir)), oci_(std::move(oci)) {}

  Result<ResolvedFeature> operator()(const FeatureRef& ref) {
    if (!ref.local()) {
      if (!oci_) {
        return Error(ErrorCode::kUnavailable,
                     "Feature \"" + ref.written + "\": Features from a registry are not fetched yet",
                     "copy the Feature's folder (devcontainer-feature.json, install.sh) into the "
                     "repository and name it ./FOLDER");
      }
      return oci_(ref);
    }
    ASSIGN_OR_RETURN(std::string folder, JoinBeneath(dir_, ref.path));
    std::string json_path = folder + "/devcontainer-feature.json";
    auto text = repo_.ReadFile(json_path, kMaxFeatureJsonBytes);
    if (!text.ok()) return text.error().WithContext("Feature \"" + ref.written + "\"");
    ResolvedFeature f;
    ASSIGN_OR_RETURN(f.metadata, ParseFeatureMetadata(*text, json_path));
    auto digest = repo_.DigestTree(folder);
    if (!digest.ok()) return digest.error().WithContext("Feature \"" + ref.written + "\"");
    f.canonical = ref.path;
    f.digest = "sha256:" + digest->sha256;
    return f;
  }

 private:
  const RepoDir& repo_;
  std::string dir_;
  FeatureResolver oci_;
};

std::string Home(const std::string& user) {
  if (user == "root") return "/root";
  if (user.empty() || user == protocol::kGuestUser) return protocol::kGuestHome;
  return "/home/" + user;
}

// The Dockerfile source: the Dockerfile and its context copied into `staging`.
Status DockerfileSourceOf(const PreparedBuild& p, const RepoDir& repo, const BuildRequest& req,
                          image::oci::Source& source, std::string& content_digests) {
  const BuildSpec& b = *p.config.build;
  ASSIGN_OR_RETURN(std::string dockerfile, JoinBeneath(p.location.Dir(), b.dockerfile));
  ASSIGN_OR_RETURN(std::string context, JoinBeneath(p.location.Dir(), b.context));
  ASSIGN_OR_RETURN(std::string text, repo.ReadFile(dockerfile, kMaxDockerfileBytes));
  source.kind = image::oci::SourceKind::kDockerfile;
  source.ref = "dockerfile:" + dockerfile;
  source.dockerfile.dockerfile = req.staging + "/Dockerfile";
  source.dockerfile.context = req.staging + "/context";
  source.dockerfile.build_args = b.args;
  source.dockerfile.target = b.target;
  source.dockerfile.base_images = req.base_images;
  RETURN_IF_ERROR(WriteFile(source.dockerfile.dockerfile, text, 0644));
  CopyLimits limits;
  limits.max_bytes = kMaxContextBytes;
  limits.max_entries = kMaxContextEntries;
  limits.max_depth = 64;
  // The context's .dockerignore, as Docker applies it: what it excludes is not copied.
  std::optional<DockerIgnore> ignore;
  auto ignore_text = repo.ReadFile(context == "." ? ".dockerignore" : context + "/.dockerignore",
                                   kMaxDockerignoreBytes);
  if (ignore_text.ok()) {
    ASSIGN_OR_RETURN(ignore, DockerIgnore::Parse(*ignore_text));
    content_digests += "dockerignore " + catalog::Sha256Hex(*ignore_text) + "\n";
  } else if (ignore_text.error().code() != ErrorCode::kNotFound) {
    return ignore_text.error().WithContext("the build context's .dockerignore");
  }
  auto tree = repo.CopyTree(context, source.dockerfile.context, limits, ignore ? &*ignore : nullptr);
  if (!tree.ok()) return tree.error().WithContext("the build context " + context);
  content_digests += "dockerfile " + catalog::Sha256Hex(text) + "\ncontext " + tree->sha256 + "\n";
  for (const auto& base : req.base_images) {
    auto src = image::oci::ParseSourceRef(base.ref, req.cwd);
    if (!src.ok()) return src.error();
    if (src->kind == image::oci::SourceKind::kOciArchive ||
        src->kind == image::oci::SourceKind::kDockerArchive) {
      ASSIGN_OR_RETURN(auto d, catalog::Sha256File(src->location));
      content_digests += "base " + base.name + " " + d.sha256 + "\n";
    } else {
      content_digests += "base " + base.name + " " + base.ref + "\n";
    }
  }
  return OkStatus();
}

// One plan step per Feature, in install order; `installed` gets each for the workspace settings.
Status FeatureSteps(PreparedBuild& p, const RepoDir& repo, const BuildRequest& req,
                    const std::vector<FeatureNode>& nodes, const std::vector<size_t>& order,
                    std::vector<InstalledFeature>& installed) {
  FeatureUsers users{p.config.remote_user.empty() ? protocol::kGuestUser : p.config.remote_user,
                     Home(p.config.remote_user)};
  std::map<std::string, std::string> feature_env;  // the Features' containerEnv so far
  for (size_t n = 0; n < order.size(); ++n) {
    const FeatureNode& node = nodes[order[n]];
    const FeatureMetadata& m = node.resolved.metadata;
    installed.push_back({node.ref.written, &m});
    for (const Notice& notice : m.notices) p.notices.push_back(notice);
    // The Feature's containerEnv applies to its own install and the later ones (the spec's ENV).
    auto partial = MakeWorkspaceDevcontainer(Config{}, installed, "", "", "");
    if (!partial.ok()) return partial.error();
    feature_env = partial->env;
    image::oci::Step step;
    step.name = "feature " + node.ref.written;
    step.digest = node.resolved.digest;
    char prefix[24];
    std::snprintf(prefix, sizeof prefix, "%02zu-", n);
    step.dir = req.staging + "/features/" + prefix + Slug(node.ref.Id());
    if (node.ref.local()) {
      ASSIGN_OR_RETURN(std::string folder, JoinBeneath(p.location.Dir(), node.ref.path));
      auto copied = repo.CopyTree(folder, step.dir);
      if (!copied.ok()) return copied.error().WithContext("Feature \"" + node.ref.written + "\"");
      if ("sha256:" + copied->sha256 != node.resolved.digest) {
        return Error(ErrorCode::kFailedPrecondition,
                     "Feature \"" + node.ref.written + "\" changed while it was read",
                     "run the build again once nothing writes to the repository");
      }
    } else {
      return Error(ErrorCode::kUnavailable, "Feature \"" + node.ref.written + "\": not fetched");
    }
    struct stat st;
    if (lstat((step.dir + "/install.sh").c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return Error(ErrorCode::kInvalidArgument,
                   "Feature \"" + node.ref.written + "\" has no install.sh",
                   "a Feature is a folder with devcontainer-feature.json and install.sh");
    }
    step.command = "chmod +x ./install.sh && ./install.sh";
    step.env = feature_env;
    ASSIGN_OR_RETURN(auto options, FeatureEnvironment(m, node.options, users));
    for (const auto& [k, v] : options) step.env[k] = v;
    p.plan.steps.push_back(std::move(step));
  }
  return OkStatus();
}

}  // namespace

std::string DefaultImageName(const DevcontainerLocation& location) {
  std::string name = "dc-" + Slug(fs::path(location.root).filename().string());
  // .devcontainer/NAME/devcontainer.json: one of several configurations.
  fs::path dir = fs::path(location.Dir());
  if (dir.has_parent_path() && dir.parent_path() == ".devcontainer") {
    name += "-" + Slug(dir.filename().string());
  }
  if (name.size() > 64) name.resize(64);
  while (!name.empty() && (name.back() == '-' || name.back() == '.')) name.pop_back();
  return name == "dc" ? "dc-repo" : name;
}

Result<image::oci::DockerfileSource::BaseImage> ParseBaseFlag(const std::string& flag,
                                                              const std::string& cwd) {
  size_t eq = flag.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == flag.size()) {
    return Error(ErrorCode::kInvalidArgument, "--base \"" + flag + "\" is not NAME=REF",
                 "e.g. --base mybase:1=oci-archive:./base.tar (the Dockerfile says FROM mybase:1)");
  }
  image::oci::DockerfileSource::BaseImage b{flag.substr(0, eq), flag.substr(eq + 1)};
  ASSIGN_OR_RETURN(auto src, image::oci::ParseSourceRef(b.ref, cwd));
  if (src.kind == image::oci::SourceKind::kOciArchive ||
      src.kind == image::oci::SourceKind::kDockerArchive || src.kind == image::oci::SourceKind::kOciDir) {
    // The plan is checked from the builder's side with absolute paths.
    b.ref = std::string(image::oci::SourceKindName(src.kind)) + ":" +
            fs::path(src.location).lexically_normal().string() +
            (src.oci_ref.empty() ? "" : ":" + src.oci_ref);
  }
  return b;
}

Result<PreparedBuild> ReadDevcontainer(const std::string& spec, const std::string& cwd) {
  PreparedBuild p;
  ASSIGN_OR_RETURN(p.location, FindDevcontainer(spec, cwd));
  ASSIGN_OR_RETURN(RepoDir repo, RepoDir::Open(p.location.root));
  ASSIGN_OR_RETURN(std::string text, repo.ReadFile(p.location.file, kMaxDevcontainerBytes));
  p.sha256 = catalog::Sha256Hex(text);
  ASSIGN_OR_RETURN(p.config, ParseConfig(text, p.location.file));
  p.notices = p.config.notices;
  return p;
}

Result<PreparedBuild> PrepareBuild(const BuildRequest& req) {
  ASSIGN_OR_RETURN(PreparedBuild p, ReadDevcontainer(req.spec, req.cwd));
  ASSIGN_OR_RETURN(RepoDir repo, RepoDir::Open(p.location.root));
  p.plan.name = req.image_name.empty() ? DefaultImageName(p.location) : req.image_name;
  p.plan.devcontainer_sha256 = p.sha256;
  std::error_code ec;
  if (fs::exists(req.staging, ec) || !fs::create_directories(req.staging + "/features", ec)) {
    return Error(ErrorCode::kAlreadyExists, "cannot make the staging folder " + req.staging);
  }
  std::string content = "devcontainer " + p.sha256 + "\n";
  if (p.config.build) {
    RETURN_IF_ERROR(DockerfileSourceOf(p, repo, req, p.plan.source, content));
  } else {
    if (!req.base_images.empty()) {
      return Error(ErrorCode::kInvalidArgument, "--base names a FROM of a Dockerfile, and this "
                                                "devcontainer uses \"image\"");
    }
    ASSIGN_OR_RETURN(p.plan.source, image::oci::ParseSourceRef("docker://" + p.config.image, req.cwd));
  }
  std::vector<std::pair<FeatureRef, FeatureOptions>> user;
  for (const FeatureRequest& f : p.config.features) user.emplace_back(f.ref, f.options);
  Resolver resolver(repo, p.location.Dir(), req.oci_features);
  ASSIGN_OR_RETURN(auto nodes, ResolveFeatureGraph(user, std::ref(resolver)));
  ASSIGN_OR_RETURN(auto order, InstallOrder(nodes, p.config.override_feature_install_order));
  std::vector<InstalledFeature> installed;
  RETURN_IF_ERROR(FeatureSteps(p, repo, req, nodes, order, installed));
  ASSIGN_OR_RETURN(p.workspace,
                   MakeWorkspaceDevcontainer(p.config, installed,
                                             p.location.root + "/" + p.location.file, p.sha256,
                                             p.plan.name));
  RETURN_IF_ERROR(image::oci::ValidatePlan(p.plan));
  p.plan.inputs_sha256 = catalog::Sha256Hex(content);
  p.inputs_digest = image::oci::PlanDigest(p.plan);
  return p;
}

}  // namespace cloister::devcontainer
