// The guest's DNS (guest/dns.h): the query parser on real and malformed queries, the answers, and
// the bounded name <-> synthetic address map.
#include "guest/dns.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace cloister::guest {
namespace {

// A query as a stub resolver sends it: id, RD set, one question, optional EDNS OPT record.
std::string Query(uint16_t id, const std::string& name, uint16_t qtype, bool edns = false,
                  uint16_t qclass = 1) {
  std::string m;
  m.push_back(static_cast<char>(id >> 8));
  m.push_back(static_cast<char>(id & 0xFF));
  m += std::string("\x01\x00\x00\x01\x00\x00\x00\x00\x00", 9);
  m.push_back(edns ? 1 : 0);
  size_t start = 0;
  while (start < name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    m.push_back(static_cast<char>(dot - start));
    m += name.substr(start, dot - start);
    start = dot + 1;
  }
  m.push_back('\0');
  m.push_back(static_cast<char>(qtype >> 8));
  m.push_back(static_cast<char>(qtype & 0xFF));
  m.push_back(static_cast<char>(qclass >> 8));
  m.push_back(static_cast<char>(qclass & 0xFF));
  if (edns) m += std::string("\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00", 11);
  return m;
}

uint16_t U16(const std::string& s, size_t at) {
  return static_cast<uint16_t>((static_cast<uint8_t>(s[at]) << 8) | static_cast<uint8_t>(s[at + 1]));
}
int Rcode(const std::string& r) { return static_cast<uint8_t>(r[3]) & 0xF; }
int Answers(const std::string& r) { return U16(r, 6); }
// The address of the single A answer at the end of `r`.
uint32_t AnswerA(const std::string& r) {
  size_t at = r.size() - 4;
  return (U16(r, at) << 16) | U16(r, at + 2);
}

TEST(DnsTest, ParsesAStubResolversQueryAndLowerCasesTheName) {
  auto q = ParseDnsQuery(Query(0x1234, "API.Example.TEST", 1, /*edns=*/true));
  ASSERT_TRUE(q.ok()) << q.error().message();
  EXPECT_EQ(q->id, 0x1234);
  EXPECT_EQ(q->name, "api.example.test");
  EXPECT_EQ(q->qtype, 1);
  EXPECT_EQ(q->qclass, 1);
  EXPECT_TRUE(q->rd);
}

TEST(DnsTest, RefusesMalformedQueries) {
  std::string ok = Query(1, "a.test", 1);
  EXPECT_FALSE(ParseDnsQuery(ok.substr(0, 11)).ok());           // short header
  EXPECT_FALSE(ParseDnsQuery(ok.substr(0, ok.size() - 1)).ok());  // truncated question
  std::string two = ok;
  two[5] = 2;  // QDCOUNT 2
  EXPECT_FALSE(ParseDnsQuery(two).ok());
  std::string response = ok;
  response[2] = static_cast<char>(0x81);
  EXPECT_FALSE(ParseDnsQuery(response).ok());
  std::string pointer = ok.substr(0, 12) + std::string("\xc0\x0c\x00\x01\x00\x01", 6);
  EXPECT_FALSE(ParseDnsQuery(pointer).ok());
  std::string label_runs_out = ok.substr(0, 12) + std::string("\x3f" "abc", 4);
  EXPECT_FALSE(ParseDnsQuery(label_runs_out).ok());
  std::string dot_in_label = Query(1, "a.test", 1);
  dot_in_label[13] = '.';
  EXPECT_FALSE(ParseDnsQuery(dot_in_label).ok());
  // A name longer than 255 wire bytes.
  std::string long_name;
  for (int i = 0; i < 5; ++i) long_name += std::string(60, 'a') + ".";
  long_name += "test";
  EXPECT_FALSE(ParseDnsQuery(Query(1, long_name, 1)).ok());
  EXPECT_FALSE(ParseDnsQuery(std::string(kMaxDnsMessage + 1, '\0')).ok());
}

TEST(DnsTest, AnswersASyntheticAddressStablePerNameAndEchoesTheQuestion) {
  SyntheticMap map;
  std::string q = Query(0xbeef, "Api.Example.test", 1, true);
  std::string r = AnswerDnsQuery(q, map, "ws");
  ASSERT_GE(r.size(), 12u);
  EXPECT_EQ(U16(r, 0), 0xbeef);
  EXPECT_EQ(static_cast<uint8_t>(r[2]) & 0x80, 0x80);  // QR
  EXPECT_EQ(static_cast<uint8_t>(r[2]) & 0x01, 0x01);  // RD echoed
  EXPECT_EQ(Rcode(r), 0);
  EXPECT_EQ(U16(r, 4), 1);
  ASSERT_EQ(Answers(r), 1);
  EXPECT_EQ(U16(r, 10), 0);  // no EDNS record echoed
  // The question is echoed byte for byte (case preserved for 0x20 randomisation).
  EXPECT_EQ(r.substr(12, q.size() - 12 - 11), q.substr(12, q.size() - 12 - 11));
  uint32_t a = AnswerA(r);
  EXPECT_TRUE(IsSynthetic(a)) << Ipv4String(a);
  EXPECT_EQ(map.NameFor(a), "api.example.test");
  // Same name (any case), same address; another name, another address.
  EXPECT_EQ(AnswerA(AnswerDnsQuery(Query(2, "api.example.TEST", 1), map, "ws")), a);
  uint32_t b = AnswerA(AnswerDnsQuery(Query(3, "other.test", 1), map, "ws"));
  EXPECT_NE(a, b);
  EXPECT_TRUE(IsSynthetic(b));
  EXPECT_EQ(map.size(), 2u);
}

TEST(DnsTest, AaaaAndOtherTypesGetNoAnswersAndNamesOutsideTheContractGetNxdomain) {
  SyntheticMap map;
  for (uint16_t t : {28, 15, 16, 65, 33}) {
    std::string r = AnswerDnsQuery(Query(7, "api.example.test", t), map, "ws");
    EXPECT_EQ(Rcode(r), 0) << t;
    EXPECT_EQ(Answers(r), 0) << t;
  }
  EXPECT_EQ(map.size(), 0u);  // no address handed out for them
  EXPECT_EQ(Rcode(AnswerDnsQuery(Query(7, "_http._tcp.example.test", 33), map, "ws")), 3);
  EXPECT_EQ(Rcode(AnswerDnsQuery(Query(7, "bad_name.test", 1), map, "ws")), 3);
  EXPECT_EQ(Rcode(AnswerDnsQuery(Query(7, "a.test", 1, false, 3), map, "ws")), 5);  // CHAOS
  std::string status = Query(7, "a.test", 1);
  status[2] = static_cast<char>(0x10);  // opcode STATUS
  EXPECT_EQ(Rcode(AnswerDnsQuery(status, map, "ws")), 4);
  std::string junk = Query(9, "a.test", 1).substr(0, 14);
  std::string r = AnswerDnsQuery(junk, map, "ws");
  EXPECT_EQ(U16(r, 0), 9);
  EXPECT_EQ(Rcode(r), 1);
  // Responses and runts are dropped, not answered.
  std::string response = Query(7, "a.test", 1);
  response[2] = static_cast<char>(0x81);
  EXPECT_EQ(AnswerDnsQuery(response, map, "ws"), "");
  EXPECT_EQ(AnswerDnsQuery("abc", map, "ws"), "");
}

TEST(DnsTest, LocalhostAndTheHostnameAreLoopbackAndPtrGivesTheNameBack) {
  SyntheticMap map;
  EXPECT_EQ(AnswerA(AnswerDnsQuery(Query(1, "localhost", 1), map, "ws")), 0x7F000001u);
  EXPECT_EQ(AnswerA(AnswerDnsQuery(Query(1, "x.localhost", 1), map, "ws")), 0x7F000001u);
  EXPECT_EQ(AnswerA(AnswerDnsQuery(Query(1, "WS", 1), map, "ws")), 0x7F000001u);
  EXPECT_EQ(map.size(), 0u);
  uint32_t a = map.AddressFor("api.example.test");
  std::string rev = std::to_string(a & 0xFF) + "." + std::to_string((a >> 8) & 0xFF) + "." +
                    std::to_string((a >> 16) & 0xFF) + "." + std::to_string(a >> 24) + ".in-addr.arpa";
  std::string r = AnswerDnsQuery(Query(1, rev, 12), map, "ws");
  EXPECT_EQ(Rcode(r), 0);
  ASSERT_EQ(Answers(r), 1);
  EXPECT_NE(r.find(std::string("\x03" "api" "\x07" "example" "\x04" "test", 17)), std::string::npos);
  EXPECT_EQ(Rcode(AnswerDnsQuery(Query(1, "9.9.19.198.in-addr.arpa", 12), map, "ws")), 3);
  EXPECT_EQ(Rcode(AnswerDnsQuery(Query(1, "4.3.2.1.in-addr.arpa", 12), map, "ws")), 3);
}

TEST(DnsTest, TheMapIsBoundedAndForgetsTheOldestWithoutReusingItsAddressSoon) {
  SyntheticMap map(4);
  std::set<uint32_t> seen;
  uint32_t first = map.AddressFor("n0.test");
  seen.insert(first);
  for (int i = 1; i < 100; ++i) seen.insert(map.AddressFor("n" + std::to_string(i) + ".test"));
  EXPECT_EQ(seen.size(), 100u);  // no address reused
  EXPECT_EQ(map.size(), 4u);
  EXPECT_FALSE(map.NameFor(first).has_value());  // forgotten: a connection to it is refused
  EXPECT_EQ(map.NameFor(map.AddressFor("n99.test")), "n99.test");
  for (uint32_t a : seen) {
    EXPECT_TRUE(IsSynthetic(a));
    EXPECT_NE(a, kSyntheticNet);           // network address never handed out
    EXPECT_NE(a, kSyntheticNet | 0x1FFFF);  // nor the broadcast one
  }
}

TEST(DnsTest, ValidHostNameIsTheHeaderContract) {
  EXPECT_TRUE(ValidHostName("api.example.test"));
  EXPECT_TRUE(ValidHostName("a-b.c0"));
  EXPECT_FALSE(ValidHostName(""));
  EXPECT_FALSE(ValidHostName("A.test"));
  EXPECT_FALSE(ValidHostName("a..test"));
  EXPECT_FALSE(ValidHostName(".a"));
  EXPECT_FALSE(ValidHostName("a."));
  EXPECT_FALSE(ValidHostName("a b"));
  EXPECT_FALSE(ValidHostName(std::string(64, 'a') + ".test"));
  std::string long_name;
  while (long_name.size() < 252) long_name += "a.";
  EXPECT_TRUE(ValidHostName(long_name + "b"));        // 253
  EXPECT_FALSE(ValidHostName(long_name + "bb"));      // 254
}

}  // namespace
}  // namespace cloister::guest
