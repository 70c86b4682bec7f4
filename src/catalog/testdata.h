// Catalog fixtures for tests (tests only).
#pragma once

#include <string>

#include "catalog/catalog.h"

namespace cloister::catalog::testdata {

inline ImageEntry Entry(const std::string& name, const std::string& disk_sha,
                        uint64_t disk_size = 4096) {
  ImageEntry e;
  e.name = name;
  e.version = "1+linux-6.1";
  e.arch = "amd64";
  e.kernel_cmdline = "root=/dev/vda rw console=ttyS0";
  e.artifacts = {{kRoleDisk, "disk.raw", disk_size, disk_sha},
                 {kRoleKernel, "vmlinuz", 3, std::string(64, 'b')},
                 {kRoleInitrd, "initrd.img", 3, std::string(64, 'c')}};
  e.post_install = {{"boot-hook", "cat > \"$1/usr/lib/cloister/boot-hook\" <<'EOF'\n#!/bin/sh\nEOF\n"}};
  return e;
}

inline Catalog Make(const std::string& channel, uint64_t sequence) {
  Catalog c;
  c.channel = channel;
  c.sequence = sequence;
  c.signed_at = 1704067200;
  c.images.push_back(Entry("test", std::string(64, 'a')));
  return c;
}

}  // namespace cloister::catalog::testdata
