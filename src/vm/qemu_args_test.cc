#include "vm/qemu_args.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace cloister::vm {
namespace {

VmSpec Spec() {
  VmSpec s;
  s.name = "ws1";
  s.kernel = "/img/vmlinuz";
  s.initrd = "/img/initrd.img";
  s.system_disk = {"/ws/disk.qcow2", "qcow2", std::nullopt};
  s.home_disk = {"/ws/home.img", "raw", std::nullopt};
  s.meta_disk = "/ws/run/meta.img";
  s.mac = "52:54:00:12:34:56";
  s.channel_socket = "/ws/run/channel.sock";
  s.qmp_socket = "/ws/run/qmp.sock";
  s.console_log = "/ws/console.log";
  return s;
}

// Value following `flag` for each occurrence.
std::vector<std::string> Values(const std::vector<std::string>& argv, const std::string& flag) {
  std::vector<std::string> out;
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == flag) out.push_back(argv[i + 1]);
  }
  return out;
}

bool Has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(QemuArgsTest, DisksInContractOrderWithDiscardOnHomeAndReadOnlyMeta) {
  auto argv = BuildQemuArgv(Spec());
  ASSERT_TRUE(argv.ok()) << argv.error().ToString();
  auto devices = Values(*argv, "-device");
  std::vector<std::string> blk;
  for (auto& d : devices) {
    if (d.rfind("virtio-blk-pci", 0) == 0) blk.push_back(d);
  }
  ASSERT_EQ(blk.size(), 3u);
  EXPECT_NE(blk[0].find("drive=system"), std::string::npos);
  EXPECT_NE(blk[1].find("drive=home"), std::string::npos);
  EXPECT_NE(blk[2].find("drive=meta"), std::string::npos);
  auto blockdevs = Values(*argv, "-blockdev");
  EXPECT_TRUE(Has(blockdevs, "driver=raw,node-name=home,file=home-file,discard=unmap,detect-zeroes=unmap"));
  EXPECT_TRUE(Has(blockdevs, "driver=qcow2,node-name=system,file=system-file,discard=unmap,detect-zeroes=unmap"));
  EXPECT_TRUE(Has(blockdevs, "driver=raw,node-name=meta,file=meta-file,read-only=on"));
  EXPECT_TRUE(Has(blockdevs, "driver=file,node-name=meta-file,filename=/ws/run/meta.img,read-only=on"));
}

TEST(QemuArgsTest, KernelBootAndCmdline) {
  auto argv = BuildQemuArgv(Spec());
  ASSERT_TRUE(argv.ok());
  EXPECT_EQ(Values(*argv, "-kernel"), std::vector<std::string>{"/img/vmlinuz"});
  EXPECT_EQ(Values(*argv, "-initrd"), std::vector<std::string>{"/img/initrd.img"});
  auto append = Values(*argv, "-append");
  ASSERT_EQ(append.size(), 1u);
  EXPECT_EQ(append[0].find("root=/dev/vda rw console=ttyS0"), 0u);
  EXPECT_EQ((*argv)[0], "qemu-system-x86_64");
}

TEST(QemuArgsTest, NetworkIsRestrictedWithoutForwards) {
  auto argv = BuildQemuArgv(Spec());
  ASSERT_TRUE(argv.ok());
  auto netdevs = Values(*argv, "-netdev");
  ASSERT_EQ(netdevs.size(), 1u);
  EXPECT_EQ(netdevs[0], "user,id=net0,restrict=on");
  EXPECT_TRUE(Has(Values(*argv, "-device"), "virtio-net-pci,netdev=net0,mac=52:54:00:12:34:56"));
  for (const auto& a : *argv) {
    EXPECT_EQ(a.find("hostfwd"), std::string::npos);
    EXPECT_EQ(a.find("guestfwd"), std::string::npos);
  }
}

TEST(QemuArgsTest, HardeningFlags) {
  auto argv = BuildQemuArgv(Spec());
  ASSERT_TRUE(argv.ok());
  EXPECT_TRUE(Has(*argv, "-nodefaults"));
  EXPECT_EQ(Values(*argv, "-sandbox"),
            std::vector<std::string>{"on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"});
  EXPECT_EQ(Values(*argv, "-display"), std::vector<std::string>{"none"});
  EXPECT_EQ(Values(*argv, "-vga"), std::vector<std::string>{"none"});
  VmSpec s = Spec();
  s.sandbox = false;
  EXPECT_FALSE(Has(*BuildQemuArgv(s), "-sandbox"));
}

TEST(QemuArgsTest, ChannelQmpConsoleSockets) {
  auto argv = BuildQemuArgv(Spec());
  ASSERT_TRUE(argv.ok());
  auto chardevs = Values(*argv, "-chardev");
  EXPECT_TRUE(Has(chardevs, "socket,id=channel,path=/ws/run/channel.sock,server=on,wait=off"));
  EXPECT_TRUE(Has(chardevs, "socket,id=qmp,path=/ws/run/qmp.sock,server=on,wait=off"));
  EXPECT_TRUE(Has(chardevs, "file,id=console,path=/ws/console.log,append=on"));
  EXPECT_TRUE(Has(Values(*argv, "-device"),
                  "virtserialport,bus=vser0.0,chardev=channel,name=org.cloister.channel.0"));
}

// An unprivileged QEMU opens nothing by path: inherited fds in fd sets, passed listening sockets,
// and the backing chain spelled out so no qcow2 header names a file QEMU would open.
TEST(QemuArgsTest, PassedFdsSocketsAndExplicitBackingChain) {
  VmSpec s = Spec();
  s.fd_sets = {{7, 1}, {8, 1}, {9, 2}};
  s.qmp_listen_fd = 11;
  s.channel_listen_fd = 12;
  s.system_disk = {"/dev/fdset/1", "qcow2",
                   std::vector<DiskSpec>{{"/dev/fdset/3", "qcow2", std::nullopt},
                                         {"/dev/fdset/4", "raw", std::nullopt}}};
  s.home_disk = {"/dev/fdset/2", "qcow2", std::vector<DiskSpec>{}};
  auto argv = BuildQemuArgv(s);
  ASSERT_TRUE(argv.ok()) << argv.error().ToString();
  EXPECT_EQ(Values(*argv, "-add-fd"),
            (std::vector<std::string>{"fd=7,set=1", "fd=8,set=1", "fd=9,set=2"}));
  auto chardevs = Values(*argv, "-chardev");
  EXPECT_TRUE(Has(chardevs, "socket,id=qmp,fd=11,server=on,wait=off"));
  EXPECT_TRUE(Has(chardevs, "socket,id=channel,fd=12,server=on,wait=off"));
  auto blockdevs = Values(*argv, "-blockdev");
  EXPECT_TRUE(Has(blockdevs, "driver=raw,node-name=system-l1,file=system-l1-file,read-only=on"));
  EXPECT_TRUE(Has(blockdevs, "driver=file,node-name=system-l1-file,filename=/dev/fdset/4,read-only=on"));
  EXPECT_TRUE(Has(blockdevs,
                  "driver=qcow2,node-name=system-l0,file=system-l0-file,read-only=on,backing=system-l1"));
  EXPECT_TRUE(Has(blockdevs, "driver=qcow2,node-name=system,file=system-file,backing=system-l0,"
                             "discard=unmap,detect-zeroes=unmap"));
  // Lower layers come before the nodes that reference them.
  auto pos = [&](const std::string& v) { return std::find(argv->begin(), argv->end(), v) - argv->begin(); };
  EXPECT_LT(pos("driver=raw,node-name=system-l1,file=system-l1-file,read-only=on"),
            pos("driver=qcow2,node-name=system-l0,file=system-l0-file,read-only=on,backing=system-l1"));
  // An empty known chain: no backing option at all (the header names none).
  EXPECT_TRUE(Has(blockdevs, "driver=qcow2,node-name=home,file=home-file,discard=unmap,detect-zeroes=unmap"));
  for (const auto& a : *argv) {
    EXPECT_EQ(a.find(".sock"), std::string::npos) << a;  // QEMU creates no socket file
  }
  s.system_disk.backing->push_back({"/dev/fdset/5", "qcow2", std::nullopt});  // under a raw layer
  EXPECT_FALSE(BuildQemuArgv(s).ok());
}

TEST(QemuArgsTest, AccelSelectsMachine) {
  VmSpec s = Spec();
  s.accel = Accel::kKvm;
  // SECURITY: no KSM merging of guest RAM across workspaces (mem-merge=off) on either accel.
  EXPECT_EQ(Values(*BuildQemuArgv(s), "-machine"),
            std::vector<std::string>{"q35,accel=kvm,mem-merge=off"});
  EXPECT_EQ(Values(*BuildQemuArgv(s), "-cpu"), std::vector<std::string>{"host"});
  EXPECT_TRUE(Values(*BuildQemuArgv(s), "-accel").empty());
  s.accel = Accel::kTcg;
  EXPECT_EQ(Values(*BuildQemuArgv(s), "-machine"), std::vector<std::string>{"q35,mem-merge=off"});
  // TCG's translation cache is capped (QEMU's default is 1 GiB, never given back).
  EXPECT_EQ(Values(*BuildQemuArgv(s), "-accel"), std::vector<std::string>{"tcg,tb-size=256"});
  s.tcg_tb_size_mib = 0;
  EXPECT_EQ(Values(*BuildQemuArgv(s), "-accel"), std::vector<std::string>{"tcg"});
  for (int bad : {-1, 4097}) {
    s.tcg_tb_size_mib = bad;
    EXPECT_FALSE(BuildQemuArgv(s).ok()) << bad;
  }
  s.tcg_tb_size_mib = kTcgTbSizeMib;
  // TCG: everything it emulates but the fast-string hints (rep movsb runs a byte per iteration).
  EXPECT_EQ(Values(*BuildQemuArgv(s), "-cpu"), std::vector<std::string>{"max,erms=off,fsrm=off"});
  s.tcg_cpu = "max";
  EXPECT_EQ(Values(*BuildQemuArgv(s), "-cpu"), std::vector<std::string>{"max"});
  for (const char* bad : {"", "max,erms=off\n", "max -device foo", "max;x",
                          "max,file=/etc/passwd:x"}) {
    s.tcg_cpu = bad;
    EXPECT_FALSE(BuildQemuArgv(s).ok()) << bad;
  }
}

TEST(QemuArgsTest, PausedStartAndAHotplugRootPortOnlyWhenAsked) {
  VmSpec s = Spec();
  auto plain = BuildQemuArgv(s);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(Has(*plain, "-S"));
  for (const auto& a : *plain) EXPECT_EQ(a.find("pcie-root-port"), std::string::npos) << a;
  s.start_paused = true;
  s.hotplug_root_port = "rp-profile";
  auto paused = BuildQemuArgv(s);
  ASSERT_TRUE(paused.ok()) << paused.error().ToString();
  EXPECT_TRUE(Has(*paused, "-S"));
  EXPECT_TRUE(Has(*paused, "pcie-root-port,id=rp-profile,chassis=1"));
  for (const char* bad : {"rp,profile", "RP", "rp profile", "a-root-port-id-longer-than-32-chars"}) {
    s.hotplug_root_port = bad;
    EXPECT_FALSE(BuildQemuArgv(s).ok()) << bad;
  }
}

TEST(QemuArgsTest, BalloonWithFreePageReportingGivesFreedGuestPagesBack) {
  VmSpec s = Spec();
  for (Accel accel : {Accel::kTcg, Accel::kKvm}) {
    s.accel = accel;
    auto argv = BuildQemuArgv(s);
    ASSERT_TRUE(argv.ok());
    EXPECT_TRUE(Has(Values(*argv, "-device"),
                    "virtio-balloon-pci,id=balloon0,free-page-reporting=on"));
  }
  s.free_page_reporting = false;  // the benches' "reporting off" side
  for (const std::string& d : Values(*BuildQemuArgv(s), "-device")) {
    EXPECT_EQ(d.find("balloon"), std::string::npos) << d;
  }
}

TEST(QemuArgsTest, DiskIoChoicesApplyToSystemAndHomeOnly) {
  VmSpec s = Spec();
  auto plain = BuildQemuArgv(s);
  ASSERT_TRUE(plain.ok());
  for (const std::string& b : Values(*plain, "-blockdev")) {
    EXPECT_EQ(b.find("aio="), std::string::npos) << b;
    EXPECT_EQ(b.find("cache.direct"), std::string::npos) << b;
  }
  EXPECT_TRUE(Values(*plain, "-object").size() == 1u);  // the rng only
  s.disk_aio = "native";
  s.disk_cache_direct = true;
  s.disk_iothread = true;
  auto argv = BuildQemuArgv(s);
  ASSERT_TRUE(argv.ok()) << argv.error().ToString();
  auto blockdevs = Values(*argv, "-blockdev");
  EXPECT_TRUE(Has(blockdevs, "driver=file,node-name=system-file,filename=/ws/disk.qcow2,aio=native,"
                             "cache.direct=on,discard=unmap"));
  EXPECT_TRUE(Has(blockdevs, "driver=file,node-name=home-file,filename=/ws/home.img,aio=native,"
                             "cache.direct=on,discard=unmap"));
  EXPECT_TRUE(Has(blockdevs, "driver=file,node-name=meta-file,filename=/ws/run/meta.img,read-only=on"));
  EXPECT_TRUE(Has(Values(*argv, "-object"), "iothread,id=io-system"));
  EXPECT_TRUE(Has(Values(*argv, "-device"), "virtio-blk-pci,drive=home,id=home-blk,iothread=io-home"));
  s.disk_cache_direct = false;  // native without O_DIRECT: refused
  EXPECT_FALSE(BuildQemuArgv(s).ok());
  s.disk_aio = "posix";
  EXPECT_FALSE(BuildQemuArgv(s).ok());
}

TEST(QemuArgsTest, CommasInPathsAreEscaped) {
  VmSpec s = Spec();
  s.system_disk.path = "/ws/a,b/disk.qcow2";
  s.shares.push_back({"/src/x,y", "share0", true});
  auto argv = BuildQemuArgv(s);
  ASSERT_TRUE(argv.ok());
  EXPECT_TRUE(Has(Values(*argv, "-blockdev"),
                  "driver=file,node-name=system-file,filename=/ws/a,,b/disk.qcow2,discard=unmap"));
  EXPECT_TRUE(Has(Values(*argv, "-fsdev"),
                  "local,id=fs0,path=/src/x,,y,security_model=none,readonly=on"));
  EXPECT_TRUE(Has(Values(*argv, "-device"), "virtio-9p-pci,fsdev=fs0,mount_tag=share0"));
}

TEST(QemuArgsTest, IncomingDeferForResume) {
  VmSpec s = Spec();
  EXPECT_FALSE(Has(*BuildQemuArgv(s), "-incoming"));
  s.incoming_defer = true;
  EXPECT_EQ(Values(*BuildQemuArgv(s), "-incoming"), std::vector<std::string>{"defer"});
}

TEST(QemuArgsTest, RejectsBadInput) {
  VmSpec s = Spec();
  s.mac = "53:54:00:12:34:56";  // multicast
  EXPECT_FALSE(BuildQemuArgv(s).ok());
  s = Spec();
  s.mac = "52:54:00:12:34";
  EXPECT_FALSE(BuildQemuArgv(s).ok());
  s = Spec();
  s.kernel.clear();
  EXPECT_FALSE(BuildQemuArgv(s).ok());
  s = Spec();
  s.shares.push_back({"/x", "bad tag", false});
  EXPECT_FALSE(BuildQemuArgv(s).ok());
  s = Spec();
  s.system_disk.format = "vmdk";
  EXPECT_FALSE(BuildQemuArgv(s).ok());
  s = Spec();
  s.extra_cmdline = std::string("a\nb");
  EXPECT_FALSE(BuildQemuArgv(s).ok());
}

}  // namespace
}  // namespace cloister::vm
