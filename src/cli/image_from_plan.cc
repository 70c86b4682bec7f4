#include "cli/image_from_plan.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "base/strings.h"
#include "base/terminal_text.h"
#include "catalog/names.h"
#include "catalog/sha256.h"
#include "cli/cli.h"
#include "cli/store_verbs.h"
#include "image/builder.h"
#include "image/oci/build_output.h"
#include "image/oci/builder_script.h"
#include "image/oci/finish.h"
#include "supervisor/builder_vm.h"
#include "vm/meta_disk.h"

namespace cloister::cli {

namespace fs = std::filesystem;
namespace oci = image::oci;
using Clock = std::chrono::steady_clock;

namespace {

std::string Seconds(Clock::time_point since) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", std::chrono::duration<double>(Clock::now() - since).count());
  return b;
}

// The builder image from the catalog; built and signed on first use.
Result<catalog::ResolvedImage> EnsureBuilderImage(Cli& cli, catalog::CatalogStore& store,
                                                  const PlanBuildOptions& o) {
  auto found = store.Resolve(image::kBuilderImageName, catalog::Rehash::kIfChanged);
  if (found.ok()) return found;
  if (found.error().code() != ErrorCode::kNotFound) return found.error();
  if (o.progress) o.progress("image: the builder VM's image is not built yet: building it first");
  image::BuildOptions b;
  std::string images = o.store_root + "/" + catalog::names::kImagesDir;
  b.cache_dir = o.store_root + "/" + catalog::names::kDebCacheDir;
  b.out_dir = images + "/" + catalog::names::kBuildPrefix + image::kBuilderImageName;
  b.work_dir = images + "/" + catalog::names::kWorkPrefix + image::kBuilderImageName;
  b.progress = o.progress;
  auto entry = image::BuildBuilderImage(b);
  if (!entry.ok()) {
    std::error_code ec;
    fs::remove_all(b.out_dir, ec);
    fs::remove_all(b.work_dir, ec);
    return entry.error().WithContext("building the builder image");
  }
  RETURN_IF_ERROR(PublishBuilt(cli, store, *entry, b.out_dir));
  return store.Resolve(image::kBuilderImageName, catalog::Rehash::kIfChanged);
}

Status MakeSparse(const std::string& path, uint64_t size) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("create " + path, errno);
  int rc = ftruncate(fd, static_cast<off_t>(size));
  int err = errno;
  close(fd);
  if (rc != 0) return ErrnoError("size " + path, err);
  return OkStatus();
}

// The progress line for one line of the builder's output ("" = none).
std::string ProgressLine(const oci::OutputLine& l, const oci::BuildPlan& plan, bool verbose) {
  switch (l.kind) {
    case oci::OutputKind::kStage: return "image: " + TerminalSafe(l.text) + " ...";
    case oci::OutputKind::kStep: return "image: step " + TerminalSafe(l.text);
    case oci::OutputKind::kNote: return "image: note: " + TerminalSafe(l.text);
    case oci::OutputKind::kLog: return "  | " + TerminalSafe(l.text);
    case oci::OutputKind::kProgress:
      if (verbose) return "  " + TerminalSafe(l.text);
      // skopeo's line per blob: a long pull shows it is moving (the bytes come with "pulled").
      if (StartsWith(l.text, "Copying blob ")) return "image: pull: " + TerminalSafe(l.text.substr(0, 100));
      return "";
    case oci::OutputKind::kFact:
      if (l.word == "pulled" || l.word == "unpacked" || l.word == "disk") {
        auto n = Split(l.text, ' ');
        uint64_t bytes = 0;
        if (!n.empty() && !n[0].empty() && n[0].size() < 19 &&
            n[0].find_first_not_of("0123456789") == std::string::npos) {
          bytes = std::stoull(n[0]);
        }
        std::string what = l.word == "disk" ? "rootfs" : l.word;
        return "image: " + what + " " + FormatSize(bytes);
      }
      if (l.word == "digest") return "image: manifest " + TerminalSafe(l.text);
      return "";
    case oci::OutputKind::kError: return "";
    case oci::OutputKind::kChatter: return verbose ? "  " + TerminalSafe(l.text) : "";
  }
  return "";
}

// Stages the host-made files the VM needs (script, finishing, busybox, time tool, step scripts).
Status StageInputs(const oci::BuildPlan& plan, const oci::BootParts& parts,
                   const std::string& in, const std::string& ext4_times) {
  RETURN_IF_ERROR(image::MakeDirs(in + "/steps"));
  oci::ScriptOptions so;
  so.disk_uuid = image::DeterministicUuid("cloister-image/" + plan.name + "/uuid");
  so.disk_hash_seed = image::DeterministicUuid("cloister-image/" + plan.name + "/hash");
  so.epoch = image::kSourceDateEpoch;
  RETURN_IF_ERROR(WriteFile(in + "/" + oci::kScriptFile, oci::BuilderScript(plan, so), 0644));
  RETURN_IF_ERROR(WriteFile(in + "/" + oci::kFinishFile, oci::FinishStep().command, 0644));
  RETURN_IF_ERROR(image::CopyFile(parts.busybox, in + "/" + oci::kBusyboxFile));
  RETURN_IF_ERROR(image::CopyFile(ext4_times, in + "/" + oci::kExt4TimesFile));
  if (chmod((in + "/" + oci::kExt4TimesFile).c_str(), 0755) != 0) {
    return ErrnoError("chmod " + in + "/" + oci::kExt4TimesFile, errno);
  }
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    RETURN_IF_ERROR(WriteFile(in + "/" + oci::StepScriptName(i), oci::StepScript(plan.steps[i]), 0644));
  }
  return OkStatus();
}

// The pushes: the staged directory, then the source and each step's folder.
std::vector<vm::BuilderInput> Inputs(const oci::BuildPlan& plan, const std::string& staged) {
  const std::string in = oci::kInputDir;
  std::vector<vm::BuilderInput> v{{staged, oci::kBuildDir, "in"}};
  const oci::Source& s = plan.source;
  if (s.kind == oci::SourceKind::kOciArchive || s.kind == oci::SourceKind::kDockerArchive) {
    v.push_back({s.location, in, oci::kSourceArchive});
  } else if (s.kind == oci::SourceKind::kOciDir) {
    v.push_back({s.location, in, oci::kSourceLayout});
  } else if (s.kind == oci::SourceKind::kDockerfile) {
    v.push_back({s.dockerfile.dockerfile, in, oci::kDockerfileName});
    v.push_back({s.dockerfile.context, in, oci::kContextDir});
    for (size_t i = 0; i < s.dockerfile.base_images.size(); ++i) {
      auto src = oci::ParseSourceRef(s.dockerfile.base_images[i].ref, "/");
      if (src.ok() && src->kind != oci::SourceKind::kRegistry) {
        v.push_back({src->location, in, oci::BaseInputName(i, src->kind)});
      }
    }
  }
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    if (!plan.steps[i].dir.empty()) v.push_back({plan.steps[i].dir, in, oci::StepDirName(i)});
  }
  return v;
}

std::vector<std::pair<std::string, std::string>> Provenance(const oci::BuildPlan& plan,
                                                            const oci::BuildFacts& f,
                                                            const oci::BootParts& parts,
                                                            const catalog::ResolvedImage& builder) {
  std::vector<std::pair<std::string, std::string>> p{
      {"source", plan.source.ref.substr(0, 512)},
      {"manifest", f.digest},
      {"kernel", parts.kernel_version},
      {"busybox", parts.busybox_version},
      {"builder", builder.version.substr(0, 512)},
      {"plan", oci::PlanDigest(plan)},
      {"has", std::string("tmux=") + (f.tmux.value_or(false) ? "1" : "0") +
                  " sshd=" + (f.sshd.value_or(false) ? "1" : "0")}};
  if (auto agent = vm::FindAgentBinary(); agent.ok()) {
    if (auto d = catalog::Sha256File(*agent); d.ok()) p.push_back({"agent", "sha256:" + d->sha256});
  }
  if (!plan.devcontainer_sha256.empty()) p.push_back({"devcontainer", plan.devcontainer_sha256});
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    std::string v = plan.steps[i].name + (plan.steps[i].digest.empty() ? "" : " " + plan.steps[i].digest);
    for (char& c : v) {
      if (c < 0x20 || c > 0x7e) c = '?';
    }
    p.push_back({"step." + std::to_string(i), v.substr(0, 512)});
  }
  std::sort(p.begin(), p.end());
  return p;
}

}  // namespace

std::string DefaultImageName(const oci::Source& s) {
  std::string base = s.location;
  if (s.kind == oci::SourceKind::kRegistry) {
    base = base.substr(0, base.find('@'));
    size_t slash = base.rfind('/');
    if (slash != std::string::npos) base = base.substr(slash + 1);
    base = base.substr(0, base.find(':'));
  } else {
    while (!base.empty() && base.back() == '/') base.pop_back();
    base = fs::path(base).filename().string();
    if (EndsWith(base, ".tar")) base = base.substr(0, base.size() - 4);
  }
  std::string out;
  for (char c : base) {
    char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out += (std::isalnum(static_cast<unsigned char>(l)) || l == '.' || l == '_' || l == '-') ? l : '-';
  }
  if (out.empty() || !std::isalnum(static_cast<unsigned char>(out[0]))) out = "img-" + out;
  return out.substr(0, 64);
}

Status PublishBuilt(Cli& cli, catalog::CatalogStore& store, const catalog::ImageEntry& entry,
                    const std::string& built_dir) {
  ASSIGN_OR_RETURN(auto ws, OpenStore(cli));
  ASSIGN_OR_RETURN(auto users, ws->IfImageUnused(store.ImageDir(entry.name),
                                                 [&] { return store.PublishLocal(entry, built_dir); }));
  if (users.empty()) return OkStatus();
  // In use: only a byte-identical rebuild may be published (PublishLocal then keeps the files the
  // workspaces read). Anything else would change their base under them.
  bool identical = false;
  if (auto listed = store.ListImages(); listed.ok()) {
    for (const auto& l : *listed) {
      if (l.entry.name == entry.name) identical = l.entry.artifacts == entry.artifacts;
    }
  }
  if (!identical) {
    std::error_code ec;
    fs::remove_all(built_dir, ec);
    return Error(ErrorCode::kFailedPrecondition,
                 "image \"" + entry.name + "\" is used by " + CountNoun(users.size(), "workspace") +
                     " (" + Join(users, ", ") +
                     "); this build differs from it, and replacing it would change their base "
                     "image under them",
                 "build it under another name (--name), or delete those workspaces first with "
                 "`cloister rm NAME`");
  }
  return store.PublishLocal(entry, built_dir);
}

Result<catalog::ImageEntry> BuildImageFromPlan(Cli& cli, const oci::BuildPlan& plan,
                                               const PlanBuildOptions& o) {
  auto say = [&](const std::string& l) {
    if (o.progress && !l.empty()) o.progress(l);
  };
  RETURN_IF_ERROR(oci::ValidatePlan(plan));
  ASSIGN_OR_RETURN(vm::AccelChoice accel, vm::ChooseAccel(o.accel));
  if (!accel.notice.empty()) say(accel.notice);
  ASSIGN_OR_RETURN(std::string ext4_times,
                   vm::FindHelperBinary(oci::kExt4TimesFile, "CLOISTER_EXT4_TIMES_BIN", "image"));
  catalog::CatalogStore store(o.store_root);
  ASSIGN_OR_RETURN(catalog::ResolvedImage builder, EnsureBuilderImage(cli, store, o));

  const std::string images = o.store_root + "/" + catalog::names::kImagesDir;
  const std::string out_dir = images + "/" + catalog::names::kBuildPrefix + plan.name;
  const std::string work = images + "/" + catalog::names::kWorkPrefix + plan.name;
  // Nothing half-built stays: both go on every path but success (where out_dir is published).
  struct Cleanup {
    std::string a, b;
    bool keep_out = false;
    ~Cleanup() {
      std::error_code ec;
      if (!keep_out) fs::remove_all(a, ec);
      fs::remove_all(b, ec);
    }
  } cleanup{out_dir, work};
  ASSIGN_OR_RETURN(std::string w, image::FreshWorkDir(out_dir, work));
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out_dir, ec)) fs::remove_all(e.path(), ec);

  auto t0 = Clock::now();
  say("image: [1/3] boot parts ...");
  ASSIGN_OR_RETURN(oci::BootParts parts,
                   oci::PrepareBootParts(o.store_root + "/" + catalog::names::kDebCacheDir, w, out_dir));
  say("image: [1/3] boot parts: linux " + parts.kernel_version + ", busybox " +
      parts.busybox_version + " (" + Seconds(t0) + ")");
  const uint64_t disk_bytes = plan.disk_size_bytes ? plan.disk_size_bytes : o.default_disk_bytes;
  const std::string disk = out_dir + "/" + catalog::names::kDiskFile;
  RETURN_IF_ERROR(MakeSparse(disk, disk_bytes));
  RETURN_IF_ERROR(StageInputs(plan, parts, w + "/in", ext4_times));

  auto t1 = Clock::now();
  say("image: [2/3] build in the builder VM (source " + TerminalSafe(plan.source.ref) + ") ...");
  oci::LineSplitter split;
  oci::BuildFacts facts;
  Status bad_output = OkStatus();
  auto take = [&](const std::string& line) {
    oci::OutputLine l = oci::ClassifyLine(line);
    if (Status s = oci::ApplyLine(l, facts); !s.ok() && bad_output.ok()) bad_output = s;
    say(ProgressLine(l, plan, o.verbose));
  };
  vm::BuilderVmOptions bo;
  bo.store_root = o.store_root;
  bo.image_disk = builder.disk_path;
  bo.output_disk = disk;
  bo.inputs = Inputs(plan, w + "/in");
  bo.command = {"sh", "-e", std::string(oci::kInputDir) + "/" + oci::kScriptFile};
  bo.accel = accel.accel;
  bo.cancel = o.cancel;
  bo.progress = [&](const std::string& l) { say("image: " + l); };
  bo.on_output = [&](std::string_view bytes) {
    std::vector<std::string> lines;
    split.Feed(bytes, lines);
    for (const auto& l : lines) take(l);
  };
  ASSIGN_OR_RETURN(int rc, vm::RunBuilderVm(bo));
  if (auto last = split.Finish()) take(*last);
  RETURN_IF_ERROR(bad_output);
  if (rc != 0 || !facts.result || !facts.error_kind.empty()) return oci::BuildError(facts, rc);
  say("image: [2/3] built in " + Seconds(t1) + " (manifest " + facts.digest + ")");

  say("image: [3/3] hash ...");
  auto t2 = Clock::now();
  catalog::ImageEntry entry;
  entry.name = plan.name;
  entry.version = "oci+" + facts.digest.substr(7, 12) + "+linux-" + parts.kernel_version;
  entry.arch = "amd64";
  entry.kernel_cmdline = protocol::kKernelCmdline;
  entry.post_install = {oci::FinishStep()};
  entry.provenance = Provenance(plan, facts, parts, builder);
  RETURN_IF_ERROR(image::AddArtifactDigests(out_dir, &entry));
  say("image: [3/3] disk sha256 " + entry.artifacts[0].sha256.substr(0, 16) + "... (" +
      Seconds(t2) + ")");
  RETURN_IF_ERROR(PublishBuilt(cli, store, entry, out_dir));
  cleanup.keep_out = true;  // published: PublishLocal moved it into place
  return entry;
}

}  // namespace cloister::cli
