#include "vm/qemu_args.h"

#include <cctype>

namespace cloister::vm {

std::string QemuOptEscape(const std::string& value) {
  std::string out;
  for (char c : value) {
    out += c;
    if (c == ',') out += ',';
  }
  return out;
}

namespace {

bool ValidMac(const std::string& mac) {
  if (mac.size() != 17) return false;
  for (size_t i = 0; i < mac.size(); ++i) {
    if (i % 3 == 2) {
      if (mac[i] != ':') return false;
    } else if (!std::isxdigit(static_cast<unsigned char>(mac[i]))) {
      return false;
    }
  }
  // Unicast (low bit of the first octet clear).
  int first = std::stoi(mac.substr(0, 2), nullptr, 16);
  return (first & 1) == 0;
}

bool ValidTag(const std::string& tag) {
  if (tag.empty() || tag.size() > 31) return false;
  for (char c : tag) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

Status CheckPath(const std::string& what, const std::string& path) {
  if (path.empty()) return Error(ErrorCode::kInvalidArgument, "VM spec: " + what + " is missing");
  if (path.find('\0') != std::string::npos || path.find('\n') != std::string::npos) {
    return Error(ErrorCode::kInvalidArgument, "VM spec: " + what + " has a control character");
  }
  return OkStatus();
}

Status CheckFormat(const DiskSpec& disk) {
  if (disk.format != "qcow2" && disk.format != "raw") {
    return Error(ErrorCode::kInvalidArgument, "VM spec: unsupported disk format " + disk.format);
  }
  return OkStatus();
}

// I/O settings of a writable disk's top file (the backing layers keep QEMU's defaults).
struct DiskIo {
  std::string aio = "threads";
  bool cache_direct = false;
  std::string iothread;  // "" = the main loop
};

void AddDisk(std::vector<std::string>& argv, const std::string& node, const DiskSpec& disk,
             bool read_only, bool discard, const DiskIo& io = {}) {
  std::string file = "driver=file,node-name=" + node + "-file,filename=" +
                     QemuOptEscape(disk.path);
  if (io.aio != "threads") file += ",aio=" + io.aio;
  if (io.cache_direct) file += ",cache.direct=on";
  std::string fmt = "driver=" + disk.format + ",node-name=" + node + ",file=" + node + "-file";
  if (disk.backing && !disk.backing->empty()) {
    // Bottom-up, each layer read-only, named NODE-lI (l0 = the top's backing).
    const std::vector<DiskSpec>& layers = *disk.backing;
    for (size_t i = layers.size(); i-- > 0;) {
      std::string ln = node + "-l" + std::to_string(i);
      std::string lf = "driver=" + layers[i].format + ",node-name=" + ln + ",file=" + ln +
                       "-file,read-only=on";
      if (i + 1 < layers.size()) lf += ",backing=" + node + "-l" + std::to_string(i + 1);
      argv.insert(argv.end(), {"-blockdev",
                               "driver=file,node-name=" + ln + "-file,filename=" +
                                   QemuOptEscape(layers[i].path) + ",read-only=on",
                               "-blockdev", lf});
    }
    fmt += ",backing=" + node + "-l0";
  }
  if (read_only) {
    file += ",read-only=on";
    fmt += ",read-only=on";
  }
  if (discard) {
    file += ",discard=unmap";
    fmt += ",discard=unmap,detect-zeroes=unmap";
  }
  if (io.cache_direct) fmt += ",cache.direct=on";
  std::string dev = "virtio-blk-pci,drive=" + node + ",id=" + node + "-blk";
  if (!io.iothread.empty()) {
    argv.insert(argv.end(), {"-object", "iothread,id=" + io.iothread});
    dev += ",iothread=" + io.iothread;
  }
  argv.insert(argv.end(), {"-blockdev", file, "-blockdev", fmt, "-device", dev});
}

}  // namespace

std::string KernelCmdline(const VmSpec& spec) {
  std::string cmdline = std::string(protocol::kKernelCmdline) + " panic=-1";
  if (!spec.extra_cmdline.empty()) cmdline += " " + spec.extra_cmdline;
  return cmdline;
}

Result<std::vector<std::string>> BuildQemuArgv(const VmSpec& spec) {
  RETURN_IF_ERROR(CheckPath("qemu binary", spec.qemu_binary));
  RETURN_IF_ERROR(CheckPath("kernel", spec.kernel));
  RETURN_IF_ERROR(CheckPath("initrd", spec.initrd));
  RETURN_IF_ERROR(CheckPath("system disk", spec.system_disk.path));
  RETURN_IF_ERROR(CheckPath("home disk", spec.home_disk.path));
  RETURN_IF_ERROR(CheckPath("metadata disk", spec.meta_disk));
  if (spec.channel_listen_fd < 0) RETURN_IF_ERROR(CheckPath("channel socket", spec.channel_socket));
  if (spec.qmp_listen_fd < 0) RETURN_IF_ERROR(CheckPath("QMP socket", spec.qmp_socket));
  for (const DiskSpec* d : {&spec.system_disk, &spec.home_disk}) {
    if (!d->backing) continue;
    if (d->format != "qcow2" && !d->backing->empty()) {
      return Error(ErrorCode::kInvalidArgument, "VM spec: a raw disk has no backing layers");
    }
    for (size_t i = 0; i < d->backing->size(); ++i) {
      const DiskSpec& l = (*d->backing)[i];
      RETURN_IF_ERROR(CheckPath("backing layer", l.path));
      RETURN_IF_ERROR(CheckFormat(l));
      if (l.format != "qcow2" && i + 1 < d->backing->size()) {
        return Error(ErrorCode::kInvalidArgument, "VM spec: a raw layer has no backing layers");
      }
    }
  }
  RETURN_IF_ERROR(CheckPath("console log", spec.console_log));
  RETURN_IF_ERROR(CheckFormat(spec.system_disk));
  RETURN_IF_ERROR(CheckFormat(spec.home_disk));
  if (!ValidMac(spec.mac)) {
    return Error(ErrorCode::kInvalidArgument, "VM spec: bad MAC address '" + spec.mac + "'");
  }
  if (spec.cpus < 1 || spec.cpus > 64) {
    return Error(ErrorCode::kInvalidArgument, "VM spec: cpus must be 1..64");
  }
  if (spec.memory_mib < 128 || spec.memory_mib > 1024 * 1024) {
    return Error(ErrorCode::kInvalidArgument, "VM spec: memory must be at least 128 MiB");
  }
  if (spec.tcg_cpu.empty() || spec.tcg_cpu.size() > 128 ||
      spec.tcg_cpu.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                      "0123456789_.,=+-") != std::string::npos) {
    return Error(ErrorCode::kInvalidArgument, "VM spec: bad TCG CPU model '" + spec.tcg_cpu + "'",
                 "letters, digits and _.,=+- only, e.g. max,erms=off");
  }
  if (spec.tcg_tb_size_mib < 0 || spec.tcg_tb_size_mib > 4096) {
    return Error(ErrorCode::kInvalidArgument, "VM spec: TCG tb-size must be 0..4096 MiB",
                 "CLOISTER_TCG_TB_SIZE=256 (MiB), or 0 for QEMU's default");
  }
  if (spec.extra_cmdline.find_first_of("\n\0", 0, 2) != std::string::npos) {
    return Error(ErrorCode::kInvalidArgument, "VM spec: kernel command line has a control character");
  }

  std::vector<std::string> argv = {spec.qemu_binary};
  for (const FdSetEntry& e : spec.fd_sets) {
    if (e.fd < 0 || e.set < 0) return Error(ErrorCode::kInvalidArgument, "VM spec: bad fd set entry");
    argv.insert(argv.end(), {"-add-fd", "fd=" + std::to_string(e.fd) + ",set=" + std::to_string(e.set)});
  }
  argv.insert(argv.end(), {"-name", QemuOptEscape("cloister-" + spec.name) + ",debug-threads=on",
                           "-nodefaults", "-no-user-config", "-vga", "none",
                           "-display", "none", "-no-reboot"});
  // SECURITY: mem-merge=off: guest RAM is never marked MADV_MERGEABLE, so KSM (if the host turns
  // it on) cannot merge pages across workspaces, a cross-tenant side channel (threat-model.md).
  if (spec.accel == Accel::kKvm) {
    argv.insert(argv.end(), {"-machine", "q35,accel=kvm,mem-merge=off", "-cpu", "host"});
  } else {
    std::string accel = "tcg";
    if (spec.tcg_tb_size_mib > 0) accel += ",tb-size=" + std::to_string(spec.tcg_tb_size_mib);
    argv.insert(argv.end(), {"-machine", "q35,mem-merge=off", "-accel", accel, "-cpu", spec.tcg_cpu});
  }
  argv.insert(argv.end(), {"-smp", std::to_string(spec.cpus), "-m", std::to_string(spec.memory_mib)});
  argv.insert(argv.end(), {"-kernel", spec.kernel, "-initrd", spec.initrd, "-append",
                           KernelCmdline(spec)});
  if (spec.disk_aio != "threads" && spec.disk_aio != "io_uring" && spec.disk_aio != "native") {
    return Error(ErrorCode::kInvalidArgument, "VM spec: disk aio '" + spec.disk_aio + "'",
                 "threads, io_uring or native");
  }
  if (spec.disk_aio == "native" && !spec.disk_cache_direct) {
    return Error(ErrorCode::kInvalidArgument, "VM spec: aio=native needs cache=none (O_DIRECT)",
                 "CLOISTER_DISK_CACHE=none with CLOISTER_DISK_AIO=native");
  }
  DiskIo system_io{spec.disk_aio, spec.disk_cache_direct, spec.disk_iothread ? "io-system" : ""};
  DiskIo home_io{spec.disk_aio, spec.disk_cache_direct, spec.disk_iothread ? "io-home" : ""};
  // Disks in the contract's order: vda, vdb, vdc (virtio-blk names follow PCI order).
  AddDisk(argv, kSystemNode, spec.system_disk, /*read_only=*/false, /*discard=*/true, system_io);
  AddDisk(argv, kHomeNode, spec.home_disk, /*read_only=*/false, /*discard=*/true, home_io);
  AddDisk(argv, kMetaNode, DiskSpec{spec.meta_disk, "raw", std::nullopt}, /*read_only=*/true, /*discard=*/false);
  argv.insert(argv.end(), {"-object", "rng-random,id=rng0,filename=/dev/urandom", "-device",
                           "virtio-rng-pci,rng=rng0"});
  if (spec.free_page_reporting) {
    argv.insert(argv.end(), {"-device", std::string("virtio-balloon-pci,id=") + kBalloonId +
                                            ",free-page-reporting=on"});
  }
  // SECURITY: restrict=on isolates the guest from the host and the outside; no hostfwd/guestfwd.
  argv.insert(argv.end(), {"-netdev", "user,id=net0,restrict=on", "-device",
                           "virtio-net-pci,netdev=net0,mac=" + spec.mac});
  auto listener = [](int fd, const std::string& path) {
    return fd >= 0 ? "fd=" + std::to_string(fd) : "path=" + QemuOptEscape(path);
  };
  argv.insert(argv.end(),
              {"-device", "virtio-serial-pci,id=vser0", "-chardev",
               "socket,id=channel," + listener(spec.channel_listen_fd, spec.channel_socket) +
                   ",server=on,wait=off",
               "-device",
               std::string("virtserialport,bus=vser0.0,chardev=channel,name=") + kChannelPortName});
  argv.insert(argv.end(), {"-chardev",
                           "socket,id=qmp," + listener(spec.qmp_listen_fd, spec.qmp_socket) +
                               ",server=on,wait=off",
                           "-mon", "chardev=qmp,mode=control"});
  argv.insert(argv.end(), {"-chardev",
                           "file,id=console,path=" + QemuOptEscape(spec.console_log) + ",append=on",
                           "-serial", "chardev:console"});
  int i = 0;
  for (const ShareSpec& share : spec.shares) {
    RETURN_IF_ERROR(CheckPath("shared folder", share.host_path));
    if (!ValidTag(share.tag)) {
      return Error(ErrorCode::kInvalidArgument, "VM spec: bad share tag '" + share.tag + "'");
    }
    std::string id = "fs" + std::to_string(i++);
    std::string fsdev = "local,id=" + id + ",path=" + QemuOptEscape(share.host_path) +
                        ",security_model=none";
    if (share.readonly) fsdev += ",readonly=on";
    argv.insert(argv.end(), {"-fsdev", fsdev, "-device",
                             "virtio-9p-pci,fsdev=" + id + ",mount_tag=" + share.tag});
  }
  if (spec.incoming_defer) argv.insert(argv.end(), {"-incoming", "defer"});
  if (spec.start_paused) argv.push_back("-S");
  if (!spec.hotplug_root_port.empty()) {
    if (spec.hotplug_root_port.size() > 32 ||
        spec.hotplug_root_port.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") !=
            std::string::npos) {
      return Error(ErrorCode::kInvalidArgument,
                   "VM spec: bad root port id '" + spec.hotplug_root_port + "'");
    }
    argv.insert(argv.end(), {"-device", "pcie-root-port,id=" + spec.hotplug_root_port + ",chassis=1"});
  }
  if (spec.sandbox) {
    argv.insert(argv.end(), {"-sandbox",
                             "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"});
  }
  return argv;
}

}  // namespace cloister::vm
