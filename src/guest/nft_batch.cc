#include "guest/nft_batch.h"

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter_ipv4.h>
#include <linux/netlink.h>
#include <netinet/in.h>

#include <cstring>
#include <vector>

#include "guest/netlink.h"

namespace cloister::guest {
namespace {

constexpr char kTable[] = "cloister";

// Netlink messages appended to one buffer: a message's header and its attributes, nests closed
// by patching their length (the layout libmnl writes; nf_tables wants its numbers big-endian).
class Batch {
 public:
  explicit Batch(uint32_t seq) : seq_(seq) {}

  // A message of `type` (NFNL_MSG_BATCH_* as is, else an nf_tables message) for `family`.
  void Begin(uint16_t type, uint16_t flags, uint8_t family, uint16_t res_id) {
    msg_ = buf_.size();
    nlmsghdr h{};
    h.nlmsg_type = type;
    h.nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
    h.nlmsg_seq = seq_++;
    Put(&h, sizeof h);
    if (flags & NLM_F_ACK) ++acks_;
    nfgenmsg g{};
    g.nfgen_family = family;
    g.version = NFNETLINK_V0;
    g.res_id = htons(res_id);
    Put(&g, sizeof g);
  }
  void Table(uint16_t msg_type, uint16_t flags) {
    Begin(NftType(msg_type), flags | NLM_F_ACK, NFPROTO_IPV4, 0);
    Str(NFTA_TABLE_NAME, kTable);
    End();
  }
  void End() {
    Align();
    uint32_t len = static_cast<uint32_t>(buf_.size() - msg_);
    std::memcpy(&buf_[msg_], &len, sizeof len);  // nlmsg_len is the header's first field
  }

  void Attr(uint16_t type, const void* data, size_t n) {
    Align();
    nlattr a{};
    a.nla_type = type;
    a.nla_len = static_cast<uint16_t>(NLA_HDRLEN + n);
    Put(&a, sizeof a);
    Put(data, n);
  }
  void U32(uint16_t type, uint32_t v) {
    uint32_t be = htonl(v);
    Attr(type, &be, sizeof be);
  }
  void Str(uint16_t type, const char* s) { Attr(type, s, std::strlen(s) + 1); }
  void Nest(uint16_t type) {
    Align();
    nests_.push_back(buf_.size());
    nlattr a{};
    a.nla_type = static_cast<uint16_t>(type | NLA_F_NESTED);
    Put(&a, sizeof a);
  }
  void Close() {
    size_t at = nests_.back();
    nests_.pop_back();
    uint16_t len = static_cast<uint16_t>(buf_.size() - at);
    std::memcpy(&buf_[at], &len, sizeof len);  // nla_len is the attribute's first field
  }
  // NFTA_DATA_VALUE in a nest of `type`: the bytes a cmp, bitwise or immediate carries.
  void Value(uint16_t type, const void* data, size_t n) {
    Nest(type);
    Attr(NFTA_DATA_VALUE, data, n);
    Close();
  }

  std::string Take(size_t* acks) {
    if (acks) *acks = acks_;
    return std::move(buf_);
  }

  static uint16_t NftType(uint16_t msg) { return static_cast<uint16_t>((NFNL_SUBSYS_NFTABLES << 8) | msg); }

 private:
  void Put(const void* p, size_t n) { buf_.append(static_cast<const char*>(p), n); }
  void Align() { buf_.resize(NLMSG_ALIGN(buf_.size()), '\0'); }

  std::string buf_;
  std::vector<size_t> nests_;
  size_t msg_ = 0;
  uint32_t seq_;
  size_t acks_ = 0;
};

// One rule's expressions, each `NFTA_LIST_ELEM { NFTA_EXPR_NAME, NFTA_EXPR_DATA { ... } }`.
class Rule {
 public:
  Rule(Batch& b, const char* chain) : b_(b) {
    b_.Begin(Batch::NftType(NFT_MSG_NEWRULE), NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK, NFPROTO_IPV4,
             0);
    b_.Str(NFTA_RULE_TABLE, kTable);
    b_.Str(NFTA_RULE_CHAIN, chain);
    b_.Nest(NFTA_RULE_EXPRESSIONS);
  }
  ~Rule() {
    b_.Close();
    b_.End();
  }

  // `payload load LEN @ BASE + OFFSET => reg 1`
  Rule& Payload(uint32_t base, uint32_t offset, uint32_t len) {
    Expr("payload");
    b_.U32(NFTA_PAYLOAD_DREG, NFT_REG_1);
    b_.U32(NFTA_PAYLOAD_BASE, base);
    b_.U32(NFTA_PAYLOAD_OFFSET, offset);
    b_.U32(NFTA_PAYLOAD_LEN, len);
    return Done();
  }
  Rule& Meta(uint32_t key) {
    Expr("meta");
    b_.U32(NFTA_META_DREG, NFT_REG_1);
    b_.U32(NFTA_META_KEY, key);
    return Done();
  }
  Rule& Ct(uint32_t key) {
    Expr("ct");
    b_.U32(NFTA_CT_DREG, NFT_REG_1);
    b_.U32(NFTA_CT_KEY, key);
    return Done();
  }
  // `cmp OP reg 1 DATA`
  Rule& Cmp(uint32_t op, const void* data, size_t n) {
    Expr("cmp");
    b_.U32(NFTA_CMP_SREG, NFT_REG_1);
    b_.U32(NFTA_CMP_OP, op);
    b_.Value(NFTA_CMP_DATA, data, n);
    return Done();
  }
  // `bitwise reg 1 = (reg 1 & MASK) ^ 0`, 4 bytes
  Rule& And32(uint32_t mask_host_order) {
    const uint32_t zero = 0;
    Expr("bitwise");
    b_.U32(NFTA_BITWISE_SREG, NFT_REG_1);
    b_.U32(NFTA_BITWISE_DREG, NFT_REG_1);
    b_.U32(NFTA_BITWISE_LEN, 4);
    b_.Value(NFTA_BITWISE_MASK, &mask_host_order, 4);
    b_.Value(NFTA_BITWISE_XOR, &zero, 4);
    return Done();
  }
  // `immediate reg 0 VERDICT`
  Rule& Verdict(int32_t code) {
    Expr("immediate");
    b_.U32(NFTA_IMMEDIATE_DREG, NFT_REG_VERDICT);
    b_.Nest(NFTA_IMMEDIATE_DATA);
    b_.Nest(NFTA_DATA_VERDICT);
    b_.U32(NFTA_VERDICT_CODE, static_cast<uint32_t>(code));
    b_.Close();
    b_.Close();
    return Done();
  }
  // `immediate reg 1 PORT; redir proto_min reg 1 flags 0x2` (nft's `redirect to :PORT`)
  Rule& RedirectTo(uint16_t port) {
    const uint16_t be = htons(port);
    Expr("immediate");
    b_.U32(NFTA_IMMEDIATE_DREG, NFT_REG_1);
    b_.Value(NFTA_IMMEDIATE_DATA, &be, sizeof be);
    Done();
    Expr("redir");
    b_.U32(NFTA_REDIR_REG_PROTO_MIN, NFT_REG_1);
    b_.U32(NFTA_REDIR_FLAGS, NF_NAT_RANGE_PROTO_SPECIFIED);
    return Done();
  }
  // `reject type 0 code 3` (nft's `reject` in an ip table: ICMP port unreachable)
  Rule& Reject() {
    const uint8_t code = 3;  // ICMP_PORT_UNREACH
    Expr("reject");
    b_.U32(NFTA_REJECT_TYPE, NFT_REJECT_ICMP_UNREACH);
    b_.Attr(NFTA_REJECT_ICMP_CODE, &code, sizeof code);
    return Done();
  }

  // `ip daddr 127.0.0.0/8`: the first byte of the destination (nft's own form of a /8).
  Rule& ToLoopback() {
    const uint8_t net = 127;
    return Payload(NFT_PAYLOAD_NETWORK_HEADER, 16, 1).Cmp(NFT_CMP_EQ, &net, 1);
  }
  Rule& L4Proto(uint8_t proto) { return Meta(NFT_META_L4PROTO).Cmp(NFT_CMP_EQ, &proto, 1); }
  // `th dport PORT`
  Rule& DestPort(uint16_t port) {
    const uint16_t be = htons(port);
    return Payload(NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2).Cmp(NFT_CMP_EQ, &be, 2);
  }

 private:
  void Expr(const char* name) {
    b_.Nest(NFTA_LIST_ELEM);
    b_.Str(NFTA_EXPR_NAME, name);
    b_.Nest(NFTA_EXPR_DATA);
  }
  Rule& Done() {
    b_.Close();  // NFTA_EXPR_DATA
    b_.Close();  // NFTA_LIST_ELEM
    return *this;
  }

  Batch& b_;
};

void Chain(Batch& b, const char* name, const char* type, uint32_t hook, int32_t priority) {
  b.Begin(Batch::NftType(NFT_MSG_NEWCHAIN), NLM_F_CREATE | NLM_F_ACK, NFPROTO_IPV4, 0);
  b.Str(NFTA_CHAIN_TABLE, kTable);
  b.Str(NFTA_CHAIN_NAME, name);
  b.Nest(NFTA_CHAIN_HOOK);
  b.U32(NFTA_HOOK_HOOKNUM, hook);
  b.U32(NFTA_HOOK_PRIORITY, static_cast<uint32_t>(priority));
  b.Close();
  b.U32(NFTA_CHAIN_POLICY, NF_ACCEPT);
  b.Str(NFTA_CHAIN_TYPE, type);
  b.End();
}

// The nat chain's rules (output and prerouting differ only in what they let through first).
void NatChain(Batch& b, const char* name, uint32_t hook, uint16_t port, uint16_t dns_port) {
  Chain(b, name, "nat", hook, NF_IP_PRI_NAT_DST);
  if (hook == NF_INET_LOCAL_OUT) {
    Rule(b, name).ToLoopback().Verdict(NFT_RETURN);
  } else {
    char lo[16] = "lo";  // IFNAMSIZ, zero-padded: the exact name
    Rule(b, name).Meta(NFT_META_IIFNAME).Cmp(NFT_CMP_EQ, lo, sizeof lo).Verdict(NFT_RETURN);
  }
  Rule(b, name).L4Proto(IPPROTO_TCP).DestPort(53).RedirectTo(dns_port);
  Rule(b, name).L4Proto(IPPROTO_UDP).DestPort(53).RedirectTo(dns_port);
  Rule(b, name).L4Proto(IPPROTO_TCP).RedirectTo(port);
}

}  // namespace

std::string RedirectRulesBatch(uint16_t port, uint16_t dns_port, bool with_filter, uint32_t seq,
                               size_t* acks) {
  Batch b(seq);
  b.Begin(NFNL_MSG_BATCH_BEGIN, 0, AF_UNSPEC, NFNL_SUBSYS_NFTABLES);
  b.End();
  b.Table(NFT_MSG_NEWTABLE, NLM_F_CREATE);
  b.Table(NFT_MSG_DELTABLE, 0);
  b.Table(NFT_MSG_NEWTABLE, NLM_F_CREATE);
  NatChain(b, "output", NF_INET_LOCAL_OUT, port, dns_port);
  NatChain(b, "prerouting", NF_INET_PRE_ROUTING, port, dns_port);
  if (with_filter) {
    Chain(b, "filter_output", "filter", NF_INET_LOCAL_OUT, 0);
    Rule(b, "filter_output").ToLoopback().Verdict(NF_ACCEPT);
    Rule(b, "filter_output")
        .Ct(NFT_CT_STATE)
        .And32(NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED))
        .Cmp(NFT_CMP_NEQ, "\0\0\0\0", 4)
        .Verdict(NF_ACCEPT);
    Rule(b, "filter_output").Reject();
  }
  b.Begin(NFNL_MSG_BATCH_END, 0, AF_UNSPEC, NFNL_SUBSYS_NFTABLES);
  b.End();
  return b.Take(acks);
}

Status LoadRedirectRules(uint16_t port, uint16_t dns_port, bool with_filter) {
  size_t acks = 0;
  const std::string batch = RedirectRulesBatch(port, dns_port, with_filter, /*seq=*/1, &acks);
  return NetlinkExchange(NETLINK_NETFILTER, "nfnetlink batch", batch.data(), batch.size(), acks);
}

}  // namespace cloister::guest
