#include "ui/peer_uid.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace cloister::ui {
namespace {

TEST(PeerUidTest, ReadsTheOwnerOfThePeersSocketFromTheTable) {
  const std::string table =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
      "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1\n"
      "   1: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000 65534        0 2 1\n"
      "   2: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 3 1\n";
  auto uid = PeerUidFromTable(table, 0x9C40, 0x1F90);
  ASSERT_TRUE(uid.ok()) << uid.error().ToString();
  EXPECT_EQ(*uid, 65534u);  // the peer's row, not the server's own accepted socket
  EXPECT_EQ(PeerUidFromTable(table, 0x9C41, 0x1F90).error().code(), ErrorCode::kNotFound);
  EXPECT_FALSE(PeerUidFromTable("", 1, 2).ok());
  EXPECT_FALSE(PeerUidFromTable("header\n 1: 0100007F:0001 0100007F:0002 01 x y z w nope\n", 1, 2).ok());
}

// The running kernel's table: a connection of this process is this process's uid.
TEST(PeerUidTest, ALoopbackConnectionOfThisProcessIsOurs) {
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(l, 1), 0);
  socklen_t len = sizeof a;
  getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  sockaddr_in me{};
  len = sizeof me;
  getsockname(c, reinterpret_cast<sockaddr*>(&me), &len);
  auto uid = LoopbackPeerUid(ntohs(me.sin_port), ntohs(a.sin_port));
  ASSERT_TRUE(uid.ok()) << uid.error().ToString();
  EXPECT_EQ(*uid, getuid());
  close(c);
  close(l);
}

}  // namespace
}  // namespace cloister::ui
