#include "image/oci/build_output.h"

#include <regex>

#include "base/strings.h"
#include "base/terminal_text.h"

namespace cloister::image::oci {

namespace {

constexpr std::string_view kPrefix = "cloister-build: ";

Error Bad(const std::string& what) {
  return Error(ErrorCode::kCorrupt, "the builder VM reported a malformed " + what);
}

Result<uint64_t> Decimal(std::string_view s, const std::string& what) {
  if (s.empty() || s.size() > 19) return Bad(what);
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return Bad(what);
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

// "WORD REST" -> (WORD, REST).
std::pair<std::string_view, std::string_view> Cut(std::string_view s) {
  size_t sp = s.find(' ');
  if (sp == std::string_view::npos) return {s, {}};
  return {s.substr(0, sp), s.substr(sp + 1)};
}

Result<bool> Flag(std::string_view v, const std::string& what) {
  if (v == "1") return true;
  if (v == "0") return false;
  return Bad(what);
}

}  // namespace

void LineSplitter::Feed(std::string_view bytes, std::vector<std::string>& out) {
  for (char c : bytes) {
    if (c == '\n') {
      out.push_back(std::move(line_));
      line_.clear();
      overlong_ = false;
      continue;
    }
    if (line_.size() >= kMaxLineBytes) {
      overlong_ = true;  // SECURITY: the rest of an overlong line is dropped, never buffered
      continue;
    }
    line_ += c;
  }
}

std::optional<std::string> LineSplitter::Finish() {
  if (line_.empty()) return std::nullopt;
  std::string l = std::move(line_);
  line_.clear();
  return l;
}

OutputLine ClassifyLine(std::string_view line) {
  OutputLine out;
  if (!StartsWith(line, kPrefix)) {
    out.text = std::string(line.substr(0, kMaxLineBytes));
    return out;
  }
  auto [word, rest] = Cut(line.substr(kPrefix.size()));
  out.word = std::string(word);
  out.text = std::string(rest);
  if (word == "stage") out.kind = OutputKind::kStage;
  else if (word == "progress") out.kind = OutputKind::kProgress;
  else if (word == "log") out.kind = OutputKind::kLog;
  else if (word == "step") out.kind = OutputKind::kStep;
  else if (word == "note") out.kind = OutputKind::kNote;
  else if (word == "error") out.kind = OutputKind::kError;
  else if (word == "digest" || word == "pulled" || word == "unpacked" || word == "has" ||
           word == "disk" || word == "result") {
    out.kind = OutputKind::kFact;
  } else {
    out.kind = OutputKind::kChatter;
  }
  return out;
}

Status ApplyLine(const OutputLine& line, BuildFacts& facts) {
  static const std::regex kDigest("sha256:[0-9a-f]{64}");
  static const std::regex kArch("[a-z0-9_]{1,16}");
  static const std::regex kKind("[a-z-]{1,16}");
  if (line.kind == OutputKind::kError) {
    auto [kind, text] = Cut(line.text);
    std::string k(kind);
    if (!std::regex_match(k, kKind)) return Bad("error");
    facts.error_kind = k;
    facts.error_text = std::string(text.substr(0, kMaxErrorBytes));
    return OkStatus();
  }
  if (line.kind != OutputKind::kFact) return OkStatus();
  const std::string& w = line.word;
  if (w == "digest") {
    if (!std::regex_match(line.text, kDigest)) return Bad("digest");
    facts.digest = line.text;
  } else if (w == "pulled" || w == "unpacked" || w == "disk") {
    auto [num, unit] = Cut(line.text);
    if (unit != "bytes") return Bad(w + " size");
    ASSIGN_OR_RETURN(uint64_t n, Decimal(num, w + " size"));
    (w == "pulled" ? facts.pulled_bytes : w == "unpacked" ? facts.unpacked_bytes : facts.rootfs_bytes) = n;
  } else if (w == "has") {
    for (const std::string& kv : Split(line.text, ' ')) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos) return Bad("has");
      std::string k = kv.substr(0, eq);
      ASSIGN_OR_RETURN(bool v, Flag(std::string_view(kv).substr(eq + 1), "has"));
      if (k == "tmux") facts.tmux = v;
      else if (k == "sshd") facts.sshd = v;
      else if (k == "sh") facts.sh = v;
      else return Bad("has");
    }
  } else if (w == "result") {
    std::string digest, arch;
    for (const std::string& kv : Split(line.text, ' ')) {
      if (StartsWith(kv, "digest=")) digest = kv.substr(7);
      else if (StartsWith(kv, "arch=")) arch = kv.substr(5);
      else return Bad("result");
    }
    if (!std::regex_match(digest, kDigest) || !std::regex_match(arch, kArch)) return Bad("result");
    if (!facts.digest.empty() && facts.digest != digest) return Bad("result (digest changed)");
    facts.digest = digest;
    facts.arch = arch;
    facts.result = true;
  }
  return OkStatus();
}

Error BuildError(const BuildFacts& f, int rc) {
  // SECURITY: the text is the builder's (the image's code may have written it): bounded by
  // ApplyLine, made terminal-safe here, and only ever shown.
  std::string text = TerminalSafe(f.error_text);
  const std::string& k = f.error_kind;
  if (k == "unreachable") {
    return Error(ErrorCode::kUnavailable, "the registry did not answer: " + text,
                 "check the registry's name and that this host reaches it (the builder pulls "
                 "through a cloister proxy on this host, like a workspace's egress)");
  }
  if (k == "not-found") {
    return Error(ErrorCode::kNotFound, "image source not found: " + text,
                 "check the name and tag (`skopeo list-tags docker://NAME` lists a repository's "
                 "tags)");
  }
  if (k == "arch") {
    return Error(ErrorCode::kInvalidArgument, "image source is not for amd64: " + text,
                 "use a tag or digest of an amd64 (linux/amd64) image");
  }
  if (k == "auth") {
    return Error(ErrorCode::kPermissionDenied, "the registry refused the pull: " + text,
                 "a private image needs a registry login, which `image build --from` cannot "
                 "use yet: pull it with your own tools and build from the archive "
                 "(`skopeo copy docker://NAME oci-archive:FILE`, then --from oci-archive:FILE)");
  }
  if (k == "step" || k == "build") {
    return Error(ErrorCode::kFailedPrecondition, "image build: " + k + " " + text,
                 "see its output above; run again with --verbose for every line");
  }
  if (k == "disk") {
    return Error(ErrorCode::kNoSpace, "image build (disk): " + text,
                 "give it more room with --disk-size");
  }
  if (!k.empty()) {
    return Error(ErrorCode::kFailedPrecondition, "image build (" + k + "): " + text,
                 "run again with --verbose to see the tools' output");
  }
  return Error(ErrorCode::kInternal,
               "the builder VM's script ended (exit " + std::to_string(rc) + ") without a result",
               "run again with --verbose to see the tools' output");
}

}  // namespace cloister::image::oci
