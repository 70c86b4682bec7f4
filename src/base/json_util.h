// Integers read from JSON that this process did not write itself: trace lines, replies of a
// remote cloister, files under the store, the guest's reports.
//
// SECURITY: nlohmann's `value<T>()`/`get<T>()` convert with a static_cast, so a float such as 1e21
// read into an int64_t is undefined behaviour (a fuzz target found it in the trace parser), and a
// string where a number belongs throws. These return the fallback (or nullopt) instead: only an
// integer that fits T is ever taken.
#pragma once

#include <cstdint>
#include <string>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

namespace cloister {

// `v` as a T when it is a JSON integer within T's range, else nullopt.
template <typename T>
std::optional<T> JsonIntOf(const nlohmann::json& v) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "JsonIntOf reads integers");
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) return std::nullopt;
    return static_cast<T>(u);
  }
  if (v.is_number_integer()) {
    int64_t s = v.get<int64_t>();
    if (!std::in_range<T>(s)) return std::nullopt;
    return static_cast<T>(s);
  }
  return std::nullopt;
}

// `doc[key]` as a T, or `fallback` when `doc` is not an object, the key is absent, or its value
// is not an integer that fits T.
template <typename T>
T JsonInt(const nlohmann::json& doc, const char* key, T fallback) {
  if (!doc.is_object()) return fallback;
  auto it = doc.find(key);
  if (it == doc.end()) return fallback;
  return JsonIntOf<T>(*it).value_or(fallback);
}

// `doc[key]` when `doc` is an object and that value is a string, else "".
inline std::string JsonString(const nlohmann::json& doc, const char* key) {
  if (!doc.is_object()) return std::string();
  auto it = doc.find(key);
  return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace cloister
