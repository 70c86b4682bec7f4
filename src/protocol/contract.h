// The host-guest contract: every name and number the host (store, image, vm, supervisor, CLI) and
// the guest agent (src/guest, static, inside the VM) must agree on, defined once. Both sides
// include this header; neither spells these values itself (docs/design.md, "Contracts between
// host and guest"). Header-only (target cloister_protocol, an INTERFACE library): it includes and
// links nothing of the tree, so the guest may depend on it (arch_test).
//
// Changing a value here changes both sides at once, but not the images already built (the boot
// hook is signed into each catalog entry) nor a guest agent of another build: the metadata disk
// carries most of these per boot (config.json), the rest are fixed by the image recipes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cloister::protocol {

// ---- Disks (q35, virtio-blk in this order; vm/qemu_args.cc) ----
inline constexpr char kRootDevice[] = "/dev/vda";  // system disk, ext4, no partition table
inline constexpr char kHomeDevice[] = "/dev/vdb";  // the workspace's home, mounted at kGuestHome
inline constexpr char kMetaDevice[] = "/dev/vdc";  // the per-boot metadata disk (read-only)
// The kernel command line every image boots with (the catalog entry's minimum, image recipes).
inline constexpr char kKernelCmdline[] = "root=/dev/vda rw console=ttyS0";

// ---- The metadata disk (vm/meta_disk.h writes it, image/boot_hook.h mounts it) ----
inline constexpr char kMetaLabel[] = "CLOISTER-META";  // ext4 label
inline constexpr char kGuestRunDir[] = "/run/cloister";  // tmpfs in the guest: per boot
inline constexpr char kMetaMountPoint[] = "/run/cloister/meta";
inline constexpr char kAgentName[] = "cloister-agent";  // the static agent, at the disk's root
inline constexpr char kMetaConfigName[] = "config.json";  // schema v1 (guest/config.h)

// ---- The guest user (image recipes create it; the agent runs sessions as it) ----
inline constexpr char kGuestUser[] = "dev";
inline constexpr uint32_t kGuestUid = 1000;
inline constexpr uint32_t kGuestGid = 1000;
inline constexpr char kGuestHome[] = "/home/dev";

// ---- The channel (one virtio-serial port, multiplexed; channel/mux.h) ----
inline constexpr char kChannelPortName[] = "org.cloister.channel.0";
// Services on the channel. Guest-opened (the host serves them): the explicit proxy, transparent
// egress (one stream per redirected TCP connection), the SSH agent. Host-opened: exec, tcp
// (args [PORT]: the agent connects to the guest's 127.0.0.1:PORT, else [::1]:PORT, and bridges
// the stream: published ports, the browser's DevTools socket), sshd (one `sshd -i` per stream).
// The channel's stream caps (channel/mux.h MuxOptions::max_streams). The guest opens at most
// kGuestChannelStreams at once (its clients' connections beyond that wait for a stream to end);
// the host accepts twice as many, so it never refuses a stream the guest counted as free while
// both sides are still exchanging the CLOSEs of others. The host's memory bound for inbound
// stream data is kHostChannelStreams x the stream window (channel/frame.h).
inline constexpr size_t kGuestChannelStreams = 128;
inline constexpr size_t kHostChannelStreams = 2 * kGuestChannelStreams;
inline constexpr char kProxyService[] = "proxy";
inline constexpr char kEgressService[] = "egress";
inline constexpr char kSshAgentService[] = "ssh-agent";
inline constexpr char kExecService[] = "exec";
inline constexpr char kTcpService[] = "tcp";
inline constexpr char kSshdService[] = "sshd";
// A refused `sshd` stream's only line, before the guest closes it (an image without sshd): the
// host's ProxyCommand prints the rest of the line instead of handing it to ssh.
inline constexpr char kSshdRefusedPrefix[] = "cloister-sshd-refused: ";

// ---- The guest ends of those services (the agent listens; guest/config.cc's forwards) ----
inline constexpr char kGuestProxyHost[] = "127.0.0.1";
inline constexpr uint16_t kGuestProxyPort = 3128;
inline constexpr char kGuestProxyUrl[] = "http://127.0.0.1:3128";
inline constexpr char kGuestProxyListen[] = "tcp:127.0.0.1:3128";  // a forward's listen spec
inline constexpr char kGuestAgentSocket[] = "/run/cloister/ssh-agent.sock";
inline constexpr char kGuestAgentListen[] = "unix:/run/cloister/ssh-agent.sock";
// Transparent egress: the agent's redirect listener (0.0.0.0) and its synthetic DNS.
inline constexpr uint16_t kTransparentPort = 3129;
inline constexpr uint16_t kTransparentDnsPort = 53;
// The kernel modules its nft ruleset needs (the rest come as their dependencies), loaded with one
// `modprobe -a` by the agent (guest/transparent.cc) and, ahead of it, in the background by the
// default image's boot hook (image/boot_hook.cc). `reject` in an ip table is nft_reject_ipv4.
inline constexpr const char* kEgressKernelModules[] = {"nf_tables", "nft_chain_nat", "nft_redir",
                                                       "nft_reject_ipv4", "nft_ct"};

// ---- IDE access over SSH (guest/sshd.h): what the host gives the guest's sshd at boot ----
// Written by the agent from the metadata disk's `files` (root, 0600 key), read by `sshd -i`.
inline constexpr char kGuestSshdDir[] = "/run/cloister/sshd";
inline constexpr char kGuestSshdHostKey[] = "/run/cloister/sshd/ssh_host_ed25519_key";
inline constexpr char kGuestSshdAuthorizedKeys[] = "/run/cloister/sshd/authorized_keys";
// ---- Published ports (supervisor/ports.h, guest/listeners.h) ----
// Guest-opened, only when config.json says "auto_ports": the agent writes one line per change of
// its listening TCP ports, "ports P1 P2 ...\n" (decimal, at most kMaxReportedPorts, sorted); the
// host forwards them from 127.0.0.1. Hostile to the host: it parses with bounds.
inline constexpr char kPortsReportService[] = "ports-report";
inline constexpr unsigned kMaxReportedPorts = 256;

// ---- The browser VM (issue #18; supervisor/browser_vm.h, guest/browser.h) ----
// Guest-opened by the workspace guest (a forward of 127.0.0.1:kBrowserCdpPort): one stream per
// CDP connection, which the host splices to the browser VM's host-opened `tcp [kBrowserCdpPort]`.
inline constexpr char kCdpService[] = "cdp";
// Chromium's DevTools port in the browser VM, and the workspace guest's listener port.
inline constexpr int kBrowserCdpPort = 9222;
// The browser VM's encrypted profile disk, when it has one (browser/profile_disk.h).
inline constexpr char kBrowserProfileDevice[] = "/dev/vdb";

}  // namespace cloister::protocol
