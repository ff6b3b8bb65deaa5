#pragma once
//! One chat turn as the chat template consumes it (OpenAI roles).
#include <string>

namespace calserve::model {
struct chat_message {
    std::string role;     // system | user | assistant | tool
    std::string content;
};
}  // namespace calserve::model
