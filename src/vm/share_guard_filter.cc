// The share guard's seccomp program (vm/share_guard.h), x86-64 only.
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <cerrno>
#include <map>
#include <utility>

#include "vm/share_guard.h"

#ifndef __NR_fchmodat2
#define __NR_fchmodat2 452
#endif

namespace cloister::vm {
namespace {

enum Label { kAllow, kNotify, kEperm, kEnosys, kKill, kOpenat, kOpen, kMode1, kMode2 };

// A few instructions with symbolic jump targets, resolved at the end (every jump is forward).
class Program {
 public:
  void Load(uint32_t offset) { Add(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offset)); }
  void Ret(uint32_t value) { Add(BPF_STMT(BPF_RET | BPF_K, value)); }
  // if (A op k) goto yes else goto no; a label of -1 falls through.
  void Jump(uint16_t op, uint32_t k, int yes, int no = -1) {
    jumps_.push_back({code_.size(), yes, no});
    Add(BPF_JUMP(BPF_JMP | op | BPF_K, k, 0, 0));
  }
  void Here(Label l) { labels_[l] = code_.size(); }
  // Empty if a jump is not forward or too far (a bug here; the jail then refuses to start).
  std::vector<sock_filter> Finish() {
    for (const auto& j : jumps_) {
      for (auto [label, field] : {std::pair{j.yes, &sock_filter::jt}, std::pair{j.no, &sock_filter::jf}}) {
        if (label < 0) continue;
        auto to = labels_.find(label);
        if (to == labels_.end() || to->second <= j.at || to->second - j.at - 1 > 255) return {};
        code_[j.at].*field = static_cast<uint8_t>(to->second - j.at - 1);
      }
    }
    return code_;
  }

 private:
  struct Pending {
    size_t at;
    int yes, no;
  };
  void Add(sock_filter f) { code_.push_back(f); }
  std::vector<sock_filter> code_;
  std::vector<Pending> jumps_;
  std::map<int, size_t> labels_;
};

constexpr uint32_t ArgLow(int i) { return offsetof(seccomp_data, args) + 8 * i; }

}  // namespace

std::vector<sock_filter> ShareGuardFilter() {
  Program p;
  p.Load(offsetof(seccomp_data, arch));
  p.Jump(BPF_JEQ, AUDIT_ARCH_X86_64, -1, kKill);
  p.Load(offsetof(seccomp_data, nr));
  p.Jump(BPF_JGE, 0x40000000u, kEnosys);  // x32: the same calls under other numbers
  for (int nr : {__NR_mkdir, __NR_mkdirat, __NR_mknod, __NR_mknodat, __NR_symlink, __NR_symlinkat,
                 __NR_link, __NR_linkat, __NR_rename, __NR_renameat, __NR_renameat2, __NR_creat}) {
    p.Jump(BPF_JEQ, static_cast<uint32_t>(nr), kNotify);
  }
  for (int nr : {__NR_openat2, __NR_io_uring_setup, __NR_io_uring_enter, __NR_io_uring_register}) {
    p.Jump(BPF_JEQ, static_cast<uint32_t>(nr), kEnosys);
  }
  p.Jump(BPF_JEQ, __NR_openat, kOpenat);
  p.Jump(BPF_JEQ, __NR_open, kOpen);
  p.Jump(BPF_JEQ, __NR_chmod, kMode1);
  p.Jump(BPF_JEQ, __NR_fchmod, kMode1);
  p.Jump(BPF_JEQ, __NR_fchmodat, kMode2);
  p.Jump(BPF_JEQ, __NR_fchmodat2, kMode2);
  p.Ret(SECCOMP_RET_ALLOW);
  p.Here(kOpenat);
  p.Load(ArgLow(2));
  p.Jump(BPF_JSET, O_CREAT, kNotify, kAllow);
  p.Here(kOpen);
  p.Load(ArgLow(1));
  p.Jump(BPF_JSET, O_CREAT, kNotify, kAllow);
  p.Here(kMode1);
  p.Load(ArgLow(1));
  p.Jump(BPF_JSET, S_ISUID, kEperm);
  p.Jump(BPF_JSET, S_ISGID, kNotify, kAllow);
  p.Here(kMode2);
  p.Load(ArgLow(2));
  p.Jump(BPF_JSET, S_ISUID, kEperm);
  p.Jump(BPF_JSET, S_ISGID, kNotify, kAllow);
  p.Here(kAllow);
  p.Ret(SECCOMP_RET_ALLOW);
  p.Here(kNotify);
  p.Ret(SECCOMP_RET_USER_NOTIF);
  p.Here(kEperm);
  p.Ret(SECCOMP_RET_ERRNO | EPERM);
  p.Here(kEnosys);
  p.Ret(SECCOMP_RET_ERRNO | ENOSYS);
  p.Here(kKill);
  p.Ret(SECCOMP_RET_KILL_PROCESS);
  return p.Finish();
}

}  // namespace cloister::vm
