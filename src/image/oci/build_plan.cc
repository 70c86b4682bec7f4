#include "image/oci/build_plan.h"

#include <sys/stat.h>

#include <regex>

#include "base/strings.h"
#include "catalog/catalog.h"
#include "catalog/sha256.h"

namespace cloister::image::oci {

namespace {

constexpr char kRefForms[] =
    "use docker://NAME[:TAG|@sha256:DIGEST], oci-archive:PATH, docker-archive:PATH or "
    "oci:DIR[:REF]";

Error BadRef(std::string_view ref, const std::string& why) {
  return Error(ErrorCode::kInvalidArgument,
               "image source \"" + std::string(ref) + "\": " + why, kRefForms);
}

std::string Absolute(const std::string& path, const std::string& cwd) {
  if (!path.empty() && path[0] == '/') return path;
  return cwd + "/" + path;
}

bool Exists(const std::string& path, bool want_dir) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return false;
  return want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode);
}

// A registry reference as the docker transport takes it: [HOST[:PORT]/]PATH[:TAG][@DIGEST].
Status CheckRegistryName(std::string_view ref, const std::string& name) {
  static const std::regex kHost(R"re(([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*(:[0-9]{1,5})?)re");
  static const std::regex kComponent(R"re([a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)re");
  static const std::regex kTag(R"re([A-Za-z0-9_][A-Za-z0-9._-]{0,127})re");
  static const std::regex kDigest(R"re(sha256:[a-f0-9]{64})re");
  if (name.empty()) return BadRef(ref, "no image name after docker://");
  if (name.size() > 512) return BadRef(ref, "the name is longer than 512 characters");
  std::string rest = name, digest, tag;
  if (size_t at = rest.find('@'); at != std::string::npos) {
    digest = rest.substr(at + 1);
    rest = rest.substr(0, at);
    if (!std::regex_match(digest, kDigest)) {
      return BadRef(ref, "the digest \"" + digest + "\" is not sha256: and 64 hex digits");
    }
  }
  size_t slash = rest.rfind('/');
  size_t colon = rest.rfind(':');
  if (colon != std::string::npos && (slash == std::string::npos || colon > slash)) {
    tag = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
    if (!std::regex_match(tag, kTag)) return BadRef(ref, "the tag \"" + tag + "\" is malformed");
  }
  std::vector<std::string> parts = Split(rest, '/');
  size_t first = 0;
  if (parts.size() > 1 && (parts[0].find_first_of(".:") != std::string::npos ||
                           parts[0] == "localhost")) {
    if (!std::regex_match(parts[0], kHost)) {
      return BadRef(ref, "the registry host \"" + parts[0] + "\" is malformed");
    }
    first = 1;
  }
  for (size_t i = first; i < parts.size(); ++i) {
    if (!std::regex_match(parts[i], kComponent)) {
      return BadRef(ref, "the name component \"" + parts[i] +
                             "\" is malformed (lower-case letters, digits, . _ -)");
    }
  }
  return OkStatus();
}

void Field(std::string& out, std::string_view tag, std::string_view value) {
  out += tag;
  out += ':';
  out += std::to_string(value.size());
  out += ':';
  out += value;
  out += '\n';
}

}  // namespace

const char* SourceKindName(SourceKind kind) {
  switch (kind) {
    case SourceKind::kRegistry: return "registry";
    case SourceKind::kOciArchive: return "oci-archive";
    case SourceKind::kDockerArchive: return "docker-archive";
    case SourceKind::kOciDir: return "oci";
    case SourceKind::kDockerfile: return "dockerfile";
  }
  return "?";
}

Result<Source> ParseSourceRef(std::string_view ref, const std::string& cwd) {
  if (ref.find('\0') != std::string_view::npos || ref.find('\n') != std::string_view::npos) {
    return BadRef("(control characters)", "it holds a NUL or a newline");
  }
  Source s;
  s.ref = std::string(ref);
  auto path_after = [&](std::string_view prefix) { return std::string(ref.substr(prefix.size())); };
  if (StartsWith(ref, "docker://")) {
    s.kind = SourceKind::kRegistry;
    s.location = path_after("docker://");
    RETURN_IF_ERROR(CheckRegistryName(ref, s.location));
    return s;
  }
  if (StartsWith(ref, "oci-archive:") || StartsWith(ref, "docker-archive:")) {
    bool oci = StartsWith(ref, "oci-archive:");
    s.kind = oci ? SourceKind::kOciArchive : SourceKind::kDockerArchive;
    std::string path = path_after(oci ? "oci-archive:" : "docker-archive:");
    if (path.empty()) return BadRef(ref, "no archive path");
    s.location = Absolute(path, cwd);
    if (!Exists(s.location, false)) return BadRef(ref, s.location + " is not a file");
    return s;
  }
  if (StartsWith(ref, "oci:")) {
    s.kind = SourceKind::kOciDir;
    std::string path = path_after("oci:");
    // oci:DIR:REF: the REF is after the last ':' when DIR itself is a directory without it.
    if (size_t colon = path.rfind(':'); colon != std::string::npos &&
                                        !Exists(Absolute(path, cwd), true)) {
      s.oci_ref = path.substr(colon + 1);
      path = path.substr(0, colon);
      static const std::regex kRef(R"re([A-Za-z0-9_][A-Za-z0-9._:/-]{0,127})re");
      if (!std::regex_match(s.oci_ref, kRef)) {
        return BadRef(ref, "the image name \"" + s.oci_ref + "\" in the layout is malformed");
      }
    }
    if (path.empty()) return BadRef(ref, "no layout directory");
    s.location = Absolute(path, cwd);
    if (!Exists(s.location, true) || !Exists(s.location + "/index.json", false)) {
      return BadRef(ref, s.location + " is not an OCI image layout (no index.json)");
    }
    return s;
  }
  size_t colon = ref.find(':');
  std::string transport = colon == std::string_view::npos ? "" : std::string(ref.substr(0, colon));
  if (transport.empty() || transport.find('/') != std::string::npos) {
    return BadRef(ref, "no transport (a bare name is ambiguous)");
  }
  return BadRef(ref, "unknown transport \"" + transport + "\"");
}

Status ValidatePlan(const BuildPlan& plan) {
  auto bad = [](const std::string& why, const std::string& hint = "") {
    return Error(ErrorCode::kInvalidArgument, "image build plan: " + why, hint);
  };
  if (!catalog::IsValidName(plan.name)) {
    return bad("image name \"" + plan.name + "\" is not valid",
               "a name like my-env: lower-case letters, digits, . _ - (at most 64)");
  }
  const Source& s = plan.source;
  switch (s.kind) {
    case SourceKind::kRegistry:
      RETURN_IF_ERROR(CheckRegistryName(s.ref, s.location));
      break;
    case SourceKind::kOciArchive:
    case SourceKind::kDockerArchive:
      if (!Exists(s.location, false)) return bad(s.location + " is not a file");
      break;
    case SourceKind::kOciDir:
      if (!Exists(s.location + "/index.json", false)) {
        return bad(s.location + " is not an OCI image layout");
      }
      break;
    case SourceKind::kDockerfile: {
      const DockerfileSource& d = s.dockerfile;
      if (!Exists(d.dockerfile, false)) return bad("the Dockerfile " + d.dockerfile + " is missing");
      if (!Exists(d.context, true)) return bad("the build context " + d.context + " is not a directory");
      static const std::regex kBaseName(R"re([a-z0-9][a-z0-9._/-]{0,127}(:[A-Za-z0-9._-]{1,128})?)re");
      for (const auto& b : d.base_images) {
        if (!std::regex_match(b.name, kBaseName)) return bad("base image name \"" + b.name + "\" is malformed");
        auto src = ParseSourceRef(b.ref, "/");
        if (!src.ok()) return src.error();
      }
      for (const auto& [k, v] : d.build_args) {
        if (k.empty() || k.find_first_of("=\n\0", 0, 3) != std::string::npos ||
            v.find('\0') != std::string::npos) {
          return bad("build arg \"" + k + "\" is malformed");
        }
      }
      break;
    }
  }
  if (plan.steps.size() > kMaxSteps) {
    return bad(std::to_string(plan.steps.size()) + " steps (at most " + std::to_string(kMaxSteps) + ")");
  }
  static const std::regex kEnvName(R"re([A-Za-z_][A-Za-z0-9_]{0,127})re");
  for (const Step& st : plan.steps) {
    if (st.name.empty() || st.name.size() > 256 || st.name.find('\n') != std::string::npos) {
      return bad("a step needs a one-line name of at most 256 characters");
    }
    if (st.command.empty() || st.command.size() > kMaxCommandBytes ||
        st.command.find('\0') != std::string::npos) {
      return bad("step \"" + st.name + "\": its command is empty, has a NUL or is too long");
    }
    if (!st.dir.empty() && !Exists(st.dir, true)) {
      return bad("step \"" + st.name + "\": " + st.dir + " is not a directory");
    }
    if (st.env.size() > kMaxEnv) return bad("step \"" + st.name + "\": too many variables");
    for (const auto& [k, v] : st.env) {
      if (!std::regex_match(k, kEnvName) || v.find('\0') != std::string::npos) {
        return bad("step \"" + st.name + "\": variable \"" + k + "\" is malformed");
      }
    }
  }
  if (plan.disk_size_bytes > kMaxDiskBytes) return bad("the disk size is over 256 GiB");
  if (plan.registry_credential.empty() != plan.registry_workspace.empty()) {
    return bad("a registry login names both the workspace and the credential");
  }
  return OkStatus();
}

std::string PlanDigest(const BuildPlan& plan) {
  std::string b = "cloister/oci-build-plan/v1\n";
  const Source& s = plan.source;
  Field(b, "kind", SourceKindName(s.kind));
  Field(b, "ref", s.ref);
  Field(b, "location", s.location);
  Field(b, "oci_ref", s.oci_ref);
  if (s.kind == SourceKind::kDockerfile) {
    Field(b, "dockerfile", s.dockerfile.dockerfile);
    Field(b, "context", s.dockerfile.context);
    Field(b, "target", s.dockerfile.target);
    for (const auto& [k, v] : s.dockerfile.build_args) {
      Field(b, "arg", k);
      Field(b, "value", v);
    }
    for (const auto& base : s.dockerfile.base_images) {
      Field(b, "base", base.name);
      Field(b, "base_ref", base.ref);
    }
  }
  for (const Step& st : plan.steps) {
    Field(b, "step", st.name);
    Field(b, "dir", st.dir);
    Field(b, "command", st.command);
    Field(b, "digest", st.digest);
    for (const auto& [k, v] : st.env) {
      Field(b, "env", k);
      Field(b, "value", v);
    }
  }
  Field(b, "devcontainer", plan.devcontainer_sha256);
  if (!plan.inputs_sha256.empty()) Field(b, "inputs", plan.inputs_sha256);
  Field(b, "disk", std::to_string(plan.disk_size_bytes));
  return catalog::Sha256Hex(b);
}

}  // namespace cloister::image::oci
