#include "image/oci/builder_script.h"

#include "image/oci/finish.h"

namespace cloister::image::oci {

namespace {

// The script's fixed head: names, then the helpers (kFunctions), then the builder's own disk grown.
constexpr char kHead[] = R"SH(#!/bin/sh
# cloister's image build in the builder VM (image/oci/builder_script.h). Lines for the host begin
# with "cloister-build: "; everything else is the tools' own output.
set -eu
set -o pipefail
IN=/var/lib/cloister-build/in
W=/var/lib/cloister-build/work
R=$W/bundle/rootfs
export TMPDIR=/var/tmp
)SH";

constexpr char kFunctions[] = R"SH(say() { echo "cloister-build: $*"; }
die() { say "error $*"; exit 1; }
last() { grep -v '^[[:space:]]*$' "$1" | tail -n 1 | tr -d '\r' | cut -c1-400; }
logtail() { tail -n 20 "$1" | while IFS= read -r l; do say "log $l"; done; }
# A failed copy, in words the host shows: a registry that does not answer (before "no such":
# a name that does not resolve is "no such host"), no such tag, another architecture, a login,
# else the tool's last line.
pullfail() {
  msg=$(last "$W/err")
  case "$msg" in
    *"pinging container registry"*|*"dial tcp"*|*"no such host"*|*"connection refused"*|*"connection reset"*|*"i/o timeout"*|*"TLS handshake"*|*": EOF"*|*"Bad Gateway"*|*"Gateway Timeout"*) die "unreachable $1: $msg" ;;
    *"manifest unknown"*|*"name unknown"*|*"not found"*|*"no such"*) die "not-found $1: $msg" ;;
    *"no image found in manifest list"*|*"choosing an image from manifest list"*) die "arch $1: $msg" ;;
    *"unauthorized"*|*"authentication required"*|*"denied"*) die "auth $1: $msg" ;;
    *) die "pull $1: $msg" ;;
  esac
}
# Copies image $1 to $2, each blob a progress line.
copy() {
  skopeo copy --override-arch amd64 --override-os linux "$1" "$2" 2> "$W/err" |
    while IFS= read -r l; do say "progress $l"; done || pullfail "$1"
}
)SH";

constexpr char kStart[] = R"SH(rm -rf "$W"
mkdir -p "$W" /var/tmp
say "stage grow"
resize2fs /dev/vda > "$W/grow.log" 2>&1 || say "note the builder's disk was not grown: $(last "$W/grow.log")"
)SH";

// Checks the layout at oci:$W/oci:src is amd64 and records its manifest's digest.
constexpr char kCheck[] = R"SH(ARCH=$(skopeo inspect --format '{{.Architecture}}' "oci:$W/oci:src" 2> "$W/err") || pullfail "the copied image"
[ "$ARCH" = amd64 ] || die "arch the image is for $ARCH, not amd64 (pick an amd64 tag or digest)"
say "pulled $(du -sb "$W/oci" | cut -f1) bytes"
)SH";

constexpr char kUnpack[] = R"SH(say "stage unpack"
umoci unpack --image "$W/oci:src" "$W/bundle" > "$W/umoci.log" 2>&1 || die "unpack $(last "$W/umoci.log")"
say "unpacked $(du -sb "$R" | cut -f1) bytes"
)SH";

// The chroot the steps run in: the VM's /proc, /sys, /dev, its resolver and CA bundle (the proxy's
// CA appended by the agent) for the step only.
constexpr char kChrootUp[] = R"SH([ -x "$R/bin/sh" ] || [ -L "$R/bin/sh" ] || die "step the image has no /bin/sh to run its steps with"
mkdir -p "$R/proc" "$R/sys" "$R/dev" "$R/tmp" "$R/etc"
mount -t proc proc "$R/proc"
mount -t sysfs sysfs "$R/sys"
mount -o bind /dev "$R/dev"
if [ -e "$R/etc/resolv.conf" ] || [ -L "$R/etc/resolv.conf" ]; then mv "$R/etc/resolv.conf" "$W/resolv.saved"; fi
cp /etc/resolv.conf "$R/etc/resolv.conf"
cp /etc/ssl/certs/ca-certificates.crt "$R/tmp/cloister-ca.crt"
)SH";

constexpr char kChrootDown[] = R"SH(umount "$R/dev" "$R/sys" "$R/proc"
rm -f "$R/etc/resolv.conf" "$R/tmp/cloister-ca.crt"
if [ -e "$W/resolv.saved" ] || [ -L "$W/resolv.saved" ]; then mv "$W/resolv.saved" "$R/etc/resolv.conf"; fi
)SH";

constexpr char kFinish[] = R"SH(say "stage finish"
rm -rf "$R/.cloister-parts"
mkdir "$R/.cloister-parts"
cp "$IN/busybox" "$R/.cloister-parts/busybox"
chmod 0755 "$R/.cloister-parts/busybox"
cp "$IN/finish.sh" "$R/.cloister-parts/finish.sh"
chroot "$R" /.cloister-parts/busybox sh -e /.cloister-parts/finish.sh > "$W/finish.log" 2>&1 || {
  grep '^cloister-build: ' "$W/finish.log" || true
  die "finish $(last "$W/finish.log")"
}
grep '^cloister-build: ' "$W/finish.log"
)SH";

std::string SourceTransport(const Source& s, const std::string& input) {
  switch (s.kind) {
    case SourceKind::kRegistry: return "docker://" + s.location;
    case SourceKind::kOciArchive: return "oci-archive:$IN/" + input;
    case SourceKind::kDockerArchive: return "docker-archive:$IN/" + input;
    case SourceKind::kOciDir:
      return "oci:$IN/" + input + (s.oci_ref.empty() ? "" : ":" + s.oci_ref);
    case SourceKind::kDockerfile: return "";
  }
  return "";
}

// The registry reference without its tag (a pinned copy names the digest only).
std::string RepositoryOf(const std::string& location) {
  std::string rest = location.substr(0, location.find('@'));
  size_t slash = rest.rfind('/'), colon = rest.rfind(':');
  if (colon != std::string::npos && (slash == std::string::npos || colon > slash)) {
    rest = rest.substr(0, colon);
  }
  return rest;
}

// SRC (a shell word that may hold $IN) copied to oci:$W/oci:src, pinned to the manifest it
// inspected: a registry tag cannot move between the inspect and the copy.
std::string CopySource(const Source& s, const std::string& input) {
  std::string src = SourceTransport(s, input);
  // Quoted for the shell but $IN, which the double quotes leave to expand.
  std::string q = "\"" + src + "\"";
  std::string out = "say \"stage pull\"\n";
  out += "skopeo inspect --raw " + q + " > \"$W/manifest.json\" 2> \"$W/err\" || pullfail " + q + "\n";
  out += "DIGEST=sha256:$(sha256sum \"$W/manifest.json\" | cut -d' ' -f1)\n";
  out += "say \"digest $DIGEST\"\n";
  if (s.kind == SourceKind::kRegistry) {
    out += "copy " + ShellQuote("docker://" + RepositoryOf(s.location)) + "\"@$DIGEST\" \"oci:$W/oci:src\"\n";
  } else {
    out += "copy " + q + " \"oci:$W/oci:src\"\n";
  }
  return out + kCheck;
}

std::string DockerfileBuild(const BuildPlan& plan) {
  const DockerfileSource& d = plan.source.dockerfile;
  std::string out;
  for (size_t i = 0; i < d.base_images.size(); ++i) {
    auto src = ParseSourceRef(d.base_images[i].ref, "/");
    if (!src.ok()) continue;  // ValidatePlan refused it before
    out += "say " + ShellQuote("stage base " + d.base_images[i].name) + "\n";
    out += "copy \"" + SourceTransport(*src, BaseInputName(i, src->kind)) + "\" " +
           ShellQuote("containers-storage:" + d.base_images[i].name) + "\n";
  }
  out += "say \"stage build\"\n";
  std::string bud = "buildah bud --isolation chroot --storage-driver vfs --pull=missing --layers=false "
                    "-f \"$IN/Dockerfile\" -t localhost/cloister-build:latest";
  if (!d.target.empty()) bud += " --target " + ShellQuote(d.target);
  for (const auto& [k, v] : d.build_args) bud += " --build-arg " + ShellQuote(k + "=" + v);
  bud += " \"$IN/context\"";
  if (plan.show_step_output) {
    out += bud + " 2>&1 | while IFS= read -r l; do say \"log $l\"; done || die \"build the Dockerfile failed\"\n";
  } else {
    out += bud + " > \"$W/build.log\" 2>&1 || { logtail \"$W/build.log\"; die \"build the Dockerfile failed: $(last \"$W/build.log\")\"; }\n";
  }
  out += "skopeo copy containers-storage:localhost/cloister-build:latest \"oci:$W/oci:src\" > \"$W/err\" 2>&1 || pullfail \"the built image\"\n";
  out += "DIGEST=sha256:$(skopeo inspect --raw \"oci:$W/oci:src\" | sha256sum | cut -d' ' -f1)\n";
  out += "say \"digest $DIGEST\"\n";
  return out + kCheck;
}

}  // namespace

std::string StepScriptName(size_t index) { return "steps/" + std::to_string(index) + ".sh"; }
std::string StepDirName(size_t index) { return "stepdir-" + std::to_string(index); }
std::string BaseInputName(size_t index, SourceKind kind) {
  return "base-" + std::to_string(index) + (kind == SourceKind::kOciDir ? "" : ".tar");
}

std::string ShellQuote(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string StepScript(const Step& step) {
  std::string out = "# cloister build step: " + step.name + "\n";
  out += step.dir.empty() ? "cd /\n" : "cd /tmp/cloister-step\n";
  for (const auto& [k, v] : step.env) out += "export " + k + "=" + ShellQuote(v) + "\n";
  return out + step.command + "\n";
}

std::string ScriptFunctions() { return kFunctions; }

std::string BuilderScript(const BuildPlan& plan, const ScriptOptions& o) {
  std::string out = std::string(kHead) + kFunctions + kStart;
  if (plan.source.kind == SourceKind::kDockerfile) {
    out += DockerfileBuild(plan);
  } else {
    std::string input = plan.source.kind == SourceKind::kOciDir ? kSourceLayout : kSourceArchive;
    out += CopySource(plan.source, input);
  }
  out += kUnpack;
  if (!plan.steps.empty()) {
    out += kChrootUp;
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      const Step& st = plan.steps[i];
      std::string n = std::to_string(i);
      out += "say " + ShellQuote("step " + n + " " + st.name) + "\n";
      out += "rm -rf \"$R/tmp/cloister-step\"\n";
      if (!st.dir.empty()) out += "cp -a \"$IN/" + StepDirName(i) + "\" \"$R/tmp/cloister-step\"\n";
      out += "cp \"$IN/" + StepScriptName(i) + "\" \"$R/tmp/cloister-step.sh\"\n";
      std::string run =
          "env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "
          "USER=root LC_ALL=C.UTF-8 SOURCE_DATE_EPOCH=" + std::to_string(o.epoch) +
          " SSL_CERT_FILE=/tmp/cloister-ca.crt CURL_CA_BUNDLE=/tmp/cloister-ca.crt "
          "NODE_EXTRA_CA_CERTS=/tmp/cloister-ca.crt REQUESTS_CA_BUNDLE=/tmp/cloister-ca.crt "
          "GIT_SSL_CAINFO=/tmp/cloister-ca.crt chroot \"$R\" /bin/sh -e /tmp/cloister-step.sh";
      std::string failed = "die " + ShellQuote("step " + n + " " + st.name + " failed") +
                           "\" (exit $rc)\"";
      if (plan.show_step_output) {
        out += "rc=0\n{ " + run + " 2>&1 || echo \"$?\" > \"$W/rc\"; } | while IFS= read -r l; do say \"log $l\"; done\n";
        out += "[ ! -e \"$W/rc\" ] || { rc=$(cat \"$W/rc\"); " + failed + "; }\n";
      } else {
        out += "rc=0\n" + run + " > \"$W/step.log\" 2>&1 || rc=$?\n";
        out += "[ \"$rc\" = 0 ] || { logtail \"$W/step.log\"; " + failed + "; }\n";
      }
      out += "rm -rf \"$R/tmp/cloister-step\" \"$R/tmp/cloister-step.sh\"\n";
    }
    out += kChrootDown;
  }
  out += kFinish;
  out += "say \"stage disk\"\n";
  out += "need=$(du -sb \"$R\" | cut -f1)\n";
  out += "have=$(blockdev --getsize64 " + std::string(kOutputDevice) + ")\n";
  out += "[ \"$need\" -lt $((have * 9 / 10)) ] || die \"disk the image's rootfs ($((need >> 20)) MiB) "
         "does not fit its disk ($((have >> 20)) MiB): build it with a larger --disk-size\"\n";
  out += "E2FSPROGS_FAKE_TIME=" + std::to_string(o.epoch) +
         " LC_ALL=C mkfs.ext4 -q -F -t ext4 -b 4096 -I 256 -L cloister-root -U " +
         ShellQuote(o.disk_uuid) + " -E " +
         ShellQuote("hash_seed=" + o.disk_hash_seed + ",root_owner=0:0,lazy_itable_init=0,nodiscard") +
         " -d \"$R\" " + kOutputDevice + " > \"$W/mkfs.log\" 2>&1 || die \"disk mkfs.ext4: $(last \"$W/mkfs.log\")\"\n";
  out += "\"$IN/" + std::string(kExt4TimesFile) + "\" " + kOutputDevice + " " +
         std::to_string(o.epoch) + " > \"$W/times.log\" 2>&1 || die \"disk times: $(last \"$W/times.log\")\"\n";
  out += "sync\n";
  out += "say \"disk $need bytes\"\n";
  out += "say \"result digest=$DIGEST arch=$ARCH\"\n";
  return out;
}

}  // namespace cloister::image::oci
