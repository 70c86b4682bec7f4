#include "audit/device.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace cloister::audit {
namespace {

constexpr size_t kAlign = 4096;
constexpr size_t kBounce = 1 << 20;  // 1 MiB aligned bounce buffer for O_DIRECT

Status CheckRange(uint64_t offset, size_t len, uint64_t size) {
  if (offset > size || len > size - offset) {
    return Error(ErrorCode::kInvalidArgument,
                 "access at " + std::to_string(offset) + "+" + std::to_string(len) +
                     " is past the end of the device (" + std::to_string(size) + " bytes)");
  }
  return OkStatus();
}

class FileDevice : public Device {
 public:
  FileDevice(int fd, uint64_t size, bool direct) : fd_(fd), size_(size), direct_(direct) {
    void* p = nullptr;
    if (posix_memalign(&p, kAlign, kBounce) == 0) bounce_ = static_cast<uint8_t*>(p);
  }
  ~FileDevice() override {
    if (fd_ >= 0) close(fd_);
    std::free(bounce_);
  }

  uint64_t size() const override { return size_; }

  Status ReadAt(uint64_t offset, uint8_t* buf, size_t len) override {
    RETURN_IF_ERROR(CheckRange(offset, len, size_));
    if (bounce_ == nullptr) return Error(ErrorCode::kInternal, "out of memory for I/O buffer");
    // Every read goes through the aligned bounce buffer in aligned chunks, so O_DIRECT's rules
    // hold for any caller offset and length.
    while (len > 0) {
      uint64_t start = offset - offset % kAlign;
      uint64_t end = offset + len;
      uint64_t aligned_end = (end + kAlign - 1) / kAlign * kAlign;
      if (aligned_end > size_) aligned_end = size_;  // device sizes are multiples of 512
      size_t chunk = static_cast<size_t>(std::min<uint64_t>(aligned_end - start, kBounce));
      RETURN_IF_ERROR(PreadFull(start, chunk));
      size_t skip = static_cast<size_t>(offset - start);
      size_t take = std::min(len, chunk - skip);
      std::memcpy(buf, bounce_ + skip, take);
      buf += take;
      offset += take;
      len -= take;
    }
    return OkStatus();
  }

  Status WriteAt(uint64_t offset, const uint8_t* buf, size_t len) override {
    RETURN_IF_ERROR(CheckRange(offset, len, size_));
    if (offset % kAlign != 0 || len % kAlign != 0) {
      return Error(ErrorCode::kInvalidArgument, "unaligned device write");
    }
    if (bounce_ == nullptr) return Error(ErrorCode::kInternal, "out of memory for I/O buffer");
    while (len > 0) {
      size_t chunk = std::min(len, kBounce);
      std::memcpy(bounce_, buf, chunk);
      size_t done = 0;
      while (done < chunk) {
        ssize_t n = pwrite(fd_, bounce_ + done, chunk - done, static_cast<off_t>(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return ErrnoError("write at " + std::to_string(offset + done), errno);
        if (n == 0) return Error(ErrorCode::kIo, "short write at " + std::to_string(offset + done));
        done += static_cast<size_t>(n);
      }
      buf += chunk;
      offset += chunk;
      len -= chunk;
    }
    return OkStatus();
  }

  Status Sync() override {
    if (fdatasync(fd_) != 0) return ErrnoError("fdatasync", errno);
    return OkStatus();
  }

  Status Discard(uint64_t offset, uint64_t len) override {
    RETURN_IF_ERROR(CheckRange(offset, len, size_));
    if (offset % kAlign != 0 || len % kAlign != 0) {
      return Error(ErrorCode::kInvalidArgument, "unaligned device discard");
    }
    int rc;
    if (direct_) {  // a block device (opened O_DIRECT)
      uint64_t range[2] = {offset, len};
      rc = ioctl(fd_, BLKDISCARD, &range);
    } else {
      rc = fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                     static_cast<off_t>(len));
    }
    if (rc != 0) return ErrnoError("discard at " + std::to_string(offset), errno);
    return OkStatus();
  }

 private:
  Status PreadFull(uint64_t offset, size_t len) {
    size_t done = 0;
    while (done < len) {
      ssize_t n = pread(fd_, bounce_ + done, len - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoError("read at " + std::to_string(offset + done), errno);
      if (n == 0) return Error(ErrorCode::kIo, "short read at " + std::to_string(offset + done));
      done += static_cast<size_t>(n);
    }
    return OkStatus();
  }

  int fd_;
  uint64_t size_;
  bool direct_;
  uint8_t* bounce_ = nullptr;
};

class MemDevice : public Device {
 public:
  explicit MemDevice(std::string bytes) : bytes_(std::move(bytes)) {}
  uint64_t size() const override { return bytes_.size(); }
  Status ReadAt(uint64_t offset, uint8_t* buf, size_t len) override {
    RETURN_IF_ERROR(CheckRange(offset, len, bytes_.size()));
    if (len > 0) std::memcpy(buf, bytes_.data() + offset, len);
    return OkStatus();
  }
  Status WriteAt(uint64_t offset, const uint8_t* buf, size_t len) override {
    RETURN_IF_ERROR(CheckRange(offset, len, bytes_.size()));
    if (offset % kAlign != 0 || len % kAlign != 0) {
      return Error(ErrorCode::kInvalidArgument, "unaligned device write");
    }
    if (len > 0) std::memcpy(bytes_.data() + offset, buf, len);
    return OkStatus();
  }
  Status Sync() override { return OkStatus(); }
  // A device that honours discard and reads the range back as zeros.
  Status Discard(uint64_t offset, uint64_t len) override {
    RETURN_IF_ERROR(CheckRange(offset, len, bytes_.size()));
    if (offset % kAlign != 0 || len % kAlign != 0) {
      return Error(ErrorCode::kInvalidArgument, "unaligned device discard");
    }
    std::memset(bytes_.data() + offset, 0, len);
    return OkStatus();
  }

 private:
  std::string bytes_;
};

}  // namespace

bool IsBlockDevice(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISBLK(st.st_mode);
}

Result<std::unique_ptr<Device>> OpenDevice(const std::string& path, const OpenOptions& options) {
  bool block = IsBlockDevice(path);
  int flags = (options.writable ? O_RDWR : O_RDONLY) | O_CLOEXEC;
  if (block) flags |= O_DIRECT;
  if (block && options.exclusive) flags |= O_EXCL;
  int fd = open(path.c_str(), flags);
  if (fd < 0) {
    int err = errno;
    if (err == EBUSY) {
      return Error(ErrorCode::kBusy, path + " is in use (mounted)");
    }
    return ErrnoError("open " + path, err);
  }
  uint64_t size = 0;
  if (block) {
    if (ioctl(fd, BLKGETSIZE64, &size) != 0) {
      int err = errno;
      close(fd);
      return ErrnoError("BLKGETSIZE64 " + path, err);
    }
  } else {
    struct stat st;
    if (fstat(fd, &st) != 0) {
      int err = errno;
      close(fd);
      return ErrnoError("stat " + path, err);
    }
    if (!S_ISREG(st.st_mode)) {
      close(fd);
      return Error(ErrorCode::kInvalidArgument, path + " is neither a block device nor a file");
    }
    size = static_cast<uint64_t>(st.st_size);
  }
  return std::unique_ptr<Device>(new FileDevice(fd, size, block));
}

std::unique_ptr<Device> MemoryDevice(std::string bytes) {
  return std::make_unique<MemDevice>(std::move(bytes));
}

}  // namespace cloister::audit
