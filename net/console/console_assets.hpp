#pragma once
//! The web console's static files (net/console/assets/), compiled into the
//! binary at build time by net/console/embed_assets.cmake: the daemon serves
//! them with no file system access and no network but its own socket.
#include <span>
#include <string_view>

namespace calserve::net {

struct console_asset {
    std::string_view name;          // file name, e.g. "console.js"
    std::string_view content_type;
    std::string_view bytes;
};

// Every embedded file, in the order CMake listed them.
std::span<const console_asset> console_assets();

}  // namespace calserve::net
