// The page, shipped inside the binary: src/ui/assets/* are turned into a generated assets.cc at
// build time (embed_assets.cmake). Nothing is fetched at run time.
#pragma once

#include <optional>
#include <string_view>

namespace cloister::ui {

struct Asset {
  std::string_view content_type;
  std::string_view data;
};

// "index.html", "app.js", "style.css"; nullopt for anything else.
std::optional<Asset> FindAsset(std::string_view name);

}  // namespace cloister::ui
