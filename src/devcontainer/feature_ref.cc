#include "devcontainer/feature_ref.h"

#include "base/strings.h"

namespace cloister::devcontainer {
namespace {

Error RefError(std::string_view written, const std::string& what, const std::string& hint = "") {
  return Error(ErrorCode::kInvalidArgument,
               "Feature \"" + std::string(written.substr(0, 80)) + "\": " + what, hint);
}

bool RefAllOf(std::string_view s, std::string_view allowed) {
  return !s.empty() && s.find_first_not_of(allowed) == std::string_view::npos;
}

constexpr std::string_view kRefLowerDigits = "abcdefghijklmnopqrstuvwxyz0123456789";

// A repository path component: [a-z0-9] with '.', '_', '-' inside.
bool RepoComponent(std::string_view c) {
  if (!RefAllOf(c, "abcdefghijklmnopqrstuvwxyz0123456789._-")) return false;
  return kRefLowerDigits.find(c.front()) != std::string_view::npos &&
         kRefLowerDigits.find(c.back()) != std::string_view::npos;
}

}  // namespace

std::string FeatureRef::Resource() const {
  return local() ? path : registry + "/" + repository;
}

std::string FeatureRef::Id() const {
  const std::string& p = local() ? path : repository;
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string FeatureRef::Reference() const {
  return registry + "/" + repository + (digest.empty() ? ":" + tag : "@" + digest);
}

std::string NormalizeResource(std::string_view id) {
  std::string s(id);
  if (StartsWith(s, "./") || StartsWith(s, "../")) {
    while (s.size() > 2 && s.back() == '/') s.pop_back();
    return s;
  }
  return ToLower(s);
}

Result<FeatureRef> ParseFeatureRef(std::string_view written) {
  FeatureRef r;
  r.written = std::string(written);
  if (written.empty()) return RefError(written, "an empty reference");
  if (written.size() > kMaxFeatureRefBytes) {
    return RefError(written, "longer than " + std::to_string(kMaxFeatureRefBytes) + " bytes");
  }
  for (char c : written) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == '\\') {
      return RefError(written, "a control character or backslash in the reference");
    }
  }
  if (StartsWith(written, "./") || StartsWith(written, "../")) {
    r.kind = FeatureRef::Kind::kLocal;
    r.path = NormalizeResource(written);
    for (const std::string& c : Split(r.path, '/')) {
      if (c.empty()) return RefError(written, "an empty path component");
    }
    return r;
  }
  if (written.front() == '/') {
    return RefError(written, "an absolute path",
               "a local Feature is a folder of the repository, written relative to the "
               "devcontainer.json's folder (./my-feature)");
  }
  std::string s = ToLower(written);
  if (StartsWith(s, "https://") || StartsWith(s, "http://")) {
    return RefError(written, "Features from a tarball URL are not supported",
               "use the Feature's OCI reference (REGISTRY/NAMESPACE/NAME:VERSION) or copy it "
               "into the repository as a local Feature (./my-feature)");
  }
  r.kind = FeatureRef::Kind::kOci;
  if (size_t at = s.find('@'); at != std::string::npos) {
    r.digest = s.substr(at + 1);
    s.resize(at);
    if (!StartsWith(r.digest, "sha256:") || r.digest.size() != 7 + 64 ||
        !RefAllOf(std::string_view(r.digest).substr(7), "0123456789abcdef")) {
      return RefError(written, "a digest that is not sha256:<64 hex digits>");
    }
  }
  size_t last_slash = s.rfind('/');
  if (last_slash == std::string::npos) {
    return RefError(written, "a legacy Feature id (no registry)",
               "use its OCI reference, e.g. ghcr.io/devcontainers/features/" + s + ":1");
  }
  if (size_t colon = s.rfind(':'); colon != std::string::npos && colon > last_slash) {
    if (!r.digest.empty()) return RefError(written, "both a tag and a digest");
    r.tag = s.substr(colon + 1);
    s.resize(colon);
    if (r.tag.size() > 128 || !RefAllOf(r.tag, "abcdefghijklmnopqrstuvwxyz0123456789._-") ||
        r.tag.front() == '.' || r.tag.front() == '-') {
      return RefError(written, "a tag that is not [a-z0-9_][a-z0-9._-]*");
    }
  } else if (r.digest.empty()) {
    r.tag = "latest";
  }
  size_t first_slash = s.find('/');
  r.registry = s.substr(0, first_slash);
  r.repository = s.substr(first_slash + 1);
  if (!RefAllOf(r.registry, "abcdefghijklmnopqrstuvwxyz0123456789.-:") ||
      (r.registry.find('.') == std::string::npos && r.registry.find(':') == std::string::npos &&
       r.registry != "localhost")) {
    return RefError(written, "\"" + r.registry + "\" is not a registry host",
               "an OCI Feature is REGISTRY/NAMESPACE/NAME[:VERSION], e.g. "
               "ghcr.io/devcontainers/features/go:1");
  }
  std::vector<std::string> parts = Split(r.repository, '/');
  if (parts.size() < 2) {
    return RefError(written, "no namespace", "an OCI Feature is REGISTRY/NAMESPACE/NAME[:VERSION]");
  }
  for (const std::string& c : parts) {
    if (!RepoComponent(c)) return RefError(written, "\"" + c + "\" is not a repository name component");
  }
  return r;
}

}  // namespace cloister::devcontainer
