// Small string helpers shared by every module.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace cloister {

std::vector<std::string> Split(std::string_view s, char sep);
std::string Trim(std::string_view s);
std::string ToLower(std::string_view s);
bool StartsWith(std::string_view s, std::string_view prefix);
bool EndsWith(std::string_view s, std::string_view suffix);
std::string Join(const std::vector<std::string>& parts, std::string_view sep);

// Parses "64G", "512M", "1.5GiB", "4096" (bytes) into bytes; binary units (K=1024).
Result<uint64_t> ParseSize(std::string_view text);
// Formats bytes as "1.5 GiB", "512 MiB", "0 B".
std::string FormatSize(uint64_t bytes);

// Lower-case hex of bytes.
std::string HexEncode(std::string_view bytes);
Result<std::string> HexDecode(std::string_view hex);

}  // namespace cloister
