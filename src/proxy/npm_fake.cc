#include "proxy/npm_fake.h"

#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <boost/beast/zlib/deflate_stream.hpp>
#include <boost/crc.hpp>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/subprocess.h"

namespace cloister::proxy::testing {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// SHA-512 (base64) and SHA-1 (hex) of a file, read in chunks.
Status HashFile(const std::string& path, std::string& sha512_b64, std::string& sha1_hex) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error(ErrorCode::kNotFound, "cannot read " + path);
  EVP_MD_CTX* a = EVP_MD_CTX_new();
  EVP_MD_CTX* b = EVP_MD_CTX_new();
  EVP_DigestInit_ex(a, EVP_sha512(), nullptr);
  EVP_DigestInit_ex(b, EVP_sha1(), nullptr);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    size_t n = static_cast<size_t>(in.gcount());
    if (n == 0) break;
    EVP_DigestUpdate(a, buf.data(), n);
    EVP_DigestUpdate(b, buf.data(), n);
  }
  unsigned char da[64], db[20];
  unsigned la = 0, lb = 0;
  EVP_DigestFinal_ex(a, da, &la);
  EVP_DigestFinal_ex(b, db, &lb);
  EVP_MD_CTX_free(a);
  EVP_MD_CTX_free(b);
  unsigned char b64[128];
  int n = EVP_EncodeBlock(b64, da, static_cast<int>(la));
  sha512_b64.assign(reinterpret_cast<char*>(b64), static_cast<size_t>(n));
  sha1_hex = HexEncode(std::string_view(reinterpret_cast<char*>(db), lb));
  return OkStatus();
}

std::string UnscopedName(const std::string& name) {
  size_t slash = name.rfind('/');
  return slash == std::string::npos ? name : name.substr(slash + 1);
}

bool IsPrerelease(const std::string& v) { return v.find('-') != std::string::npos; }

// Compares dotted numeric versions (prerelease parts compared as text), enough for latest.
bool VersionLess(const std::string& a, const std::string& b) {
  auto parts = [](const std::string& v) {
    std::vector<long> out;
    for (const std::string& p : Split(v.substr(0, v.find('-')), '.')) out.push_back(std::atol(p.c_str()));
    return out;
  };
  auto pa = parts(a), pb = parts(b);
  if (pa != pb) return pa < pb;
  return a < b;
}

// `data` in gzip framing (RFC 1952) around Beast's deflate.
std::string Gzip(const std::string& data) {
  namespace zlib = boost::beast::zlib;
  zlib::deflate_stream ds;
  ds.reset(6, 15, 8, zlib::Strategy::normal);  // windowBits 15: raw deflate in Beast's API
  std::string out("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", 10);
  std::string buf(data.size() + 1024, '\0');
  zlib::z_params zs;
  zs.next_in = data.data();
  zs.avail_in = data.size();
  zs.next_out = buf.data();
  zs.avail_out = buf.size();
  boost::system::error_code ec;
  ds.write(zs, zlib::Flush::finish, ec);
  out.append(buf.data(), buf.size() - zs.avail_out);
  boost::crc_32_type crc;
  crc.process_bytes(data.data(), data.size());
  uint32_t c = crc.checksum(), n = static_cast<uint32_t>(data.size());
  for (uint32_t v : {c, n}) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  return out;
}

}  // namespace

Result<std::shared_ptr<NpmRegistryFake>> NpmRegistryFake::Load(const std::string& dir) {
  auto fake = std::make_shared<NpmRegistryFake>();
  std::error_code ec;
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".tgz") files.push_back(e.path().string());
  }
  if (ec) return Error(ErrorCode::kNotFound, "npm tarball directory " + dir + ": " + ec.message());
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) {
    auto pj = RunProcessChecked({"tar", "-xzOf", f, "package/package.json"});
    if (!pj.ok()) return pj.error().WithContext("reading package.json of " + f);
    json m = json::parse(pj->out, nullptr, false);
    if (m.is_discarded() || !m.is_object() || !m.contains("name") || !m["name"].is_string() ||
        !m.contains("version") || !m["version"].is_string()) {
      return Error(ErrorCode::kCorrupt, f + ": package.json has no name or version");
    }
    NpmTarball t;
    t.name = m["name"].get<std::string>();
    t.version = m["version"].get<std::string>();
    t.path = f;
    t.url_path = "/" + t.name + "/-/" + UnscopedName(t.name) + "-" + t.version + ".tgz";
    t.manifest = pj->out;
    std::string sha512;
    RETURN_IF_ERROR(HashFile(f, sha512, t.shasum));
    t.integrity = "sha512-" + sha512;
    fake->tarballs_.push_back(std::move(t));
  }
  // Optional dependencies we hold no tarball for: marked for no platform (see the header).
  for (const NpmTarball& t : fake->tarballs_) {
    json m = json::parse(t.manifest, nullptr, false);
    if (!m.contains("optionalDependencies") || !m["optionalDependencies"].is_object()) continue;
    for (auto it = m["optionalDependencies"].begin(); it != m["optionalDependencies"].end(); ++it) {
      if (!it.value().is_string()) continue;
      std::string name = it.key(), version = it.value().get<std::string>();
      if (StartsWith(version, "npm:")) {  // "npm:@openai/codex@0.171.0-linux-x64"
        std::string target = version.substr(4);
        size_t at = target.rfind('@');
        if (at == 0 || at == std::string::npos) continue;
        name = target.substr(0, at);
        version = target.substr(at + 1);
      }
      bool have = std::any_of(fake->tarballs_.begin(), fake->tarballs_.end(), [&](const NpmTarball& x) {
        return x.name == name && x.version == version;
      });
      auto& list = fake->unavailable_[name];
      if (!have && std::find(list.begin(), list.end(), version) == list.end()) list.push_back(version);
    }
  }
  return fake;
}

std::string NpmRegistryFake::Packument(const std::string& name, const std::string& base_url) const {
  json versions = json::object();
  std::string latest, latest_any;
  for (const NpmTarball& t : tarballs_) {
    if (t.name != name) continue;
    json m = json::parse(t.manifest, nullptr, false);
    m["dist"] = {{"tarball", base_url + t.url_path}, {"integrity", t.integrity}, {"shasum", t.shasum}};
    m["_id"] = t.name + "@" + t.version;
    versions[t.version] = m;
    if (latest_any.empty() || VersionLess(latest_any, t.version)) latest_any = t.version;
    if (!IsPrerelease(t.version) && (latest.empty() || VersionLess(latest, t.version))) latest = t.version;
  }
  if (auto it = unavailable_.find(name); it != unavailable_.end()) {
    for (const std::string& v : it->second) {
      versions[v] = {{"name", name},
                     {"version", v},
                     {"_id", name + "@" + v},
                     {"os", {"cloister-unavailable"}},
                     {"dist", {{"tarball", base_url + "/-/unavailable/" + UnscopedName(name) + "-" + v + ".tgz"}}}};
      if (latest_any.empty()) latest_any = v;
    }
  }
  if (versions.empty()) return "";
  if (latest.empty()) latest = latest_any;
  json doc = {{"_id", name}, {"name", name}, {"dist-tags", {{"latest", latest}}}, {"versions", versions}};
  return doc.dump();
}

Handler NpmRegistryFake::handler(RegistryBehaviour b) const {
  auto answers = std::make_shared<std::atomic<uint64_t>>(0);
  return [this, b, answers](const SeenRequest& r, ResponseWriter& w) {
    uint64_t nth = ++*answers;
    if (b.jitter_ms > 0) {
      thread_local std::mt19937 rng(static_cast<uint32_t>(nth * 2654435761u));
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % (b.jitter_ms + 1)));
    }
    std::map<std::string, std::string> extra;
    if (b.close_every > 0 && nth % static_cast<uint64_t>(b.close_every) == 0) {
      extra["Connection"] = "close";
    }
    std::string host = r.Header("host");
    std::string base = (r.sni.empty() ? "http://" : "https://") + host;
    std::string path = r.target.substr(0, r.target.find('?'));
    for (const NpmTarball& t : tarballs_) {
      if (path != t.url_path) continue;
      std::ifstream in(t.path, std::ios::binary);
      auto head = extra;
      head["Content-Type"] = "application/octet-stream";
      w.StartChunked(200, head);
      if (b.first_byte_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(b.first_byte_ms));
      std::vector<char> buf(1 << 20);
      while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        size_t n = static_cast<size_t>(in.gcount());
        if (n == 0 || !w.Chunk(std::string(buf.data(), n))) break;
      }
      w.End();
      return;
    }
    // "/@scope%2fname" or "/@scope/name" or "/name".
    std::string name = path.size() > 1 ? path.substr(1) : "";
    for (const char* enc : {"%2f", "%2F"}) {
      for (size_t p; (p = name.find(enc)) != std::string::npos;) name.replace(p, 3, "/");
    }
    std::string doc = r.method == "GET" && !name.empty() ? Packument(name, base) : "";
    auto head = extra;
    head["Content-Type"] = "application/json";
    if (doc.empty()) {
      w.Send(404, head, "{\"error\":\"Not found\"}");
      return;
    }
    if (b.gzip_packuments && r.Header("accept-encoding").find("gzip") != std::string::npos) {
      head["Content-Encoding"] = "gzip";
      w.Send(200, head, Gzip(doc));
      return;
    }
    w.Send(200, head, doc);
  };
}

}  // namespace cloister::proxy::testing
