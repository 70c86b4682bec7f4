#include "catalog/catalog.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "catalog/signing.h"
#include "catalog/testdata.h"

namespace cloister::catalog {
namespace {

using nlohmann::json;

Rejection ReasonOf(const Result<Catalog>& r) {
  EXPECT_FALSE(r.ok());
  if (r.ok()) return Rejection::kMalformed;
  auto reason = RejectionOf(r.error());
  EXPECT_TRUE(reason.has_value()) << r.error().message();
  return reason.value_or(Rejection::kBadSignature);
}

TEST(CatalogTest, SerializeParseRoundTrip) {
  Catalog c = testdata::Make("local", 7);
  c.images.push_back(testdata::Entry("debian-12", std::string(64, 'd'), 1 << 30));
  auto parsed = ParseCatalog(SerializeCatalog(c));
  ASSERT_TRUE(parsed.ok()) << parsed.error().ToString();
  EXPECT_EQ(*parsed, c);
  EXPECT_EQ(CanonicalBytes(*parsed), CanonicalBytes(c));
}

TEST(CatalogTest, CanonicalBytesCoverEveryFieldIncludingChannel) {
  Catalog base = testdata::Make("local", 1);
  std::string b = CanonicalBytes(base);
  EXPECT_EQ(b.rfind("cloister/catalog/v1/ed25519"), 8u);  // domain tag after its length
  auto differs = [&](auto mutate) {
    Catalog c = base;
    mutate(c);
    return CanonicalBytes(c) != b;
  };
  EXPECT_TRUE(differs([](Catalog& c) { c.channel = "stable"; }));
  EXPECT_TRUE(differs([](Catalog& c) { c.sequence = 2; }));
  EXPECT_TRUE(differs([](Catalog& c) { c.signed_at += 1; }));
  EXPECT_TRUE(differs([](Catalog& c) { c.images[0].version += "x"; }));
  EXPECT_TRUE(differs([](Catalog& c) { c.images[0].kernel_cmdline += " quiet"; }));
  EXPECT_TRUE(differs([](Catalog& c) { c.images[0].artifacts[0].size += 1; }));
  EXPECT_TRUE(differs([](Catalog& c) { c.images[0].artifacts[1].sha256[0] = 'e'; }));
  EXPECT_TRUE(differs([](Catalog& c) { c.images[0].post_install[0].command += "\n"; }));
  EXPECT_TRUE(differs([](Catalog& c) { c.images[0].post_install.push_back({"x", ""}); }));
}

// Free text cannot smuggle a field: moving bytes between adjacent text fields changes the
// encoding, because every field is length-prefixed.
TEST(CatalogTest, FreeTextCannotShiftFieldBoundaries) {
  Catalog a = testdata::Make("local", 1);
  a.images[0].post_install = {{"one", "echo a"}, {"two", "echo b"}};
  Catalog b = a;
  b.images[0].post_install = {{"one", "echo a\nstep.name two step.command echo b"}};
  EXPECT_NE(CanonicalBytes(a), CanonicalBytes(b));
  Catalog c = a;
  c.images[0].post_install[0].command = "echo aech";
  c.images[0].post_install[1].command = "o b";
  EXPECT_NE(CanonicalBytes(a), CanonicalBytes(c));
  // Newlines and quotes in commands survive JSON round trip unchanged.
  Catalog d = a;
  d.images[0].post_install[0].command = "printf '\"}\\n],\"channel\":\"evil\"'\n";
  auto parsed = ParseCatalog(SerializeCatalog(d));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->channel, "local");
  EXPECT_EQ(parsed->images[0].post_install[0].command, d.images[0].post_install[0].command);
}

TEST(CatalogTest, MalformedAndTruncatedDocumentsAreRejected) {
  std::string good = SerializeCatalog(testdata::Make("local", 1));
  EXPECT_EQ(ReasonOf(ParseCatalog("")), Rejection::kMalformed);
  EXPECT_EQ(ReasonOf(ParseCatalog(good.substr(0, good.size() / 2))), Rejection::kMalformed);
  EXPECT_EQ(ReasonOf(ParseCatalog("[]")), Rejection::kMalformed);
  EXPECT_EQ(ReasonOf(ParseCatalog(std::string(kMaxCatalogBytes + 1, ' '))), Rejection::kMalformed);

  auto mutated = [&](auto f) {
    json j = json::parse(good);
    f(j);
    return ParseCatalog(j.dump());
  };
  EXPECT_EQ(ReasonOf(mutated([](json& j) { j["extra"] = 1; })), Rejection::kMalformed);
  EXPECT_EQ(ReasonOf(mutated([](json& j) { j.erase("channel"); })), Rejection::kMalformed);
  EXPECT_EQ(ReasonOf(mutated([](json& j) { j["format"] = "cloister-catalog-v0"; })),
            Rejection::kMalformed);
  EXPECT_EQ(ReasonOf(mutated([](json& j) { j["sequence"] = -1; })), Rejection::kMalformed);
  EXPECT_EQ(ReasonOf(mutated([](json& j) { j["sequence"] = 0; })), Rejection::kMalformed);
  EXPECT_EQ(ReasonOf(mutated([](json& j) { j["sequence"] = "1"; })), Rejection::kMalformed);
  EXPECT_EQ(ReasonOf(mutated([](json& j) { j["channel"] = "Bad Channel"; })),
            Rejection::kMalformed);
  EXPECT_EQ(ReasonOf(mutated([](json& j) { j["images"][0]["name"] = "../etc"; })),
            Rejection::kMalformed);
  EXPECT_EQ(ReasonOf(mutated([](json& j) { j["images"][0]["artifacts"][0]["file"] = "../x"; })),
            Rejection::kMalformed);
  EXPECT_EQ(ReasonOf(mutated([](json& j) { j["images"][0]["artifacts"][0]["sha256"] = "ab"; })),
            Rejection::kMalformed);
  EXPECT_EQ(ReasonOf(mutated([](json& j) {
              j["images"][0]["artifacts"][0]["sha256"] = std::string(64, 'A');
            })),
            Rejection::kMalformed);
  EXPECT_EQ(ReasonOf(mutated([](json& j) { j["images"][0]["artifacts"].erase(2); })),
            Rejection::kMalformed);
  EXPECT_EQ(ReasonOf(mutated([](json& j) { j["images"][0]["artifacts"][1]["role"] = "disk"; })),
            Rejection::kMalformed);
  EXPECT_EQ(ReasonOf(mutated([](json& j) { j["images"][0]["version"] = "1\n2"; })),
            Rejection::kMalformed);
  EXPECT_EQ(ReasonOf(mutated([](json& j) { j["images"].push_back(j["images"][0]); })),
            Rejection::kMalformed);
  EXPECT_EQ(ReasonOf(mutated([](json& j) { j["images"][0]["post_install"][0]["x"] = ""; })),
            Rejection::kMalformed);
}

TEST(CatalogTest, SignatureFileFormat) {
  auto key = PublisherKey::Generate();
  ASSERT_TRUE(key.ok());
  auto sig = key->Sign("message");
  ASSERT_TRUE(sig.ok());
  EXPECT_TRUE(VerifyEd25519(key->public_key(), "message", *sig));
  EXPECT_FALSE(VerifyEd25519(key->public_key(), "messagf", *sig));
  std::string text = SerializeSignature({key->key_id(), *sig});
  auto parsed = ParseSignature(text);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->key_id, key->key_id());
  EXPECT_EQ(parsed->signature, *sig);
  for (std::string bad : {std::string(""), std::string("garbage"), text.substr(0, text.size() - 5),
                          "cloister-catalog-sig-v1 rsa " + key->key_id() + " 00\n",
                          text + "trailing line\n"}) {
    auto r = ParseSignature(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(RejectionOf(r.error()), Rejection::kBadSignature) << bad;
  }
}

}  // namespace
}  // namespace cloister::catalog

namespace cloister::catalog {
namespace {

TEST(CatalogProvenanceTest, RoundTripsIsSignedAndLeavesOldBytesAlone) {
  Catalog c = testdata::Make("local", 3);
  const std::string before = CanonicalBytes(c);
  c.images[0].provenance = {{"agent", "cloister-agent 1"},
                            {"manifest", "sha256:" + std::string(64, 'e')},
                            {"source", "docker://alpine:3.19"}};
  auto parsed = ParseCatalog(SerializeCatalog(c));
  ASSERT_TRUE(parsed.ok()) << parsed.error().ToString();
  EXPECT_EQ(*parsed, c);
  // The provenance is signed: changing it changes the signed bytes.
  Catalog d = c;
  d.images[0].provenance[2].second = "docker://alpine:3.20";
  EXPECT_NE(CanonicalBytes(c), CanonicalBytes(d));
  // An entry without one encodes as before the field existed (old signatures still verify).
  c.images[0].provenance.clear();
  EXPECT_EQ(CanonicalBytes(c), before);
  EXPECT_EQ(SerializeCatalog(c).find("provenance"), std::string::npos);
}

TEST(CatalogProvenanceTest, MalformedProvenanceIsRejected) {
  Catalog c = testdata::Make("local", 3);
  std::string doc = SerializeCatalog(c);
  for (const std::string& prov :
       {std::string("\"provenance\": [1],"), std::string("\"provenance\": {\"Bad Key\": \"x\"},"),
        std::string("\"provenance\": {\"source\": 3},"),
        "\"provenance\": {\"source\": \"" + std::string(600, 'x') + "\"},",
        std::string("\"provenance\": {\"source\": \"a\\u0001b\"},")}) {
    std::string bad = doc;
    bad.insert(bad.find("\"name\": \"test\""), prov);
    auto r = ParseCatalog(bad);
    ASSERT_FALSE(r.ok()) << prov;
    EXPECT_EQ(RejectionOf(r.error()), Rejection::kMalformed) << prov;
  }
}

}  // namespace
}  // namespace cloister::catalog
