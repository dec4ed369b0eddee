#pragma once
// The chat page served at `/`: one HTML file with its script and style inline (no build step, no CDN). It
// talks to /v1/chat/completions (streamed), shows reasoning apart from the answer, and polls /props for the
// stats panel (tokens/s, I/O wait, the expert cache's hit rate per layer as a bar chart).
#include <string_view>

namespace df::server {

std::string_view chat_page_html();

}  // namespace df::server
